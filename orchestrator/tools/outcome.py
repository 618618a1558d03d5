"""What a tool call gives back: an Observation, or one of the exceptions that end a step.

Every outcome is an observation the model sees, failures included: malformed arguments, unknown
tools, non-zero exits, timeouts and refused paths all come back as text with `error=True`.
`task_done` and `ask_user` end the step by raising, carrying what the loop must record. The tools
themselves are in `tools/registry.py` and `tools/builtin/`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The built-in tools whose successful call writes a file of the workspace: the one in its `path`
# argument, or todo.md for todo_write (read by agent/delegate.py and the report).
WRITING_TOOLS = ("file_write", "file_edit", "todo_write")


@dataclass
class Observation:
    text: str  # the result itself: what a big result's file holds, byte for byte
    error: bool = False
    footer: str = ""  # facts about the result (exit code, time), kept in context after any preview
    saved_path: str | None = None  # the toolbox already saved the full output here
    note: str | None = None  # e.g. the sandbox was restarted
    child: dict[str, Any] | None = None  # agent_delegate: the sub-agent's id, log path, status, paths


class TaskDone(Exception):
    def __init__(self, summary: str) -> None:
        super().__init__(summary)
        self.summary = summary


class AskUser(Exception):
    def __init__(self, question: str) -> None:
        super().__init__(question)
        self.question = question


class BadCall(Exception):
    """The call cannot be run as written; the message goes back to the model."""
