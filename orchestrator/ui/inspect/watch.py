"""`cairn watch RUN`: follow a run from another terminal.

Prints each event as it is appended to `state/events.jsonl` (one line, as the live display prints it,
noticed with watchfiles) and, under each step, the workspace files it changed, read from the step's
checkpoint. Ends when the run's status becomes anything but running, when its process is gone, or on
Ctrl-C. A run that is not live gets its events
so far, and the command ends. Reads only; imports no model library.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Callable

from orchestrator.ui.display import event_line
from orchestrator import events as ev
from orchestrator.store.run_dir import RunDir
from orchestrator.ui.terminal import clean, clean_name

NOISE_DIRS = {".cairn", ".git", "__pycache__", "node_modules", ".venv", ".pytest_cache"}
# The temporary file of the toolbox's atomic write (`.NAME.XXXXXXXX.tmp`, tempfile.mkstemp's pattern,
# sandbox_image/toolbox/): it lives a moment before it is renamed to NAME, which is the change to show.
ATOMIC_TEMPORARY = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$")


class EventTail:
    """Reads the whole lines appended to the event log since the last read."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset = path, 0

    def new(self) -> list[ev.Event]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        end = data.rfind(b"\n") + 1  # a line still being written waits for the next read
        self.offset += end
        out = []
        for line in data[:end].splitlines():
            if line.strip():
                try:
                    out.append(ev.parse_event(line))
                except ValueError:
                    continue
        return out


def _noise(rel: Path) -> bool:
    return any(part in NOISE_DIRS for part in rel.parts) or bool(ATOMIC_TEMPORARY.match(rel.name))


def watch_run(run: RunDir, echo: Callable[[str], None], is_live: Callable[[RunDir], bool],
              stop: threading.Event | None = None) -> str:
    """Prints the run's events (and each step's file changes) until it stops running.
    Returns the last status seen."""
    # Live first, then the status: a run writes its end before its lock goes, so a run not live that
    # still says `running` really went away without saying so.
    live = is_live(run)
    tail = EventTail(run.events.path)
    status = run.read_meta().get("status", "running")
    status = _print(tail.new(), echo, status, run)
    if not live or status != "running":
        if not live and status == "running":
            echo(f"(run {run.id} is not live: it crashed or was killed; cairn resume {run.id} continues it)")
        return status
    from watchfiles import watch

    events_path = run.events.path.resolve()

    def wanted(_change: object, path: str) -> bool:
        return Path(path) == events_path

    stop = stop or threading.Event()
    try:
        for changes in watch(run.state, watch_filter=wanted, stop_event=stop, debounce=200,
                             rust_timeout=1000, yield_on_timeout=True, recursive=False):
            status = _print(tail.new(), echo, status, run)
            if status != "running":
                break
            if not changes and not is_live(run):  # the process went away (saying so, or not)
                status = _print(tail.new(), echo, status, run)
                if status == "running":
                    echo(f"(run {run.id} is no longer live; cairn resume {run.id} continues it)")
                break
    except KeyboardInterrupt:
        pass
    return status


def _print(events: list[ev.Event], echo: Callable[[str], None], status: str, run: RunDir | None = None) -> str:
    for e in events:
        line = event_line(e)
        if isinstance(e, ev.RunStarted):
            line = f"task: {' '.join(clean(e.task).split())[:200]}"
        elif isinstance(e, ev.StatusChanged):
            status = e.status
        elif isinstance(e, ev.Checkpoint) and e.commit and e.step and run is not None:
            for mark, path in _step_changes(run, e.commit):
                echo(f"      {mark} {clean_name(path)}")
        if line is not None:
            echo(line)
    return status


def _step_changes(run: RunDir, commit: str) -> list[tuple[str, str]]:
    """The files a step changed, from its checkpoint: under the step that made them, whenever the file
    system told of them, and `~` for a file written again (an atomic write looks like a new file)."""
    from orchestrator.ui.inspect.changes import commit_changes

    try:
        return [(mark, path) for mark, path in commit_changes(run, commit) if not _noise(Path(path))]
    except Exception:  # noqa: BLE001 - a checkpoint git cannot read: the events still show
        return []
