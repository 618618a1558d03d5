"""How soon a terminal session answers, beside shell_exec of the same line, in one run on one sandbox.

    python bench/session_latency.py [--image TAG] [--calls 20] [--wait 10] [--runtime runsc] [--lockdown]
                                    [--repl COMMAND]

Every figure goes through the tools as the loop calls them (registry, toolbox, rendering), on the same
container:
- shell_exec `echo hi`, run to its end in the toolbox's shell: the baseline;
- shell_send `echo hi` and Enter to an idle interactive bash, and `1+1` and Enter to an idle python3 REPL,
  each with `wait` 10: the answer comes as soon as the program waits for input again (the target: within
  2x the shell_exec plus 5 ms of cairn's own overhead, median of `--calls`);
- the same REPL send with the early answer turned off (the toolbox's `early: false`, how every answer
  behaved before: the whole `wait`), a few times;
- shell_send with empty keys to a busy program (a loop that prints and sleeps) with `wait` 1: it must
  still wait its whole wait.

The last line is machine-readable: `shell_exec_ms=<median> bash_send_ms=<median> repl_send_ms=<median>
target_ms=<2*exec+5> full_wait_ms=<median> busy_ms=<min> busy_wait_ms=<wait> ok=<0|1>`; `ok` is 1 when
both early sends meet the target and no busy answer came before its wait.
"""

from __future__ import annotations

import argparse
import base64
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

BUSY_WAIT = 1.0


class Agentish:
    """The registry hands this to agent_delegate only."""


def default_image() -> str:
    if os.environ.get("CAIRN_TEST_IMAGE"):
        return os.environ["CAIRN_TEST_IMAGE"]
    from orchestrator.sandbox.docker.image import ensure_image

    return ensure_image()


def timed(action, calls: int, warm_up: int = 3) -> list[float]:
    for _ in range(min(warm_up, calls)):
        action()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        action()
        times.append((time.perf_counter() - start) * 1000)
    return times


def p90(times: list[float]) -> float:
    return sorted(times)[int(len(times) * 0.9)] if len(times) > 1 else times[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", help="sandbox image (default: $CAIRN_TEST_IMAGE, else cairn's own)")
    parser.add_argument("--calls", type=int, default=20, help="sends and commands measured each (median)")
    parser.add_argument("--wait", type=float, default=10.0, help="the sends' wait, in seconds")
    parser.add_argument("--full-calls", type=int, default=2, help="sends measured with the early answer off")
    parser.add_argument("--runtime", help="an OCI runtime (runsc: gVisor)")
    parser.add_argument("--lockdown", action="store_true", help="the --lockdown profile")
    parser.add_argument("--repl", default="python3 -q", help="the Python REPL's command line (an image without "
                        "python3: the carried one, see orchestrator/sandbox/carried.py)")
    options = parser.parse_args()
    registry = Registry(builtin_tools(delegate_tool(Agentish)))
    cfg = SandboxConfig(runtime=options.runtime, lockdown=options.lockdown)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "cairn").mkdir()
        with DockerSandbox(f"bench-sessions-{os.getpid()}", Path(tmp) / "ws", cfg, options.image or default_image(),
                           cairn_mount=Path(tmp) / "cairn") as sandbox:
            ctx = ToolContext(sandbox, sandbox.cfg, "/cairn/obs/bench.txt")

            def tool(name: str, **args: object):
                return registry.run(name, registry.parse_arguments(name, json.dumps(args)), ctx)

            def exec_echo() -> None:
                assert tool("shell_exec", command="echo hi").text == "hi\n"

            def bash_send() -> None:
                answer = tool("shell_send", session="sh", keys="echo hi\n", wait=options.wait)
                assert answer.text.splitlines()[-2:] == ["hi", "$"], answer.text
                assert "and waits for input" in answer.footer, answer.footer

            def repl_send() -> None:
                answer = tool("shell_send", session="py", keys="1+1\n", wait=options.wait)
                assert answer.text.splitlines()[-2:] == ["2", ">>>"], answer.text
                assert "and waits for input" in answer.footer, answer.footer

            def repl_full_wait() -> None:  # the toolbox op itself: the tools always ask for the early answer
                result = sandbox.call("session_send", name="py", keys="1+1\n", wait=options.wait, early=False)
                assert base64.b64decode(result["head"]).endswith(b">>> ") and not result["waits_for_input"]

            def busy_read() -> None:
                answer = tool("shell_send", session="busy", keys="", wait=BUSY_WAIT)
                assert "tick" in answer.text and "and waits for input" not in answer.footer, answer.text

            tool("shell_start", command="env PS1='$ ' bash --norc -i", session="sh", wait=options.wait)
            tool("shell_start", command=options.repl, session="py", wait=options.wait)
            tool("shell_start", command="while true; do echo tick; sleep 0.1; done", session="busy", wait=0)
            execs = timed(exec_echo, options.calls)
            bash = timed(bash_send, options.calls)
            repl = timed(repl_send, options.calls)
            full = timed(repl_full_wait, options.full_calls, warm_up=0) if options.full_calls else []
            busy = timed(busy_read, 5)
            for name in ("sh", "py", "busy"):
                tool("shell_stop", session=name)
    run = statistics.median(execs)
    target = 2 * run + 5
    rows = [("shell_exec `echo hi`", execs), (f"shell_send `echo hi` to bash, wait {options.wait:g}", bash),
            (f"shell_send `1+1` to python3, wait {options.wait:g}", repl),
            (f"  the same, early answer off", full), (f"shell_send '' to a busy loop, wait {BUSY_WAIT:g}", busy)]
    print(f"{'':44}{'median':>11}{'p90':>11}")
    for label, times in rows:
        if times:
            print(f"{label:44}{statistics.median(times):9.2f}ms{p90(times):9.2f}ms")
    met = statistics.median(bash) <= target and statistics.median(repl) <= target
    early_busy = min(busy) < BUSY_WAIT * 1000
    print(f"target for an idle program's answer: 2x shell_exec + 5 ms = {target:.2f} ms: "
          f"{'met' if met else 'MISSED'}; a busy program's answer came after its {BUSY_WAIT:g} s wait: "
          f"{'no, too early' if early_busy else 'yes'} (shortest {min(busy):.0f} ms)")
    full_ms = statistics.median(full) if full else float("nan")
    print(f"shell_exec_ms={run:.2f} bash_send_ms={statistics.median(bash):.2f} repl_send_ms={statistics.median(repl):.2f} "
          f"target_ms={target:.2f} full_wait_ms={full_ms:.0f} busy_ms={min(busy):.0f} "
          f"busy_wait_ms={BUSY_WAIT * 1000:.0f} ok={int(met and not early_busy)}")


if __name__ == "__main__":
    main()
