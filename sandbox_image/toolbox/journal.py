"""The journal of tool calls (PROTOCOL.md, "The journal"), in cairn's own files (/cairn), which the host
mounts from <run>/cairn/ and reads on resume (orchestrator/store/journal.py has the same name)."""

from __future__ import annotations

import json
import os
import sys
import threading
import time

JOURNAL_NAME = "journal.jsonl"


class Journal:
    """Each tool call's start and outcome, on disk before the command runs and before the answer is sent.

    One JSON object a line, written with one write() and fsynced: `started` (the host's call key, the
    request's id and op), then `finished` (the whole response) or `killed` (the seconds it ran and its
    output so far). The host reads it on resume, for the calls its event log has no result for.

    It keeps the records of every call until the host says it has recorded the call's outcome (a
    request's `recorded` keys): calls that run side by side, a sub-agent's among them, are each still
    found after a crash. Dropping records rewrites the file whole (a new file renamed over the old one),
    or begins it afresh when none are left, as in the usual case of one call at a time. A journal that
    cannot be written never stops a call: the toolbox says why on stderr, and a crash then looks to the
    host as if the call never ran. Calls running at once write it from their own threads.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.kept: dict | None = None  # call -> its lines in the file, in order; read from the file at first need
        self.dropped = False  # records were dropped from `kept` that the file still holds

    def started(self, call: str, request: dict) -> None:
        with self.lock:
            self._drop(request.get("recorded"))
            self._write(call, {"call": call, "state": "started", "id": request.get("id"), "op": request.get("op"),
                               "time": round(time.time(), 3)})

    def finished(self, call: str, response: dict) -> None:
        with self.lock:
            self._write(call, {"call": call, "state": "finished", "response": response})

    def killed(self, call: str, seconds: float, partial: dict) -> None:
        with self.lock:
            self._write(call, {"call": call, "state": "killed", "seconds": round(seconds, 3), "partial": partial})

    def forget(self, recorded: object) -> None:
        """Drop the records of the calls the host has recorded, told by a request that starts no call of
        its own. The file loses them at its next write: until then they are records of logged calls, which
        a resume never looks up (so a step's read of todo.md costs no write)."""
        with self.lock:
            self._drop(recorded)

    def _drop(self, recorded: object) -> None:
        if not isinstance(recorded, list) or not recorded:
            return
        kept = self._kept()
        gone = [key for key in recorded if isinstance(key, str) and kept.pop(key, None) is not None]
        self.dropped = self.dropped or bool(gone)

    def _kept(self) -> dict:
        if self.kept is None:  # what an earlier toolbox of this sandbox left: its calls may still be needed
            self.kept = {}
            try:
                with open(self.path, "rb") as f:
                    lines = f.read().split(b"\n")
            except OSError:
                lines = []
            for line in lines:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue  # a torn line
                if isinstance(record, dict) and isinstance(record.get("call"), str):
                    self.kept.setdefault(record["call"], []).append(line + b"\n")
        return self.kept

    def _write(self, call: str, record: dict) -> None:
        line = json.dumps(record).encode("ascii") + b"\n"  # ascii: see send() in server.main()
        kept = self._kept()
        if self.dropped:
            self._rewrite(extra=line)
        else:
            self._append(line)
        kept.setdefault(call, []).append(line)

    def _append(self, line: bytes) -> None:
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            # O_NOFOLLOW: a symlink put in its place is an error, not a way to make us write elsewhere.
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_APPEND, 0o644)
            try:
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    line = b"\n" + line  # after a torn line (a toolbox killed mid-write), start a new one
                _write_all(fd, line)
            finally:
                os.close(fd)
        except OSError as exc:
            _complain(self.path, exc)

    def _rewrite(self, extra: bytes) -> None:
        """The file as `kept` says, and `extra`: begun afresh when nothing is kept, else a whole new file
        renamed over the old one, so that a crash leaves the old records or the new, never neither."""
        data = b"".join(line for lines in self._kept().values() for line in lines) + extra
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            if data == extra:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_TRUNC, 0o644)
                try:
                    _write_all(fd, data)
                finally:
                    os.close(fd)
            else:
                temporary = f"{self.path}.{os.getpid()}.tmp"
                fd = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_TRUNC, 0o644)
                try:
                    _write_all(fd, data)
                finally:
                    os.close(fd)
                os.replace(temporary, self.path)
                directory = os.open(os.path.dirname(self.path), os.O_RDONLY)
                try:
                    os.fsync(directory)
                finally:
                    os.close(directory)
            self.dropped = False
        except OSError as exc:
            _complain(self.path, exc)


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]
    os.fsync(fd)


def _complain(path: str, exc: OSError) -> None:
    print(f"toolbox: cannot write the journal {path}: {exc}", file=sys.stderr, flush=True)
