"""Messages to a run from outside it: `cairn say` and `workspace/INBOX.md`.

`cairn say RUN TEXT` appends one JSON line to `state/inbox.jsonl` (host only: the sandbox never sees
it). The loop takes the lines it has not delivered yet at the start of each step; every delivered line
becomes a `UserMessage(source="say")` event that records `inbox_offset`, the byte offset just past its
line, so a resume starts after the last delivered line and never delivers one twice.

A person may also drop `workspace/INBOX.md`. A watchfiles thread (`InboxWatcher`) only notices that
the file appeared or changed; the loop reads it through the sandbox, delivers its text as a
`UserMessage(source="inbox")` and moves it, inside the sandbox, to `/cairn/inbox/<step>.md` (`<run>/cairn/inbox/` on the host).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Iterable

INBOX_FILE = "INBOX.md"


def inbox_path(state: Path) -> Path:
    return state / "inbox.jsonl"


def say(state: Path, text: str) -> None:
    """Appends one message, fsynced, in one write: a concurrent reader sees a whole line or none."""
    line = (json.dumps({"ts": time.time(), "text": text}, ensure_ascii=False) + "\n").encode()
    fd = os.open(inbox_path(state), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def delivered_offset(events: Iterable[Any]) -> int:
    """Where the undelivered part of inbox.jsonl starts, according to the event log."""
    offset = 0
    for e in events:
        if getattr(e, "type", None) == "user_message" and e.source == "say":
            offset = max(offset, int((e.model_extra or {}).get("inbox_offset") or 0))
    return offset


def pending(state: Path, offset: int) -> list[tuple[str, int]]:
    """The whole lines after `offset`: (text, the offset just past that line). A torn or bad line
    is skipped over, never retried forever."""
    try:
        with open(inbox_path(state), "rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return []
    out: list[tuple[str, int]] = []
    position = offset
    while b"\n" in data:
        line, data = data.split(b"\n", 1)
        position += len(line) + 1
        try:
            text = json.loads(line)["text"]
        except (ValueError, KeyError, TypeError):
            continue
        if isinstance(text, str) and text.strip():
            out.append((text, position))
    return out


class InboxWatcher:
    """Notices, with watchfiles, that `INBOX.md` appeared or changed at the root of the workspace.

    It never reads the file: it only raises a flag, and the loop looks through the sandbox. The flag
    starts raised (the file may be there before the watcher is), and is raised again once the watcher
    is ready, so nothing dropped during start-up is missed.
    """

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self._flag = threading.Event()
        self._flag.set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "InboxWatcher":
        self._thread = threading.Thread(target=self._watch, name="cairn-inbox", daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        try:
            from watchfiles import Change, watch
        except ImportError:  # no watcher: look every step
            while not self._stop.wait(0.5):
                self._flag.set()
            return

        def wanted(change: Change, path: str) -> bool:
            return change != Change.deleted and os.path.basename(path) == INBOX_FILE

        first = True
        try:
            for _changes in watch(self.workspace, watch_filter=wanted, recursive=False, stop_event=self._stop,
                                  debounce=200, yield_on_timeout=True, rust_timeout=1000, raise_interrupt=False):
                if _changes or first:
                    self._flag.set()
                first = False
        except Exception:  # the watcher failed (inotify limits, a vanished dir): look every step
            while not self._stop.wait(0.5):
                self._flag.set()

    def take(self) -> bool:
        """True if INBOX.md may have arrived since the last call."""
        if self._flag.is_set():
            self._flag.clear()
            return True
        return False

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=3)
