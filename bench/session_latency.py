"""Round trip of a terminal session beside shell_exec, in one run on one sandbox.

    python bench/session_latency.py [--image TAG] [--calls 100] [--wait 0.02]

Both sides go through the tools as the loop calls them (registry, toolbox, rendering), on the same
container, with the same command line `echo hi`:
- shell_exec: `echo hi` run to its end in the toolbox's shell;
- shell_send: `echo hi` and Enter typed into an idle interactive bash in a session, answered after
  `wait` seconds (a session's answer waits `wait` by contract; it returns sooner only when the program
  exits), and the answer must hold the echo of the line and `hi`;
- a read of the same session with empty keys and wait 0: the toolbox's and the renderer's own cost.

cairn's own overhead of a send is its round trip minus the `wait` it was told to wait. The last line is
machine-readable: `shell_exec_ms=<median> shell_send_ms=<median> wait_ms=<wait> overhead_ms=<send - wait>
read_ms=<median> ratio=<send/exec> overhead_ratio=<(send - wait)/exec>`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from orchestrator.config import SandboxConfig  # noqa: E402
from orchestrator.sandbox.docker.sandbox import DockerSandbox  # noqa: E402
from orchestrator.agent.delegate import delegate_tool  # noqa: E402
from orchestrator.tools.builtin import builtin_tools  # noqa: E402
from orchestrator.tools.registry import Registry, ToolContext  # noqa: E402


class Agentish:
    """The registry hands this to agent_delegate only."""


def default_image() -> str:
    if os.environ.get("CAIRN_TEST_IMAGE"):
        return os.environ["CAIRN_TEST_IMAGE"]
    from orchestrator.sandbox.docker.image import ensure_image

    return ensure_image()


def timed(action, calls: int) -> list[float]:
    for _ in range(min(5, calls)):  # warm up
        action()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        action()
        times.append((time.perf_counter() - start) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", help="sandbox image (default: $CAIRN_TEST_IMAGE, else cairn's own)")
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--wait", type=float, default=0.02, help="shell_send's wait, in seconds")
    options = parser.parse_args()
    registry = Registry(builtin_tools(delegate_tool(Agentish)))
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "cairn").mkdir()
        with DockerSandbox(f"bench-sessions-{os.getpid()}", Path(tmp) / "ws", SandboxConfig(), options.image or default_image(),
                     cairn_mount=Path(tmp) / "cairn") as sandbox:
            ctx = ToolContext(sandbox, sandbox.cfg, "/cairn/obs/bench.txt")

            def tool(name: str, **args: object):
                return registry.run(name, registry.parse_arguments(name, json.dumps(args)), ctx)

            def exec_echo() -> None:
                assert tool("shell_exec", command="echo hi").text == "hi\n"

            def send_echo() -> None:
                text = tool("shell_send", session="sh", keys="echo hi\n", wait=options.wait).text
                assert text.splitlines()[-2:] == ["hi", "$"] or "hi" in text.splitlines(), text

            def read_only() -> None:
                tool("shell_send", session="sh", keys="", wait=0)

            tool("shell_start", command="env PS1='$ ' bash --norc -i", session="sh", wait=1)
            sends = timed(send_echo, options.calls)
            execs = timed(exec_echo, options.calls)
            reads = timed(read_only, options.calls)
            tool("shell_stop", session="sh")
    send, run, read = (statistics.median(t) for t in (sends, execs, reads))
    wait_ms = options.wait * 1000
    print(f"{'':28}{'median':>9}{'p90':>9}")
    for label, times in (("shell_exec `echo hi`", execs), (f"shell_send (wait {wait_ms:g} ms)", sends),
                         ("shell_send read (wait 0)", reads)):
        print(f"{label:28}{statistics.median(times):8.2f}ms{sorted(times)[int(len(times) * 0.9)]:8.2f}ms")
    print(f"a send answers after its wait ({wait_ms:g} ms) by contract; cairn's own overhead beyond it is "
          f"{send - wait_ms:.2f} ms, {(send - wait_ms) / run:.2f}x a whole shell_exec")
    print(f"shell_exec_ms={run:.2f} shell_send_ms={send:.2f} wait_ms={wait_ms:g} overhead_ms={send - wait_ms:.2f} "
          f"read_ms={read:.2f} ratio={send / run:.2f} overhead_ratio={(send - wait_ms) / run:.2f}")


if __name__ == "__main__":
    main()
