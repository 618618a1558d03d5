"""What the Python carried in on a volume costs at start, beside the image's own python3.

Two figures, each beside its baseline measured in the same run:
- interpreter start (`python3 -I -S -c pass`, timed inside one container, so no `docker exec` is
  counted): the carried Python through its own loader, and cairn's image's python3 (with `-I -S`, as
  the toolbox runs, and without, as it ran before issue 34);
- toolbox ready (container create + toolbox ready line, `DockerSandbox.start()`): an image without Python
  (`cairn-base:bookworm`, carried Python) and cairn's own image.

    PYTHONPATH=. python bench/carried_python.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from orchestrator.config import SandboxConfig
from orchestrator.sandbox import carried
from orchestrator.sandbox.docker import python_volume
from orchestrator.sandbox.docker.sandbox import DockerSandbox
from orchestrator.sandbox.docker.container import carried_python
from orchestrator.sandbox.docker.engine import connect
from orchestrator.sandbox.docker.image import ensure_image

NO_PYTHON_IMAGE = "cairn-base:bookworm"


def interpreter_ms(client, image: str, volume: str, repeats: int) -> tuple[float, float, float]:
    loop = (f"for i in $(seq {repeats}); do s=$(date +%s%N); {' '.join(carried.argv('-c'))} pass; "
            "m=$(date +%s%N); python3 -I -S -c pass; e=$(date +%s%N); python3 -c pass; f=$(date +%s%N); "
            "echo $((m-s)) $((e-m)) $((f-e)); done")
    box = client.containers.run(image, entrypoint=["sh", "-c", loop], command=[], detach=True, network_mode="none",
                                volumes={volume: {"bind": carried.MOUNT, "mode": "ro"}})
    try:
        box.wait(timeout=120)
        rows = [line.split() for line in box.logs().decode().split("\n") if line.strip()]
    finally:
        box.remove(force=True)
    return tuple(statistics.median(int(r[i]) for r in rows) / 1e6 for i in range(3))


def ready_ms(image: str, repeats: int) -> float:
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(repeats):
            sandbox = DockerSandbox(f"bench-carried-{i}", Path(tmp) / "ws", SandboxConfig(), image)
            t0 = time.perf_counter()
            sandbox.start()
            times.append((time.perf_counter() - t0) * 1000)
            sandbox.stop()
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    repeats = parser.parse_args().repeats
    client = connect()
    image = ensure_image()
    volume = carried_python(client)
    carried, own, plain = interpreter_ms(client, image, volume, repeats)
    print(f"interpreter start: carried {carried:.1f} ms, image's python3 {own:.1f} ms (ratio {carried / own:.2f}); "
          f"image's python3 without -I -S {plain:.1f} ms")
    without, with_python = ready_ms(NO_PYTHON_IMAGE, repeats), ready_ms(image, repeats)
    print(f"toolbox ready (create + start): {NO_PYTHON_IMAGE} {without:.0f} ms, cairn's image {with_python:.0f} ms "
          f"(ratio {without / with_python:.2f})")


if __name__ == "__main__":
    main()
