"""Per-call overhead of the toolbox against a `docker exec` per call.

    python bench/sandbox_latency.py [--image TAG] [--toolbox-calls 200] [--exec-calls 50]

Both sides run the same trivial work in the same container: the shell command `true`, and reading a small
file (`read` op / `cat`). `docker exec` goes through docker-py's `exec_run` (create + start + inspect,
the same API calls the docker CLI makes). The last line is machine-readable:
`toolbox_ms=<median> docker_exec_ms=<median> ratio=<docker/toolbox>` for the `true` command.
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
from orchestrator.sandbox import Sandbox  # noqa: E402


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
    from orchestrator.sandbox.image import ensure_image

    return ensure_image()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", help="sandbox image (default: $CAIRN_TEST_IMAGE, else cairn's own)")
    parser.add_argument("--toolbox-calls", type=int, default=200)
    parser.add_argument("--exec-calls", type=int, default=50)
    options = parser.parse_args()
    image = options.image or default_image()

    with tempfile.TemporaryDirectory(prefix="cairn-bench-") as workspace:
        Path(workspace, "small.txt").write_text("".join(f"line {i}\n" for i in range(20)))
        with Sandbox(f"bench-{os.getpid()}", Path(workspace), SandboxConfig(), image) as sandbox:
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
    _, toolbox_ms, exec_ms = rows[0]
    print(f"toolbox_ms={toolbox_ms:.3f} docker_exec_ms={exec_ms:.3f} ratio={exec_ms / toolbox_ms:.1f}")


if __name__ == "__main__":
    main()
