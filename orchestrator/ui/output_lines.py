"""A long command's output on a terminal as it comes, for `cairn run`'s live display and `cairn watch`:
after STREAM_AFTER_S, the new whole lines of the toolbox's live copy of its output (read as untrusted by
view/live_output.py), each under the command's line as `│ ...`, until the command ends."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Callable

from orchestrator.ui.terminal import clean
from orchestrator.view.live_output import Follower

STREAM_AFTER_S = 2.0  # a command that runs longer has its output shown as it comes
STREAM_LINES = 200  # at most this many lines of it
LOOK_S = 0.25  # how often the live copy is looked at
WIDTH = 100


def as_is(line: str, width: int = WIDTH) -> str:
    """One line of output with its indentation kept, cleaned of control sequences, cut to `width`."""
    flat = clean(line).expandtabs(4).rstrip()
    return flat if len(flat) <= width else flat[: width - 1] + "…"


class OutputLines:
    """Follows one running command's output in a thread and says each new whole line with `say`.
    `after`: seconds before the first look (a quick command's result shows its first lines anyway)."""

    def __init__(self, cairn_dir: Path, call: dict[str, Any], say: Callable[[str], None],
                 after: float = STREAM_AFTER_S) -> None:
        self.follower = Follower(cairn_dir, call)
        self.say, self.after = say, after
        self.shown, self.partial = 0, b""
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._follow, name="cairn-live-output", daemon=True)
        self.thread.start()

    def _follow(self) -> None:
        if self.done.wait(self.after):
            return  # a quick command: its result shows its first lines
        while True:
            self._show_new()
            if self.done.wait(LOOK_S):
                return

    def _show_new(self) -> None:
        got = self.follower.new_bytes()
        if got is None:
            return
        data, again = got
        if again and self.shown:  # emptied: a new command's output (or the first look mid-way)
            self.partial = b""
        *lines, self.partial = (self.partial + data).split(b"\n")
        for line in lines:
            self._line(line)

    def _line(self, line: bytes) -> None:
        if self.shown < STREAM_LINES:
            self.say(f"      │ {as_is(line.decode('utf-8', 'replace'))}")
        elif self.shown == STREAM_LINES:
            self.say("      │ … (the rest comes with the result)")
        self.shown += 1

    def stop(self) -> bool:
        """Ends the following; True when some of the output was shown (then what came since the last
        look, and a last line without its newline, are shown too)."""
        self.done.set()
        self.thread.join()
        if self.shown:
            self._show_new()
            if self.partial.strip() and self.shown < STREAM_LINES:
                self.say(f"      │ {as_is(self.partial.decode('utf-8', 'replace'))}")
        return self.shown > 0
