"""The output of the command that runs now, as far as it came: the toolbox copies a shell command's output
into `<run>/cairn/live/shell.out` while it runs (PROTOCOL.md), a file the sandbox can write.

So it is read as untrusted, through the one opener of a run's folders (store/run_files.py): no link
followed in any part of the path, only a regular file (a FIFO there would hang the reader), and only its
last TAIL_BYTES.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.store import run_files

LIVE_OUTPUT = Path("live") / "shell.out"  # under the run's cairn/ (the toolbox's capture.LIVE_OUTPUT)
TAIL_BYTES = 64 * 1024


def live_output(cairn_dir: Path, tail: int = TAIL_BYTES) -> str | None:
    """The last `tail` bytes of the running command's output, as text; None when there is none to read."""
    try:
        size, data = run_files.size_and_tail(cairn_dir, str(LIVE_OUTPUT), tail)
    except (run_files.Refused, OSError):
        return None
    if size > tail:  # cut in the middle of a line: start at the next one
        data = data[data.find(b"\n") + 1:] if b"\n" in data else data
    return data.decode("utf-8", "replace")
