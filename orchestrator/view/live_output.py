"""The output of the command that runs now, as far as it came: the toolbox copies a shell command's output
into `<run>/cairn/live/shell.out` while it runs (PROTOCOL.md), a file the sandbox can write.

So it is read as untrusted: never through a link, only when it is a regular file (a FIFO there would
hang the reader), and only its last TAIL_BYTES.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

LIVE_OUTPUT = Path("live") / "shell.out"  # under the run's cairn/ (the toolbox's capture.LIVE_OUTPUT)
TAIL_BYTES = 64 * 1024


def live_output(cairn_dir: Path, tail: int = TAIL_BYTES) -> str | None:
    """The last `tail` bytes of the running command's output, as text; None when there is none to read."""
    try:
        fd = os.open(cairn_dir / LIVE_OUTPUT, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        start = max(0, info.st_size - tail)
        data = os.pread(fd, tail, start)
    except OSError:
        return None
    finally:
        os.close(fd)
    if start:  # cut in the middle of a line: start at the next one
        data = data[data.find(b"\n") + 1:] if b"\n" in data else data
    return data.decode("utf-8", "replace")
