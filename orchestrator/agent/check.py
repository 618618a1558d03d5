"""The check that says whether the task is done: `cairn run --check CMD [--check-rounds N]`.

When the agent calls task_done, CMD runs in the run's sandbox, in the work directory, in a fresh shell:
a new bash that the toolbox starts beside the agent's long-lived one (the shell op's `fresh`), with the
container's own environment (that of its first process, as `docker exec` would give it). Nothing of the
agent's shell exists in it, so whatever the agent did there (cd, exported variables, functions such as
`cd() { exit 0; }`, aliases, shell options, an activated venv) can neither help the check pass nor make
it fail. What the agent did to the container's files it can: see docs/hostile.md. Exit code 0 passes; a non-zero code,
a timeout (`check.timeout`) or a sandbox that cannot run it fails.

Its whole output is saved among cairn's own files (`check_path`, beside the offloaded outputs) and a
CheckFinished event records the verdict. A failed check leaves the run `done` with its check failed
(exit code 1), unless rounds are left: then what the agent is shown of the output (shaped like a tool
result: whole when small, else a preview and the file's path) goes back to it as a message, and the run
goes on until its next task_done, when the check runs again. A person's message (`cairn resume
--message`, `cairn say`) gives the check its rounds again.
"""

from __future__ import annotations

import time
from typing import Protocol

from orchestrator.config import RunConfig
from orchestrator.context import TokenCounter
from orchestrator.context.offload import check_path, is_big, preview
from orchestrator.agent.guards import Finished
from orchestrator.agent.state import RunState
from orchestrator.errors import ToolError
from orchestrator import events as ev
from orchestrator.ports import Sandbox


class Checked(Protocol):
    """What the check uses of the agent whose task_done it checks (loop.Loop, which calls it)."""

    cfg: RunConfig
    state: RunState
    sandbox: Sandbox
    counter: TokenCounter

    def emit(self, event: ev.Event) -> None: ...

    def save_file(self, path: str, text: str) -> None: ...


def check_done(agent: Checked, step: int, done: Finished) -> Finished | None:
    """Runs the check after a task_done of `agent` (loop.Loop) and records it; returns how the run ends,
    or None when the check failed, a round is left, and its output went back to the agent."""
    check = agent.cfg.check
    event = run_check(agent, step)
    event.sent_back = not event.passed and agent.state.check_rounds < check.rounds
    agent.emit(event)
    if event.sent_back:
        used = agent.state.check_rounds
        agent.emit(ev.UserMessage(step=step, source="check", text=feedback(event, agent.cfg.sandbox.workdir)
                                  + f"\n\n(check round {used} of {check.rounds})"))
        return None
    if not event.passed:
        done.reason = f"task_done, but the check failed: {_how(event)}"
    return done


def run_check(agent: Checked, step: int) -> ev.CheckFinished:
    """Runs the check in the agent's sandbox and saves its output; the event is not emitted here."""
    check = agent.cfg.check
    number = agent.state.checks + 1
    path = check_path(number)
    started = time.monotonic()
    base = {"step": step, "command": check.command, "round": number}
    try:
        # `fresh`: a new shell process of the toolbox's, beside the agent's shell, never inside it
        r = agent.sandbox.call("shell", command=check.command, fresh=True, timeout=check.timeout, save_as=path)
    except ToolError as exc:
        return ev.CheckFinished(**base, exit_code=None, passed=False, error=str(exc),
                                output=f"[the check could not be run: {exc}]",
                                duration_ms=round((time.monotonic() - started) * 1000, 3))
    text = r["output"]
    error = None
    if not r.get("truncated"):  # a big output is in `path` already: the toolbox streamed it there
        try:
            agent.save_file(path, text)
        except ToolError as exc:
            path, error = None, f"its output could not be saved: {exc}"
    ctx = agent.cfg.context
    shown = preview(text, path, ctx) if path and (r.get("truncated") or is_big(
        text, ctx.offload_tokens, agent.counter.count_text)) else text
    timed_out = bool(r.get("timed_out"))
    seconds = r.get("duration_ms") / 1000 if isinstance(r.get("duration_ms"), (int, float)) else 0.0
    facts = (f"[timed out after {check.timeout:g} s; its processes were killed; exit code 124]" if timed_out
             else f"[exit code {r['exit_code']!r}, {seconds:.1f} s]")
    if r.get("truncated"):
        facts += f"\n[the output was {r['output_bytes']} bytes, {r['output_lines']} lines; all of it is in {path}]"
    notes = [n for n in (r.get("note"), r.get("sandbox_restarted"), error) if n]
    code = r["exit_code"]
    passed = type(code) is int and code == 0 and not timed_out  # never `false`, `0.0` or "0": only exit 0 passes
    return ev.CheckFinished(**base, exit_code=code if type(code) is int else None, passed=passed,
                            output_path=path, output="\n".join([shown.rstrip("\n"), facts, *notes]),
                            timed_out=timed_out, duration_ms=r.get("duration_ms"), error=error)


def feedback(event: ev.CheckFinished, workdir: str) -> str:
    """The message that tells the agent its check failed, with what it is shown of the output."""
    return (f"The check of this task failed: `{event.command}` ({_how(event)}), run in {workdir} in a fresh shell "
            "after your task_done. The task is not done until the check passes: find the cause, fix it, then "
            f"call task_done again.\n\nThe check's output"
            + (f" (saved whole in {event.output_path})" if event.output_path else "") + f":\n{event.output}")


def last_failed(events: list[ev.Event]) -> ev.CheckFinished | None:
    """The run's last check, when it failed and its output was not sent back to the agent: what a plain
    `cairn resume` of a done run gives the agent to go on with."""
    for event in reversed(events):
        if isinstance(event, ev.CheckFinished):
            return None if event.passed or event.sent_back else event
        if isinstance(event, ev.UserMessage):
            return None
    return None


def _how(event: ev.CheckFinished) -> str:
    if event.exit_code is None:
        return "it could not be run"
    if event.timed_out:
        return "it timed out"
    return f"exit code {event.exit_code}"
