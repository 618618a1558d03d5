"""The events of a run: what the event log (`state/events.jsonl`, store/event_log.py) holds, the source of
truth for resume and inspection.

Every event is one JSON line, appended and fsynced before the action it describes goes ahead. Events
are pydantic models with a version field, so a newer cairn still reads the runs of an older one. This
module is the schema only (no I/O), so the pure parts (context/, the run state) can use it.
"""

from __future__ import annotations

import json
import time
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

EVENT_VERSION = 1


class _Event(BaseModel):
    model_config = ConfigDict(extra="allow")  # a newer cairn may add fields; keep them when reading

    v: int = EVENT_VERSION
    ts: float = Field(default_factory=time.time)
    step: int = 0


class RunStarted(_Event):
    """The stable prefix is stored whole, so a resume sends the same bytes even after an upgrade."""

    type: Literal["run_started"] = "run_started"
    task: str
    system_prompt: str
    tools: list[dict[str, Any]]
    # The run's seed (context/framing.py: how each tool result is framed). None in runs made before it:
    # RunState derives one from the event's time.
    seed: int | None = None


class UserMessage(_Event):
    type: Literal["user_message"] = "user_message"
    text: str
    source: str = "user"  # "user" (interactive), "answer" (to ask_user), "say", "inbox"


class ModelRequest(_Event):
    """One model call, recorded after it answered, with the provider's usage."""

    type: Literal["model_request"] = "model_request"
    model: str
    usage: dict[str, Any]
    estimated_prompt_tokens: int = 0
    messages: int = 0


class AssistantMessage(_Event):
    type: Literal["assistant_message"] = "assistant_message"
    message: dict[str, Any]  # OpenAI format: role, content, tool_calls


class ToolStarted(_Event):
    type: Literal["tool_started"] = "tool_started"
    call_id: str
    name: str
    arguments: str  # raw, as the model wrote them (they may not be JSON)


class ToolFinished(_Event):
    type: Literal["tool_finished"] = "tool_finished"
    call_id: str
    name: str
    content: str  # what entered the history (a preview and a pointer when offloaded)
    error: bool = False
    offloaded_to: str | None = None
    output: str | None = None  # the whole result text the host received, when it differs from content
    duration_ms: float | None = None


class Compaction(_Event):
    """Old tool results turned into pointers, or a span of history replaced by a saved summary, or by a
    digest (context/digest.py: a line a step, no model; `summary` holds it, `summary_path` its file)."""

    type: Literal["compaction"] = "compaction"
    kind: Literal["pointers", "digest", "summary"]
    replacements: dict[str, str] = Field(default_factory=dict)  # history message id -> new content
    span: list[str] = Field(default_factory=list)  # ids of the messages a summary replaces
    # Of those, the person's (their messages, a denied call's reason): they stay, in order, just before the
    # summary, as they are (None) or as the message this text (context/person.py: a reason, a long one's head).
    kept: dict[str, str | None] = Field(default_factory=dict)
    summary: str | None = None
    summary_path: str | None = None
    tokens_before: int
    tokens_after: int
    usage: dict[str, Any] = Field(default_factory=dict)  # the summary request's, counted toward the budget


class Notice(_Event):
    type: Literal["notice"] = "notice"
    text: str


class StatusChanged(_Event):
    type: Literal["status"] = "status"
    status: str
    reason: str = ""
    result: str | None = None


class CheckFinished(_Event):
    """The run's check (`--check CMD`) ran after a task_done. `output` is what the agent is shown of it
    (whole when small, else a preview pointing at `output_path`, which holds it whole); `sent_back`:
    it went back to the agent as a message (a round of --check-rounds) and the run went on."""

    type: Literal["check_finished"] = "check_finished"
    command: str
    round: int  # 1 for the run's first check, 2 for its second, ...
    exit_code: int | None  # None: the check could not be run at all (`error` says why)
    passed: bool
    output_path: str | None = None
    output: str = ""
    timed_out: bool = False
    duration_ms: float | None = None
    error: str | None = None
    sent_back: bool = False


class CriticNote(_Event):
    """The critic's answer after `step` (--critic-every): shown in the next request's tail, never stored in
    the history; saved whole at `path`. Its usage counts toward the run's budget, apart from the agent's."""

    type: Literal["critic_note"] = "critic_note"
    text: str
    path: str | None  # None: the file could not be written (a notice says why)
    model: str
    usage: dict[str, Any]


class ApprovalAsked(_Event):
    """A tool call waits for a person's yes (orchestrator/agent/approvals.py): on a terminal the question is put
    at once; without one the run ends `waiting` and `cairn approve` answers it. `grant` is what an
    "always" answer covers: the tool's name, or `shell_exec:<pattern>` / a rule's label."""

    type: Literal["approval_asked"] = "approval_asked"
    call_id: str
    name: str
    arguments: str
    why: str
    grant: str


class ApprovalAnswered(_Event):
    """The answer to a call's approval: a person's (`by` "terminal" or "cairn approve"), a rule's (`by`
    "rule", naming it in `rule`), an earlier "always" answer's (`by` "always"), or a sub-agent's refusal
    to wait (`by` "sub-agent"). `arguments`: the person edited them, and the call runs with these."""

    type: Literal["approval_answered"] = "approval_answered"
    call_id: str
    name: str
    approved: bool
    by: str
    reason: str | None = None
    always: bool = False  # holds for `grant` for the rest of the run
    grant: str | None = None
    rule: str | None = None
    arguments: str | None = None


class Checkpoint(_Event):
    type: Literal["checkpoint"] = "checkpoint"
    commit: str | None
    skipped: list[str] = Field(default_factory=list)


Event = Annotated[
    Union[
        RunStarted,
        UserMessage,
        ModelRequest,
        AssistantMessage,
        ToolStarted,
        ToolFinished,
        Compaction,
        Notice,
        StatusChanged,
        Checkpoint,
        CheckFinished,
        CriticNote,
        ApprovalAsked,
        ApprovalAnswered,
    ],
    Field(discriminator="type"),
]
_adapter: TypeAdapter[Event] = TypeAdapter(Event)


def new_seed() -> int:
    """A run's seed (RunStarted.seed): random, recorded once, the same at every resume."""
    import secrets

    return secrets.randbits(31)


def parse_event(line: str) -> Event:
    return _adapter.validate_json(line)


def dump_event(event: _Event) -> str:
    """One line, keys sorted: the same event always gives the same bytes."""
    return json.dumps(event.model_dump(mode="json"), sort_keys=True, ensure_ascii=False)
