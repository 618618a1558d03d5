"""The person's messages to a run: `cairn say`, the only channel of the user's voice.

`cairn say RUN TEXT` appends one JSON line to `state/inbox.jsonl` (host only: the sandbox never sees
it). The loop takes the lines it has not delivered yet at the start of each step; every delivered line
becomes a `UserMessage(source="say")` event that records `inbox_offset`, the byte offset just past its
line, so a resume starts after the last delivered line and never delivers one twice.

No file in the workspace is a message: the agent, anything it runs, and a repository cloned with
--from-git can all write there, so such a file could put words in the person's mouth. (An earlier
cairn delivered `workspace/INBOX.md` as a user message; its events, `source="inbox"`, still replay.)
"""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path
from typing import Any, Iterable


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
    try:  # O_NONBLOCK, and a regular file only: an imported run's inbox.jsonl may be a FIFO
        fd = os.open(inbox_path(state), os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return []
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return []
        f.seek(offset)
        data = f.read()
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
