"""After a stop or a crash, before the loop goes on: every tool call that began and never finished is
closed with what became of it, and is never run again (exactly once, docs/design.md).

What became of it is read from the toolbox's journal (store/journal.py): a result it had is shaped as
it would have been live; a call that was killed, or never reached the sandbox, says so. Calls whose
tool can take them up (agent_delegate: the sub-agent goes on where its log ends; several that ran side
by side go on side by side) are finished first thing in the next `Loop.run`, and the calls after the
first of them in its step are closed after it.

The sandbox was started before this, which removed the crashed session's container: a command that
was cut off is dead by now, and its journal can no longer change.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Protocol

from orchestrator.config import RunConfig
from orchestrator.llm.types import ToolCall
from orchestrator.errors import ToolError
from orchestrator.ports import Sandbox, Store, ToolContext, ToolSandbox
from orchestrator import events as ev
from orchestrator.store import journal
from orchestrator.agent.parallel import Running
from orchestrator.agent.state import RunState
from orchestrator.tools.outcome import BadCall, Observation
from orchestrator.tools.registry import Registry


class Recovering(Protocol):
    """What recovery needs of the agent it recovers (loop.Loop, which calls it)."""

    run_dir: Store
    cfg: RunConfig
    sandbox: Sandbox
    state: RunState
    tools: Registry
    notices: list[str]
    cut_off: list[tuple[ToolCall, Callable[[int], Observation]]]
    approval_step: bool

    def emit(self, event: ev._Event) -> None: ...

    def finish(self, call: ToolCall, step: int, observation: Observation, duration_ms: float | None = None,
               label: str | None = None) -> None: ...

    def journal_key(self, step: int, call: ToolCall) -> str: ...

    def tool_context(self, step: int, call: ToolCall, label: str | None, sandbox: ToolSandbox | None = None,
                     journal_key: str | None = None) -> ToolContext: ...

    def checkpoint(self, step: int) -> None: ...

    def run_tools(self, calls: list[ToolCall], step: int, seen: set[str] | None = None) -> Any: ...

    def end_step(self, step: int, ending: Any) -> None: ...


def recover(agent: Recovering) -> None:
    record = agent.run_dir.read_journal()
    state = agent.state
    if record.problem:
        agent.emit(ev.Notice(step=state.step, text=f"the toolbox's journal was not read: {record.problem}"))
    for call in list(state.open_calls.values()):
        began = call.id in state.started
        if not began and state.approvals.holds(call.id):
            agent.approval_step = True  # asked or answered (agent/approvals.py): it and the calls after it go on in `run`
            break
        if began and _take_up(agent, call) is not None:
            # It goes on, with the others of its step it ran beside; the calls after it are closed after it.
            agent.cut_off = [(later, go_on) for later in state.open_calls.values() if later.id in state.started
                             and (go_on := _take_up(agent, later)) is not None]
            break
        if not began:
            agent.finish(call, state.step, Observation("not executed: the run stopped before this call", error=True))
            continue
        entry = record.get(agent.journal_key(state.step, call))
        # Named after its call id, like every call closed here: the step's other calls are not known.
        agent.finish(call, state.step, recovered(agent, call, entry), label=call.id)
    if not agent.cut_off:
        forget_the_rest(agent, record)
    workdir, sandbox = agent.cfg.sandbox.workdir, agent.sandbox
    if state.step and sandbox.reused:
        agent.notices.append(f"The run was resumed in the same sandbox: files in {workdir} and what was "
                             "installed outside it are intact; processes started before (servers, background "
                             "jobs, terminal sessions) and the shell's state are gone.")
    elif state.step:
        agent.notices.append(f"The run was resumed in a new sandbox: files in {workdir} are intact; anything "
                             f"installed or started outside {workdir} is gone." +
                             (f" ({sandbox.replaced})" if sandbox.replaced else ""))


def recovered(agent: Recovering, call: ToolCall, entry: journal.Entry | None) -> Observation:
    """The observation of a call cut off by a crash, from its journal entry."""
    if entry is not None and entry.state == "finished":
        replay = journal.Replay(entry.response, agent.sandbox.network_enabled)
        try:
            args = agent.tools.parse_arguments(call.name, call.arguments)
            return agent.tools.run(call.name, args, agent.tool_context(agent.state.step, call, call.id, replay))
        except (BadCall, ToolError) as exc:
            return Observation(f"error: {exc}", error=True)
        except (KeyError, TypeError, ValueError, AttributeError):  # the sandbox can write the journal
            return Observation("the run stopped after this call finished, and the journal's record of its "
                               "result is unreadable: it ran, its result is lost", error=True)
    if entry is not None:
        what = "command" if call.name == "shell_exec" else "call"
        ran = f" (it ran {entry.seconds:.1f} s)" if entry.seconds is not None else ""
        partial = entry.partial or {}
        footer = f"[killed: the run stopped while this {what} ran; it may have partly run{ran}]"
        if partial.get("truncated"):
            footer += (f"\n[its output so far was {partial.get('output_bytes')} bytes; only its head and tail "
                       f"came back; all of it is in {partial.get('output_path')}]")
        return Observation(str(partial.get("output") or ""), error=True, footer=footer,
                           saved_path=partial.get("output_path") if partial.get("truncated") else None)
    tool = agent.tools.get(call.name)
    if tool is None or tool.journaled:  # MCP calls go to their servers, not through the journal
        return Observation("not executed: the run stopped before this call reached the sandbox", error=True)
    return Observation("interrupted: the run stopped while this call went to its MCP server; it may or may "
                       "not have taken effect", error=True)


def _take_up(agent: Recovering, call: ToolCall) -> Callable[[int], Observation] | None:
    tool = agent.tools.get(call.name)
    return tool.take_up(agent, call) if tool is not None and tool.take_up else None


def finish_cut_off_step(agent: Recovering) -> None:
    """The rest of the step a crash cut off inside calls their tool takes up (agent_delegate): those calls
    go on, side by side as they ran (agent/parallel.py); each other call left is closed as `recover`
    closes one (from the journal if it began, else not executed); the results are logged in the order of
    the calls, and the step ends as every step does."""
    cut_off, agent.cut_off = agent.cut_off, []
    step, started = agent.state.step, time.monotonic()
    going = {call.id: Running(lambda go_on=go_on: go_on(step)) for call, go_on in cut_off}
    record = agent.run_dir.read_journal()
    for call in list(agent.state.open_calls.values()):
        # Named after its call id, as every call closed here: another of this step may have saved an output.
        if call.id in going:
            agent.finish(call, step, going[call.id].result(), (time.monotonic() - started) * 1000, label=call.id)
        elif call.id in agent.state.started:
            agent.finish(call, step, recovered(agent, call, record.get(agent.journal_key(step, call))), label=call.id)
        else:
            agent.finish(call, step, Observation("not executed: the run stopped before this call", error=True))
    forget_the_rest(agent, agent.run_dir.read_journal())
    agent.checkpoint(step)


def finish_approval_step(agent: Recovering) -> None:
    """The rest of the step that stopped for an approval (agent/approvals.py): the answered call and the
    calls after it run now, in order, and the step ends as every step does."""
    agent.approval_step, step = False, agent.state.step
    calls = list(agent.state.open_calls.values())
    # Named after their call ids: the step's earlier calls may have taken the plain names.
    agent.end_step(step, agent.run_tools(calls, step, seen={call.name for call in calls}))


def forget_the_rest(agent: Recovering, record: journal.Journal) -> None:
    """Once the calls a crash cut off are closed, the journal's records of this agent are needed no more:
    the sandbox is told (records of calls logged before the crash, whose logging it was never told, would
    stay for good). The run's own agent speaks for every record, its sub-agents', done by now, too; a
    sub-agent, for its own (another beside it may still need its own)."""
    own = None if getattr(agent, "parent", None) is None else journal.lane(agent.run_dir.journal_key(0, ""))
    _tell(agent.sandbox, [key for key in record.entries if own is None or journal.lane(key) == own])


def logged(agent: Recovering, step: int, call: ToolCall) -> None:
    """The call's result is in the run's log (Loop.finish): if its tool is journaled, the sandbox is told,
    and its journal may drop the call's record (PROTOCOL.md, "The journal")."""
    tool = agent.tools.get(call.name)
    if tool is not None and tool.journaled:
        _tell(agent.sandbox, [agent.journal_key(step, call)])


def _tell(sandbox: object, keys: list[str]) -> None:
    told = getattr(sandbox, "recorded", None)  # a sandbox of one's own may keep no journal
    if told is not None:
        for key in keys:
            told(key)
