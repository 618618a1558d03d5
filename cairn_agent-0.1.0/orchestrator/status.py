"""A run's status, named once: the eight of docs/contracts.md. A StrEnum, so a member is its JSON value
(`Status.DONE == "done"`, `str(Status.DONE) == "done"`) and run.json, events and `--json` output keep the
exact strings."""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    RUNNING = "running"
    DONE = "done"  # task_done
    WAITING = "waiting"  # ask_user
    STOPPED = "stopped"  # the model answered without a tool call
    BUDGET = "budget"
    LOOPING = "looping"
    INTERRUPTED = "interrupted"
    FAILED = "failed"


def is_status(value: object) -> bool:
    """Whether a value read from a file (run.json, an event) is one of the statuses."""
    return isinstance(value, str) and value in Status._value2member_map_
