"""Calls of one answer side by side, beside the same calls one after the other, in one run on one sandbox.

    python bench/parallel_calls.py [--image TAG] [--delay 0.5] [--page-seconds 1]

Both parts go through the agent loop (orchestrator.Agent) on the Docker sandbox, with a model in this
process that plays a script per agent (tests/agents_by_task.py) and takes `--delay` seconds to answer,
as a model does:

- sub-agents: two agent_delegate calls in one answer, beside each child run alone. Each child runs a
  command, reads a file and writes one before it is done, so its time is mostly its model's, with a
  little of the sandbox's (commands of two children take turns in the toolbox). The target: the two
  together take at most 1.3x the longer alone.
- pages: three web_fetch calls in one answer, beside the same three in three answers, of a server
  started in the sandbox itself (the sandbox's network on, its own loopback) whose every page takes
  `--page-seconds`. The target: about one page's time.

Times are from the run's own events: from the first call's start to the last call's end. The last line is
machine-readable: `child_a_s=<s> child_b_s=<s> children_together_s=<s> children_ratio=<together/longer>
pages_one_by_one_s=<s> pages_together_s=<s> page_s=<s> ok=<0|1>`.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from orchestrator.api import Agent  # noqa: E402
from orchestrator.config import SandboxConfig  # noqa: E402
from orchestrator.sandbox.docker.sandbox import DockerSandbox  # noqa: E402
from orchestrator.store.run_dir import RunDir  # noqa: E402
from tests.agents_by_task import ByTask  # noqa: E402
from tests.slow_pages import SCRIPT as PAGES  # noqa: E402



def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def calls(*pairs: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments} for name, arguments in pairs]}


def done(summary: str) -> dict[str, Any]:
    return call("task_done", summary=summary)


def child(name: str, pause: float) -> list[dict[str, Any]]:
    return [call("shell_exec", command=f"sleep {pause}; echo {name} > {name}.txt"), call("file_read", path=f"{name}.txt"),
            call("file_write", path=f"{name}-copy.txt", content=name), done(f"{name} written")]


def span(run_dir: Path, tool: str) -> float:
    """Seconds from the first `tool` call's start to the last one's end, in the run's log."""
    events = [e for e in RunDir(run_dir).events.read()[0] if getattr(e, "name", None) == tool]
    starts = [e.ts for e in events if e.type == "tool_started"]
    ends = [e.ts for e in events if e.type == "tool_finished"]
    assert len(starts) == len(ends) and starts, f"no whole {tool} calls in {run_dir}"
    return max(ends) - min(starts)


def play(sandbox: DockerSandbox, runs: Path, scripts: dict[str, list[dict[str, Any]]], delay: float,
         settings: dict[str, Any] | None = None) -> Path:
    task = next(iter(scripts))
    result = Agent(ByTask(scripts, delay=delay), sandbox, runs_dir=runs, settings=settings or {}).run(task)
    assert result.status == "done", (result.status, result.reason)
    return Path(result.run_dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", help="sandbox image (default: $CAIRN_TEST_IMAGE, else cairn's own)")
    parser.add_argument("--delay", type=float, default=0.5, help="seconds the model takes to answer")
    parser.add_argument("--page-seconds", type=float, default=1.0, help="seconds each page takes")
    options = parser.parse_args()
    image = options.image or os.environ.get("CAIRN_TEST_IMAGE")
    if not image:
        from orchestrator.sandbox.docker.image import ensure_image

        image = ensure_image()
    a, b = child("a", 0.3), child("b", 0.2)
    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp) / "runs"
        (Path(tmp) / "cairn").mkdir()
        cfg = SandboxConfig(network="bridge")
        with DockerSandbox(f"bench-parallel-{os.getpid()}", Path(tmp) / "ws", cfg, image,
                           cairn_mount=Path(tmp) / "cairn") as sandbox:
            alone_a = span(play(sandbox, runs, {"one child": [call("agent_delegate", task="a"), done("ok")], "a": a},
                                options.delay), "agent_delegate")
            alone_b = span(play(sandbox, runs, {"one child": [call("agent_delegate", task="b"), done("ok")], "b": b},
                                options.delay), "agent_delegate")
            both = [calls(("agent_delegate", {"task": "a"}), ("agent_delegate", {"task": "b"})), done("ok")]
            together = span(play(sandbox, runs, {"two children": both, "a": a, "b": b}, options.delay), "agent_delegate")

            urls = [f"http://127.0.0.1:8779/{name}" for name in "xyz"]
            server = [call("file_write", path="pages.py", content=PAGES),
                      call("shell_start", command=f"python3 pages.py 8779 {options.page_seconds}", session="pages", wait=1)]
            never = {"approvals": {"mode": "never"}, "sandbox": {"network": "bridge"}}
            one_by_one = span(play(sandbox, runs, {"pages one by one": [
                *server, *(call("web_fetch", url=url) for url in urls), call("shell_stop", session="pages"),
                done("ok")]}, 0.0, never), "web_fetch")
            pages_together = span(play(sandbox, runs, {"pages together": [
                *server, calls(*(("web_fetch", {"url": url}) for url in urls)), call("shell_stop", session="pages"),
                done("ok")]}, 0.0, never), "web_fetch")
    longer = max(alone_a, alone_b)
    ratio = together / longer
    page = options.page_seconds
    print(f"{'':60}{'seconds':>9}")
    for label, value in ((f"child a alone (4 answers of {options.delay:g} s)", alone_a),
                         (f"child b alone (4 answers of {options.delay:g} s)", alone_b),
                         ("children a and b, two agent_delegate calls in one answer", together),
                         (f"three web_fetches of {page:g} s pages, one answer each", one_by_one),
                         ("the same three in one answer", pages_together)):
        print(f"{label:60}{value:9.2f}")
    met = ratio <= 1.3 and pages_together <= 1.5 * page
    print(f"children side by side: {ratio:.2f}x the longer alone (target at most 1.3x); pages side by side: "
          f"{pages_together:.2f} s for three of {page:g} s (target about {page:g} s): {'met' if met else 'MISSED'}")
    print(f"child_a_s={alone_a:.2f} child_b_s={alone_b:.2f} children_together_s={together:.2f} children_ratio={ratio:.2f} "
          f"pages_one_by_one_s={one_by_one:.2f} pages_together_s={pages_together:.2f} page_s={page:g} ok={int(met)}")


if __name__ == "__main__":
    main()
