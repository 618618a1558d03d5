"""One run of a batch as a person sees it: its row in the live table and the summary, kept up to date by
the run's events (`RowDisplay`) and filled from its run.json when it ends."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestrator.status import Status
from orchestrator import events as ev
from orchestrator.ports import Progress
from orchestrator.store.run_dir import RunDir
from orchestrator.view.read import read_view


@dataclass
class Row:
    """One run of the batch, as the live table and the summary show it."""

    line: int
    task: str
    id: str | None = None
    action: str = "pending"  # started, resumed, skipped, left (ended otherwise), pending (never started)
    status: str = "pending"
    step: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = 0.0
    result: str | None = None
    error: str | None = None
    seconds: float | None = None
    check: dict[str, Any] | None = None  # the run's last check (--check): command, passed, exit_code, output_path
    ray: bool = False  # a run of a batch on Ray (batch/ray_driver.py): its rows say where it ran
    node: str | None = None  # the Ray node it runs (or ran) on
    notes: list[str] = field(default_factory=list)  # what happened on the way: a node lost, the run taken up

    @property
    def ok(self) -> bool:
        """Done, and its check passed when it has one."""
        return self.status == Status.DONE and (self.check is None or self.check.get("passed") is not False)

    def doc(self) -> dict[str, Any]:
        return {"line": self.line, "id": self.id, "task": self.task, "action": self.action, "status": self.status,
                "steps": self.step, "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "tokens": self.prompt_tokens + self.completion_tokens, "cost_usd": self.cost_usd,
                "result": self.result, "error": self.error, "seconds": self.seconds, "check": self.check,
                **({"node": self.node, "notes": self.notes} if self.ray else {})}


class RowDisplay:
    """The Display of one run's Agent: keeps that run's row up to date (read by the live table)."""

    def __init__(self, row: Row) -> None:
        self.row = row

    def event(self, event: ev.Event, state: Progress) -> None:
        t = state.totals
        self.row.step = state.step
        self.row.prompt_tokens, self.row.completion_tokens = t.prompt_tokens, t.completion_tokens
        self.row.cost_usd = t.cost_usd if t.cost_known else None
        if isinstance(event, ev.StatusChanged):
            self.row.status = event.status
        elif isinstance(event, ev.ToolStarted):
            self.row.status = f"running: {event.name}"
        elif isinstance(event, ev.ToolFinished):
            self.row.status = "running"
        elif isinstance(event, ev.Notice) and getattr(event, "kind", None) == "model_retry":
            # "retry 2/6 in 8 s: ..." is a moment, not a state: the row says what it waits for until the next event
            self.row.status = f"running: waiting for the model ({event.text.split(' in ', 1)[0]})"

    def close(self) -> None:
        pass


def fill(row: Row, run: RunDir, action: str) -> None:
    """The row from the run's view (orchestrator/view/), as `cairn ls` gives it: what its last drive left
    (the batch, or on Ray its driver, may still hold the run's lock as it reads this)."""
    view = read_view(run, holding=True)
    row.action, row.id = action, run.id
    row.status = view.status
    row.step = view.steps or row.step
    row.prompt_tokens = view.usage.get("prompt_tokens", row.prompt_tokens)
    row.completion_tokens = view.usage.get("completion_tokens", row.completion_tokens)
    row.cost_usd = view.usage.get("cost_usd", row.cost_usd)
    row.result = view.result
    row.check = view.check if view.check and view.check.get("passed") is not None else None
    if row.status not in (Status.DONE, Status.RUNNING) and not row.error:  # every end but done says why
        row.error = view.reason
