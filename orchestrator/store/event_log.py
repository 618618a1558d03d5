"""The event log file, `state/events.jsonl`: append-only and fsynced (the events themselves: events.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable

from orchestrator.events import Event, _Event, dump_event, parse_event


class EventLog:
    """Append-only, fsynced. Opened per write so that a crash never leaves a half-buffered event."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # Called once, before the first event of a step past 0 is written: a drive's step 0, taken while
        # the first request goes out, goes into the log before anything of step 1 (runs/first_checkpoint.py).
        self.before_step_1: Callable[[], None] | None = None

    def append(self, event: _Event) -> None:
        if self.before_step_1 is not None and event.step > 0:
            before, self.before_step_1 = self.before_step_1, None
            before()
        line = (dump_event(event) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)

    def read(self) -> tuple[list[Event], str | None]:
        """All events, and the torn last line if the writer died mid-line (set aside, never dropped)."""
        if not self.path.exists():
            return [], None
        data = self.path.read_bytes()
        lines = data.split(b"\n")
        torn = None
        if lines and lines[-1]:
            torn = lines.pop().decode(errors="replace")
        events = [parse_event(line) for line in lines if line.strip()]
        return events, torn

    def set_aside_torn_line(self) -> Path | None:
        """Moves a torn last line to its own file, so appending can go on; returns that file."""
        _, torn = self.read()
        if torn is None:
            return None
        aside = self.path.with_name(f"events.torn-{int(time.time())}.txt")
        aside.write_text(torn + "\n")
        data = self.path.read_bytes()
        with open(self.path, "r+b") as f:
            f.truncate(data.rindex(b"\n") + 1 if b"\n" in data else 0)
            os.fsync(f.fileno())
        return aside
