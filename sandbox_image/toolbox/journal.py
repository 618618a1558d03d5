"""The journal of tool calls (PROTOCOL.md, "The journal"), in cairn's own files (/cairn), which the host
mounts from <run>/cairn/ and reads on resume (orchestrator/store/journal.py has the same name)."""

from __future__ import annotations

import json
import os
import sys
import time

JOURNAL_NAME = "journal.jsonl"


class Journal:
    """Each tool call's start and outcome, on disk before the command runs and before the answer is sent.

    One JSON object a line, written with one write() and fsynced: `started` (the host's call key, the
    request's id and op), then `finished` (the whole response) or `killed` (the seconds it ran and its
    output so far). The host reads it on resume, for the calls its event log has no result for.

    A call's start begins the file afresh: the host sends a call only once it has recorded the outcome
    of every earlier one, so only the latest call can still be needed, and the journal stays one call
    long (cairn's checkpoints commit it at every step). A journal that cannot be written never stops a
    call: the toolbox says why on stderr, and a crash then looks to the host as if the call never ran.
    """

    def __init__(self, path: str) -> None:
        self.path = path

    def started(self, call: str, request: dict) -> None:
        self._write({"call": call, "state": "started", "id": request.get("id"), "op": request.get("op"),
                     "time": round(time.time(), 3)}, begin=True)

    def finished(self, call: str, response: dict) -> None:
        self._write({"call": call, "state": "finished", "response": response})

    def killed(self, call: str, seconds: float, partial: dict) -> None:
        self._write({"call": call, "state": "killed", "seconds": round(seconds, 3), "partial": partial})

    def _write(self, record: dict, begin: bool = False) -> None:
        line = json.dumps(record).encode("ascii") + b"\n"  # ascii: see send() in main()
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            # O_NOFOLLOW: a symlink put in its place is an error, not a way to make us write elsewhere.
            flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | (os.O_TRUNC if begin else os.O_APPEND)
            fd = os.open(self.path, flags, 0o644)
            try:
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    line = b"\n" + line  # after a torn line (a toolbox killed mid-write), start a new one
                while line:
                    line = line[os.write(fd, line):]
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            print(f"toolbox: cannot write the journal {self.path}: {exc}", file=sys.stderr, flush=True)

