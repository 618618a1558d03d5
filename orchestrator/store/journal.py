"""The toolbox's journal of tool calls, read on the host when a run is resumed.

The toolbox writes it in the run's cairn directory (sandbox_image/PROTOCOL.md, "The journal"): for each
call it carries out, a `started` line before the call runs, then a `finished` line with the whole
response, or a `killed` line (how long it ran, its output so far) when the host went away mid-command.
It keeps a call's lines until the host says the call is logged (agent/recovery.py's `logged`). It tells
a resume what became of a call whose result the event log does not have.

The sandbox can write this file, so it is read as untrusted input: never through a symlink, only when
it is a regular file, at most its last MAX_BYTES, and a line that is not a journal record is skipped.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.errors import ToolError

JOURNAL_NAME = "journal.jsonl"  # in RunDir.cairn_dir, the host's side of the toolbox's JOURNAL
MAX_BYTES = 64 * 1024 * 1024  # the journal holds the calls not yet logged; a bigger file was not the toolbox's


def lane(key: str) -> str:
    """The agent a call key belongs to (the run, or the run and a sub-agent's log directory): run ids and
    log directories hold no ':'."""
    return key.split(":", 1)[0]


def call_key(run_id: str, agent: str, step: int, call_id: str) -> str:
    """The key a tool call is journaled under. The model's call id alone may repeat (a model that numbers
    its calls, a run resumed with a new script); with the run, the agent (`.` for the run's own, a
    sub-agent's log directory for its) and the step it is unique for good."""
    where = run_id if agent in ("", ".") else f"{run_id}/{agent}"
    return f"{where}:{step}:{call_id}"


@dataclass
class Entry:
    """The last word of the journal on one call."""

    state: str  # "started" (it ran, and nothing more was written), "finished" or "killed"
    response: dict[str, Any] | None = None  # finished: the toolbox's response, {"ok", "result" | "error"}
    seconds: float | None = None  # killed: how long the command had run
    partial: dict[str, Any] | None = None  # killed: its output so far, as a shell result has it


@dataclass
class Journal:
    entries: dict[str, Entry] = field(default_factory=dict)
    problem: str | None = None  # why the journal could not be read, when it exists and could not

    def get(self, key: str) -> Entry | None:
        return self.entries.get(key)


def read(cairn_dir: Path) -> Journal:
    """The journal in `cairn_dir`; an empty one when there is none."""
    try:
        data = _read_bytes(Path(cairn_dir))
    except FileNotFoundError:
        return Journal()
    except OSError as exc:
        return Journal(problem=f"cannot read {Path(cairn_dir) / JOURNAL_NAME}: {exc.strerror or exc}")
    journal = Journal()
    for line in data.split(b"\n"):
        record = _record(line)
        if record is None:
            continue  # a torn line (the toolbox killed mid-write) or not the toolbox's
        key, state = record["call"], record["state"]
        if state == "started":
            journal.entries[key] = Entry("started")
        elif state == "finished" and isinstance(record.get("response"), dict):
            journal.entries[key] = Entry("finished", response=record["response"])
        elif state == "killed":
            seconds = record.get("seconds")
            partial = record.get("partial")
            journal.entries[key] = Entry("killed", seconds=seconds if isinstance(seconds, (int, float)) else None,
                                         partial=partial if isinstance(partial, dict) else None)
    return journal


def _record(line: bytes) -> dict[str, Any] | None:
    if not line.strip():
        return None
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict) or not isinstance(record.get("call"), str):
        return None
    return record


def _read_bytes(cairn_dir: Path) -> bytes:
    """The file's last MAX_BYTES, opened without following a symlink at the cairn directory or the file
    (the sandbox may have put one there to make the host read elsewhere)."""
    parent = os.open(cairn_dir.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        directory = os.open(cairn_dir.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
    finally:
        os.close(parent)
    try:
        # O_NONBLOCK: a FIFO in its place must not hang the resume; it is refused below.
        fd = os.open(JOURNAL_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=directory)
    finally:
        os.close(directory)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{JOURNAL_NAME} is not a regular file")
        start = max(0, info.st_size - MAX_BYTES)
        data = os.pread(fd, info.st_size - start, start)
    finally:
        os.close(fd)
    return data if start == 0 else data[data.find(b"\n") + 1:]  # from the first whole line


class Replay:
    """Stands in for the sandbox to turn a journaled response into the observation the call would have
    given live: the tool runner calls it as it calls the sandbox, and gets the response back."""

    def __init__(self, response: dict[str, Any], network_enabled: bool) -> None:
        self.response, self.network_enabled = response, network_enabled

    def call(self, op: str, journal_key: str | None = None, **args: Any) -> dict[str, Any]:
        if not self.response.get("ok"):
            raise ToolError(self.response.get("error") or "the toolbox gave no reason")
        result = self.response.get("result")
        if not isinstance(result, dict):
            raise ToolError(f"the journal holds no result for this {op}")
        return result
