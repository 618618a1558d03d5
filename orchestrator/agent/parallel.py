"""Calls of one model answer that run at once: which may, and running them.

A call that cannot interfere with the calls beside it runs at the same time as them:

- `file_read` and `web_fetch` change nothing another call reads (a fetched page is saved under a name of
  its own in /cairn/web/), so consecutive ones run together;
- `agent_delegate`: consecutive sub-agents run side by side, each in its own context, on the same
  sandbox (whose toolbox runs their read-only ops together and the others one at a time).

Everything else runs alone, in the order the model gave: `shell_*`, `file_write`, `file_edit`,
`todo_write` change the sandbox, MCP tools go to servers of their own (read-only ones too: a server that
died is started again by the call that finds it down, one caller at a time), and `task_done` and
`ask_user` end the step. Groups never mix reads and sub-agents: a read after a sub-agent must see what
the sub-agent wrote, as it would one after the other.

Within a group, approvals are asked one call at a time, in order, before any of them runs; each call's
ToolStarted is logged as it begins, so the display shows them running together; each runs on a thread of
its own; their results are logged in the order of the calls, each as soon as it and the calls before it
are done, and each toolbox op is journaled under its call's key as always (exactly once, docs/design.md).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Callable, Generic, Iterator, Protocol, TypeVar

from orchestrator.agent.approvals import Clearance
from orchestrator.agent.guards import Finished
from orchestrator.llm.types import ToolCall
from orchestrator.tools.outcome import Observation

T = TypeVar("T")
KINDS = {"file_read": "read", "web_fetch": "read", "agent_delegate": "delegate"}
Performed = tuple[Observation, "Finished | None", float]  # the observation, how it ends the run, its ms


class Scheduling(Protocol):
    """What a group needs of the agent whose calls it runs (loop.Loop)."""

    def clear(self, call: ToolCall, step: int) -> Clearance: ...

    def begin(self, call: ToolCall, step: int) -> None: ...

    def perform(self, clearance: Clearance, step: int, label: str | None) -> Performed: ...

    def record(self, clearance: Clearance, step: int, label: str | None, done: Performed) -> Finished | None: ...


def labelled(calls: list[ToolCall], seen: set[str], tag: str) -> list[tuple[ToolCall, str | None]]:
    """Each call with the label its saved output is named by: none for the step's first call of a tool
    (`<step>-<tool>.txt`), its call id for the next ones (`seen`: tools that took the plain name already);
    a sub-agent's `tag` marks its own (agent/delegate.py)."""
    out = []
    for call in calls:
        label = call.id if call.name in seen else None
        seen.add(call.name)
        out.append((call, f"{tag}-{label}" if tag and label else tag or label))
    return out


def groups(calls: list[tuple[ToolCall, str | None]]) -> Iterator[list[tuple[ToolCall, str | None]]]:
    """The calls (each with the label its saved output is named by) in runs that go together: a run of
    consecutive calls of one kind (KINDS), else one call alone."""
    group: list[tuple[ToolCall, str | None]] = []
    for call, label in calls:
        kind = KINDS.get(call.name)
        if group and (kind is None or kind != KINDS.get(group[0][0].name)):
            yield group
            group = []
        group.append((call, label))
        if kind is None:
            yield group
            group = []
    if group:
        yield group


def run_together(agent: Scheduling, group: list[tuple[ToolCall, str | None]], step: int) -> Finished | None:
    """Runs a group of calls at once and logs their results in order; returns how the run ends, if a call
    ends it. A question no one can answer now (the run then waits) lets the calls before it run."""
    cleared: list[tuple[Clearance, str | None]] = []
    waiting: Finished | None = None
    for call, label in group:
        try:
            cleared.append((agent.clear(call, step), label))
        except Finished as held:
            waiting = held
            break
    runs = []
    for clearance, label in cleared:
        agent.begin(clearance.call, step)
        runs.append((clearance, label, Running(lambda c=clearance, l=label: agent.perform(c, step, l))))
    ending: Finished | None = None
    try:
        for clearance, label, running in runs:
            ending = agent.record(clearance, step, label, running.result()) or ending
    except Exception:
        for _, _, running in runs:  # a failure (the sandbox gone for good): the others end first, unlogged;
            running.join()          # a resume gives them their results from the journal
        raise
    if waiting is not None:
        raise waiting
    return ending


class AtOnce:
    """Which sub-agents of a run work at the same time (agent/delegate.py asks): a child's workspace diff
    then holds what the others changed too, and its result says so."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[Path, list[int]] = {}  # the top run's root -> [children running, children started]

    def begin(self, top: Path) -> tuple[bool, int]:
        with self._lock:
            counts = self._runs.setdefault(top, [0, 0])
            counts[0] += 1
            counts[1] += 1
            return counts[0] > 1, counts[1]

    def end(self, top: Path, began: tuple[bool, int]) -> bool:
        """Whether another child ran at any moment this one did."""
        with self._lock:
            counts = self._runs[top]
            counts[0] -= 1
            others = began[0] or counts[1] != began[1]
            if not counts[0]:
                del self._runs[top]
            return others


CHILDREN_AT_ONCE = AtOnce()


class Running(Generic[T]):
    """`work()` on a thread of its own; `result()` waits for it, and raises what it raised."""

    def __init__(self, work: Callable[[], T]) -> None:
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(work,), name="cairn-call", daemon=True)
        self._thread.start()

    def _run(self, work: Callable[[], T]) -> None:
        try:
            self._value = work()
        except BaseException as exc:  # noqa: BLE001 - handed to the thread that waits
            self._error = exc

    def join(self) -> None:
        self._thread.join()

    def result(self) -> T:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value
