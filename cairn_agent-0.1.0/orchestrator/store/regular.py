"""Reading a file the host does not control (in a workspace, or in an imported run) without hanging.

`open()` on a FIFO waits for a writer, and reading a device can block or never end. The file is
opened with O_NONBLOCK (which makes the open itself return at once), and only a regular file, as the
open descriptor says (`fstat`, so nothing can swap the path between check and read), is read.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


def read_regular(path: Path, max_bytes: int | None = None, follow: bool = False) -> str | None:
    """The text of `path` (at most `max_bytes` of it, undecodable bytes replaced), or None when it is
    missing or is not a regular file (a FIFO, a socket, a device, a directory; a symlink unless
    `follow`)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError:  # missing, unreadable, or a symlink (ELOOP with O_NOFOLLOW)
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # before fdopen, which refuses a directory with an error
        os.close(fd)
        return None
    with os.fdopen(fd, "rb") as f:
        data = f.read() if max_bytes is None else f.read(max_bytes)
    return data.decode("utf-8", "replace")
