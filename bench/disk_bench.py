"""What measuring a run's disk use costs (`--max-disk`, orchestrator/store/disk.py), beside `du -s`.

    python bench/disk_bench.py [--files 50000] [--image cairn-base:bookworm] [--repeats 5]

(a) The workspace: a tree of N small files in 100 directories; the median of `tree_usage` (the walk cairn
    does after a step), beside `du -s` (a subprocess) of the same tree in the same run.
(b) The container's writable layer: a container of IMAGE with the same N files written in its layer; the
    median of `DockerSandbox.disk_usage` (the engine's `SizeRw`, a walk of the layer by the engine), beside
    the same call on the container with an empty layer.

The last line is `walk_ms=<n> du_ms=<n> walk_vs_du=<ratio> layer_ms=<n> layer_empty_ms=<n> files=<N>`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from orchestrator.config import SandboxConfig  # noqa: E402
from orchestrator.store.disk import tree_usage  # noqa: E402
from orchestrator.sandbox.docker.sandbox import DockerSandbox  # noqa: E402
from orchestrator.sandbox.docker.engine import connect  # noqa: E402


def median_ms(what: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        what()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def make_tree(root: Path, files: int) -> None:
    for n in range(files):
        directory = root / f"d{n % 100}"
        directory.mkdir(exist_ok=True)
        (directory / f"f{n}.txt").write_text(f"file {n}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=50_000)
    parser.add_argument("--image", default="cairn-base:bookworm")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="cairn-disk-bench-"))
    try:
        make_tree(root, args.files)
        walk = median_ms(lambda: tree_usage(root), args.repeats)
        du = median_ms(lambda: subprocess.run(["du", "-s", str(root)], capture_output=True, check=True), args.repeats)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"workspace of {args.files} files: tree_usage {walk:.1f} ms, du -s {du:.1f} ms")

    client = connect()
    box = client.containers.run(args.image, "sleep 600", detach=True, network_mode="none",
                                name=f"cairn-disk-bench-{os.getpid()}")
    try:
        sandbox = DockerSandbox("disk-bench", Path(tempfile.gettempdir()), SandboxConfig(), image=args.image, client=client)
        sandbox.container = box
        empty = median_ms(sandbox.disk_usage, args.repeats)
        box.exec_run(["sh", "-c", f"mkdir -p /opt/bench && cd /opt/bench && i=0; "
                                  f"while [ $i -lt {args.files} ]; do echo x > f$i; i=$((i+1)); done"])
        layer = median_ms(sandbox.disk_usage, args.repeats)
        print(f"container layer of {args.files} files: disk_usage {layer:.1f} ms (empty layer {empty:.1f} ms), "
              f"SizeRw {sandbox.disk_usage()} bytes")
    finally:
        box.remove(force=True)
    print(f"walk_ms={walk:.1f} du_ms={du:.1f} walk_vs_du={walk / du:.2f} layer_ms={layer:.1f} "
          f"layer_empty_ms={empty:.1f} files={args.files}")


if __name__ == "__main__":
    main()
