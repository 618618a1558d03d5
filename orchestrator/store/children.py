"""A sub-agent's run directory (orchestrator/agent/delegate.py runs it): its log and run.json under the parent
run's state, `<run>/state/children/<call id>/`, the workspace and cairn's own files being the parent's.
Here in the store, so that readers of a run (`cairn show`) find a child without the tool that made it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from orchestrator.store.event_log import EventLog
from orchestrator.store.run_dir import RunDir

CHILDREN = "children"


class ChildRun(RunDir):
    """A sub-agent's run: its log and run.json in `<parent state>/children/<name>/`; the workspace is
    the parent's (and so are the in-place folder, cairn's directory and the checkpoints)."""

    def __init__(self, root: Path, parent: RunDir) -> None:
        super().__init__(root)
        self.parent = parent
        self.state = self.root
        self.events = EventLog(self.root / "events.jsonl")
        self.meta_path = self.root / "run.json"

    @property
    def external_workspace(self) -> Path | None:  # type: ignore[override]
        return self.parent.external_workspace

    @property
    def workspace(self) -> Path:  # type: ignore[override]
        return self.parent.workspace

    @property
    def cairn_dir(self) -> Path:  # type: ignore[override]
        return self.parent.cairn_dir

    def check_workspace(self) -> None:
        self.parent.check_workspace()

    @property
    def top_run(self) -> RunDir:  # type: ignore[override]
        run: RunDir = self
        while isinstance(run, ChildRun):
            run = run.parent
        return run

    @property
    def path(self) -> str:
        """Relative to the top run's directory, e.g. `state/children/call_1`."""
        return self.root.relative_to(self.top_run.root.absolute()).as_posix()


def safe_name(call_id: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", call_id).lstrip(".")[:80]
    return name or "call"


def open_child(run: RunDir, call_id: str, info: dict[str, Any] | None = None) -> ChildRun | None:
    """The child run of one agent_delegate call of `run`: by the path its ToolFinished recorded, or, for
    a call still running (or cut off by a crash), by its call id."""
    top = run.top_run
    if info and isinstance(info.get("path"), str):
        root = top.root / info["path"]
    else:
        root = run.state / CHILDREN / safe_name(call_id)
    if not (root / "events.jsonl").is_file() or not _inside(root, run.state / CHILDREN):
        return None
    return ChildRun(root, run)


def _inside(path: Path, parent: Path) -> bool:
    try:
        path.resolve().relative_to(parent.resolve())
        return True
    except ValueError:
        return False
