"""The output of one command, capped at the source, and its live copy for the person watching."""

from __future__ import annotations

import os
import stat

from .workspace import Workspace

# The running command's output as it comes (its first LIVE_BYTES), in cairn's files: the host's live view
# shows a long command's output from it while the command runs. Emptied as each command starts.
LIVE_OUTPUT = "live/shell.out"
LIVE_BYTES = 1024 * 1024


def open_live(path: str):
    """The live copy of a command's output, emptied. The agent can write /cairn too: whatever it put in
    its place (a link, a FIFO that would block the open, a folder) is replaced by a regular file."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    except OSError:
        return None
    for attempt in range(2):
        try:
            fd = os.open(path, flags, 0o644)
            if stat.S_ISREG(os.fstat(fd).st_mode):
                os.ftruncate(fd, 0)
                return os.fdopen(fd, "wb", buffering=0)
            os.close(fd)
        except OSError:
            pass
        try:
            os.unlink(path)
        except OSError:
            return None
    return None


class Capture:
    """The output of one command, capped at the source.

    Up to `inline_bytes` stays in memory. Past that, everything goes to a file (until `max_file_bytes`,
    then it is only counted) and memory keeps just a head and a tail for the preview.
    """

    def __init__(self, open_file, inline_bytes: int, max_file_bytes: int, live=None) -> None:
        self.open_file = open_file  # called once, when the output first outgrows inline_bytes
        self.live, self.live_left = live, LIVE_BYTES  # the output as it comes, for the person watching
        self.inline_bytes, self.max_file_bytes = inline_bytes, max_file_bytes
        self.half = inline_bytes // 2
        self.head, self.tail = bytearray(), b""
        self.total = self.newlines = self.stored = 0
        self.last = b""
        self.file = None
        self.path = None

    def feed(self, data: bytes) -> None:
        if self.live is not None and self.live_left > 0:
            try:
                self.live.write(data[:self.live_left])
            except OSError:
                self.live = None  # a full disk must not fail the command
            self.live_left -= len(data)
        self.total += len(data)
        self.newlines += data.count(b"\n")
        self.last = data[-1:]
        if self.file is None:
            if len(self.head) + len(data) <= self.inline_bytes:
                self.head += data
                return
            self.file, self.path = self.open_file()
            data, self.head = bytes(self.head) + data, bytearray()
        self._store(data)
        if len(self.head) < self.half:
            taken = self.half - len(self.head)
            self.head += data[:taken]
            data = data[taken:]
        if data:
            self.tail = data[-self.half:] if len(data) >= self.half else (self.tail + data)[-self.half:]

    def _store(self, data: bytes) -> None:
        room = self.max_file_bytes - self.stored
        if room > 0:
            self.file.write(data[:room])
            self.stored += min(room, len(data))

    def finish(self, workspace: Workspace) -> dict:
        lines = self.newlines + (1 if self.total and self.last != b"\n" else 0)
        result = {"output_bytes": self.total, "output_lines": lines, "truncated": False, "output_path": None}
        if self.file is None:
            return dict(result, output=self.head.decode("utf-8", "replace"))
        if self.total > self.stored:
            dropped = self.total - self.stored
            self.file.write(b"\n[cairn: %d more bytes of output were counted but not kept]\n" % dropped)
        self.file.close()
        rel = workspace.rel(self.path)
        omitted = self.total - len(self.head) - len(self.tail)
        marker = f"\n[... {omitted} bytes omitted; the output is saved in {rel} ...]\n"
        output = self.head.decode("utf-8", "replace") + marker + self.tail.decode("utf-8", "replace")
        return dict(result, output=output, truncated=True, output_path=rel)
