"""`cairn watch RUN`: follow a run from another terminal.

Prints each event as it is appended to `state/events.jsonl` (one line, as the live display prints it,
noticed with watchfiles), a long command's output as it comes (as `cairn run` shows it: ui/output_lines.py)
and, under each step, the workspace files it changed, read from the step's checkpoint. Ends when the drive is over (its process lets go of the run: the run's view then says how it
stands, on a last line), or on Ctrl-C. A run that is not live gets its events so far and that line.
Reads only; imports no model library.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Callable

from orchestrator.ui.display import end_line, event_line
from orchestrator.ui.output_lines import OutputLines
from orchestrator import events as ev
from orchestrator.store.liveness import run_is_live
from orchestrator.store.run_dir import RunDir
from orchestrator.ui.terminal import clean, clean_name
from orchestrator.view.read import read_view

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


def watch_run(run: RunDir, echo: Callable[[str], None], is_live: Callable[[RunDir], bool] | None = None,
              stop: threading.Event | None = None) -> str:
    """Prints the run's events (and each step's file changes, and a long command's output as it comes)
    while a process drives the run, and then how it stands: the run's view (orchestrator/view/), as `ls`
    and `show` say it. A status the log records while its drive goes on (an interactive run at its
    prompt, a question asked on the terminal) does not end the watch: the drive's end does. Returns the
    run's status at the end."""
    live = is_live or run_is_live
    tail = EventTail(run.events.path)
    printer = _Printer(run, echo, follow=live(run))
    printer.show(tail.new())
    if printer.follow:
        from watchfiles import watch

        events_path = run.events.path.resolve()

        def wanted(_change: object, path: str) -> bool:
            return Path(path) == events_path

        stop = stop or threading.Event()
        try:
            for changes in watch(run.state, watch_filter=wanted, stop_event=stop, debounce=200,
                                 rust_timeout=1000, yield_on_timeout=True, recursive=False):
                printer.show(tail.new())
                if not changes and not live(run):  # the drive is over (it said how, or it went away)
                    break
        except KeyboardInterrupt:
            printer.close()
            return read_view(run).status
        printer.show(tail.new())
        printer.close()
    view = read_view(run)
    said = view.result or view.reason
    echo(f"(run {run.id} is {view.status}" + (f": {clean(said)}" if said else "")
         + (f"; cairn resume {run.id} continues it)" if view.status == "interrupted" else ")"))
    return view.status


class _Printer:
    """The lines of the events, and while the run is live (`follow`), a running command's output."""

    def __init__(self, run: RunDir, echo: Callable[[str], None], follow: bool) -> None:
        self.run, self.echo, self.follow = run, echo, follow
        self.lines: OutputLines | None = None
        self.call_id: str | None = None

    def show(self, events: list[ev.Event]) -> None:
        for e in events:
            line = event_line(e)
            if isinstance(e, ev.RunStarted):
                line = f"task: {' '.join(clean(e.task).split())[:200]}"
            elif isinstance(e, ev.Checkpoint) and e.commit and e.step:
                for mark, path in _step_changes(self.run, e.commit):
                    self.echo(f"      {mark} {clean_name(path)}")
            elif isinstance(e, ev.ToolFinished) and self.lines is not None and e.call_id == self.call_id:
                if self.close():  # its lines are on the screen already: the last one says how it ended
                    line = end_line(e)
            if line is not None:
                self.echo(line)
            if isinstance(e, ev.ToolStarted) and e.name == "shell_exec" and self.follow:
                self.close()
                self.call_id = e.call_id
                self.lines = OutputLines(self.run.cairn_dir, {"name": e.name, "arguments": e.arguments,
                                                              "since": e.ts}, self.echo)

    def close(self) -> bool:
        """Stops following the running command; True when some of its output was shown."""
        lines, self.lines = self.lines, None
        return lines.stop() if lines is not None else False


def _step_changes(run: RunDir, commit: str) -> list[tuple[str, str]]:
    """The files a step changed, from its checkpoint: under the step that made them, whenever the file
    system told of them, and `~` for a file written again (an atomic write looks like a new file)."""
    from orchestrator.ui.inspect.changes import commit_changes

    try:
        return [(mark, path) for mark, path in commit_changes(run, commit) if not _noise(Path(path))]
    except Exception:  # noqa: BLE001 - a checkpoint git cannot read: the events still show
        return []
