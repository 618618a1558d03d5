"""Per-call overhead of the toolbox against a `docker exec` per call, and how long a sandbox takes to start.

    python bench/sandbox_latency.py [--image TAG] [--toolbox-calls 200] [--exec-calls 50] [--starts 5]

Both sides run the same trivial work in the same container, in the default profile (root inside the
wall): the shell command `true`, and reading a small file (`read` op / `cat`). `docker exec` goes through
docker-py's `exec_run` (create + start + inspect, the same API calls the docker CLI makes).

Starts: a cold start is a fresh container made and its toolbox answering (what a new run pays); a warm
start is the run's kept container started again with a new toolbox (what `cairn resume` pays); both
beside `docker run --rm IMAGE true` through docker-py, the engine's own floor for a container.
The last line is machine-readable: `toolbox_ms=<median> docker_exec_ms=<median> ratio=<docker/toolbox>
cold_start_ms=<median> warm_start_ms=<median> docker_run_ms=<median>`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from orchestrator.config import SandboxConfig  # noqa: E402
from orchestrator.sandbox.docker.sandbox import DockerSandbox  # noqa: E402


def median_ms(action, calls: int) -> float:
    for _ in range(min(10, calls)):  # warm up: first calls pay for imports and page faults
        action()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def default_image() -> str:
    if os.environ.get("CAIRN_TEST_IMAGE"):
        return os.environ["CAIRN_TEST_IMAGE"]
    from orchestrator.sandbox.docker.image import ensure_image

    return ensure_image()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", help="sandbox image (default: $CAIRN_TEST_IMAGE, else cairn's own)")
    parser.add_argument("--toolbox-calls", type=int, default=200)
    parser.add_argument("--exec-calls", type=int, default=50)
    parser.add_argument("--starts", type=int, default=5)
    options = parser.parse_args()
    image = options.image or default_image()
    starts = measure_starts(image, options.starts)

    with tempfile.TemporaryDirectory(prefix="cairn-bench-") as workspace:
        Path(workspace, "small.txt").write_text("".join(f"line {i}\n" for i in range(20)))
        with DockerSandbox(f"bench-{os.getpid()}", Path(workspace), SandboxConfig(), image) as sandbox:
            container = sandbox.container
            rows = [
                ("shell `true`",
                 median_ms(lambda: sandbox.call("shell", command="true"), options.toolbox_calls),
                 median_ms(lambda: container.exec_run(["true"]), options.exec_calls)),
                ("read small.txt",
                 median_ms(lambda: sandbox.call("read", path="small.txt"), options.toolbox_calls),
                 median_ms(lambda: container.exec_run(["cat", "/workspace/small.txt"]), options.exec_calls)),
            ]
    print(f"image {image}; toolbox: {options.toolbox_calls} calls, docker exec (docker-py exec_run): "
          f"{options.exec_calls} calls; medians")
    print(f"{'work':<16}{'toolbox ms':>12}{'docker exec ms':>16}{'ratio':>8}")
    for name, toolbox_ms, exec_ms in rows:
        print(f"{name:<16}{toolbox_ms:>12.3f}{exec_ms:>16.3f}{exec_ms / toolbox_ms:>8.1f}")
    print(f"sandbox start ({options.starts} times, medians): cold (fresh container + toolbox ready) "
          f"{starts['cold']:.0f} ms; warm (kept container started again + toolbox) {starts['warm']:.0f} ms; "
          f"`docker run --rm IMAGE true` {starts['run']:.0f} ms")
    _, toolbox_ms, exec_ms = rows[0]
    print(f"toolbox_ms={toolbox_ms:.3f} docker_exec_ms={exec_ms:.3f} ratio={exec_ms / toolbox_ms:.1f} "
          f"cold_start_ms={starts['cold']:.0f} warm_start_ms={starts['warm']:.0f} docker_run_ms={starts['run']:.0f}")


def measure_starts(image: str, count: int) -> dict[str, float]:
    """Median milliseconds of a cold start, a warm start, and a bare `docker run --rm`."""
    from orchestrator.sandbox.docker.engine import connect

    client = connect()
    cold, warm, bare = [], [], []
    with tempfile.TemporaryDirectory(prefix="cairn-bench-") as workspace:
        for i in range(count):
            box = DockerSandbox(f"bench-start-{os.getpid()}-{i}", Path(workspace), SandboxConfig(), image, client,
                          keep=True)
            try:
                begin = time.perf_counter()
                box.start()
                cold.append(time.perf_counter() - begin)
                box.stop()
                begin = time.perf_counter()
                box.start()
                warm.append(time.perf_counter() - begin)
                assert box.reused
            finally:
                box.remove()
            begin = time.perf_counter()
            client.containers.run(image, ["true"], entrypoint=[], remove=True, network_mode="none")
            bare.append(time.perf_counter() - begin)
    return {name: statistics.median(times) * 1000 for name, times in (("cold", cold), ("warm", warm), ("run", bare))}


if __name__ == "__main__":
    main()
