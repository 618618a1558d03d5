"""A run's story so far, folded from its event log one event at a time: the state every face shows.

The fold knows only the log. Whether a process drives the run now is the lock's to say (view/read.py
puts the two together), so the fold's `status` is what the log last said. It is plain data and can be
saved (view/read.py keeps it in `state/view.json` with the size of the log it covers) and taken up
again where it stopped, so a long run's log is read once, not at every `ls`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from orchestrator import events as ev
from orchestrator.status import Status

USAGE_KEYS = ("prompt_tokens", "cached_tokens", "completion_tokens")


@dataclass
class Fold:
    """What the log has said of a run, so far."""

    task: str = ""
    status: str = Status.RUNNING  # the last status the log recorded; a run that never said one is starting
    reason: str = ""  # the last StatusChanged's reason (why a run that did not finish ended)
    result: str | None = None  # what the run's last drive ended with; never an answered question
    step: int = 0
    waiting: dict[str, Any] | None = None  # what a waiting run waits for: a question, or a call to approve
    running: dict[str, Any] | None = None  # the call that runs now: started, not finished, in a running run
    asked: dict[str, Any] | None = None  # the approval asked and not yet followed by its call's start
    usage: dict[str, Any] = field(default_factory=lambda: {**{key: 0 for key in USAGE_KEYS}, "cost_usd": 0.0,
                                                           "cost_known": True})
    check: dict[str, Any] | None = None  # the last check's verdict (--check)
    drives: int = 0  # how many times the run was set going (a run, each resume)
    statuses: int = 0  # how many statuses the log recorded (none: a run older than its log's statuses)

    def apply(self, event: ev.Event) -> None:
        self.step = max(self.step, event.step)
        handler = getattr(self, "_on_" + event.type, None)
        if handler is not None:
            handler(event)

    # -- the events ------------------------------------------------------------------------------

    def _on_run_started(self, e: ev.RunStarted) -> None:
        self.task = e.task

    def _on_model_request(self, e: ev.ModelRequest) -> None:
        self._count(e.usage)

    def _on_critic_note(self, e: ev.CriticNote) -> None:
        self._count(e.usage)

    def _on_compaction(self, e: ev.Compaction) -> None:
        if e.usage:  # a summary's model request
            self._count(e.usage)

    def _on_approval_asked(self, e: ev.ApprovalAsked) -> None:
        self.asked = {"call_id": e.call_id, "name": e.name, "arguments": e.arguments, "why": e.why,
                      "grant": e.grant, "step": e.step, "answer": None}

    def _on_approval_answered(self, e: ev.ApprovalAnswered) -> None:
        if self.asked is not None and self.asked["call_id"] == e.call_id:
            self.asked["answer"] = {"approved": e.approved, "by": e.by, "reason": e.reason, "always": e.always}
            if self.waiting is not None and self.waiting.get("kind") == "approval":
                self.waiting = {**self.waiting, "answer": self.asked["answer"]}

    def _on_tool_started(self, e: ev.ToolStarted) -> None:
        if self.asked is not None and self.asked["call_id"] == e.call_id:
            self.asked = None
        self.running = {"call_id": e.call_id, "name": e.name, "arguments": e.arguments, "step": e.step,
                        "since": e.ts}

    def _on_tool_finished(self, e: ev.ToolFinished) -> None:
        if self.running is not None and self.running["call_id"] == e.call_id:
            self.running = None

    def _on_check_finished(self, e: ev.CheckFinished) -> None:
        self.check = {"command": e.command, "passed": e.passed, "exit_code": e.exit_code,
                      "output_path": e.output_path, "round": e.round}

    def _on_status(self, e: ev.StatusChanged) -> None:
        self.statuses += 1
        self.status, self.reason = e.status, e.reason or ""
        self.running = None
        if e.status == Status.RUNNING:  # a drive begins: what the last one ended with is behind it now
            self.drives += 1
            self.result, self.waiting = None, None
            return
        self.result = e.result
        if e.status != Status.WAITING:
            self.waiting = None
        elif self.reason.startswith("approval") and self.asked is not None:
            self.waiting = {"kind": "approval", **self.asked}
        else:
            self.waiting = {"kind": "question", "question": e.result}

    def _count(self, usage: dict[str, Any]) -> None:
        for key in USAGE_KEYS:
            value = usage.get(key) or 0
            self.usage[key] += value if isinstance(value, (int, float)) and not isinstance(value, bool) else 0
        cost = usage.get("cost_usd")
        if isinstance(cost, (int, float)) and not isinstance(cost, bool):
            self.usage["cost_usd"] += cost
        else:
            self.usage["cost_known"] = False

    # -- saved and taken up again ----------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: object) -> Fold | None:
        """A saved fold, or None when `data` is not one (a cache written by another version, or by hand)."""
        if not isinstance(data, dict) or set(data) != {f.name for f in fields(cls)}:
            return None
        fold = cls(**data)
        kinds = {"task": str, "status": str, "reason": str, "step": int, "usage": dict, "drives": int, "statuses": int}
        if not all(isinstance(getattr(fold, name), kind) for name, kind in kinds.items()):
            return None
        if not all(isinstance(getattr(fold, name), (dict, type(None))) for name in ("waiting", "running", "asked", "check")):
            return None
        return fold

    def totals(self) -> dict[str, Any]:
        """The usage as `cairn show --json` gives it (docs/contracts.md)."""
        u = self.usage
        return {key: u[key] for key in USAGE_KEYS} | {
            "cost_usd": round(u["cost_usd"], 6) if u["cost_known"] else None,
            "cache_hit_ratio": round(u["cached_tokens"] / u["prompt_tokens"], 4) if u["prompt_tokens"] else 0.0,
        }
