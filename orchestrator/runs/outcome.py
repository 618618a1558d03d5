"""How a drive ended, as every entry point shows it: the run's view (orchestrator/view/) when the drive
is over, with the exit code `cairn run` gives it (docs/contracts.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.errors import CairnError
from orchestrator.runs.compose import exit_code
from orchestrator.status import Status
from orchestrator.store.run_dir import RunDir
from orchestrator.view.read import RunView, read_view


@dataclass
class Outcome:
    """A run as its drive left it."""

    view: RunView
    exit_code: int

    @property
    def status(self) -> str:
        return self.view.status

    def summary(self) -> str:
        """One line: `run ID: STATUS: what it ended with` (its result, else why it ended)."""
        said = self.view.result or self.view.reason
        return f"run {self.view.id}: {self.view.status}" + (f": {said}" if said else "")


def outcome_of(run: RunDir, status: str, error: CairnError | None = None) -> Outcome:
    """The outcome of a drive that ended with `status` (and `error`, when cairn, not the model, ended it).
    The view is read after the drive let go of the run, so it says what the run is now."""
    view = read_view(run)
    ran = view.check is not None and view.check.get("passed") is not None
    check: dict[str, Any] | None = view.check if status == Status.DONE and ran else None
    return Outcome(view, exit_code(status, error, check))
