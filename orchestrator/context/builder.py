"""Assembling one request, in the order that lets the provider's prefix cache do its work.

    [system] [user: task] [history ...] [user: tail]

Everything before the tail only grows at its end from one step to the next, so each request shares
its whole prefix with the one before. The tail (the plan and the notices) changes every step; it is
last, so it invalidates nothing, and it is never stored, so yesterday's budget notice does not sit
in the history forever.
"""

from __future__ import annotations

import json
from typing import Any

from orchestrator.context.frames import defuse
from orchestrator.context.history import History
from orchestrator.context.request import Request

TAIL_BEGIN = "<cairn-status>"
TAIL_END = "</cairn-status>"
# What the tail recites came from the sandbox (todo.md, file names in notices, the critic's reading of
# outputs): a tag of either frame in it, in any spelling a model would read as one, is defused
# (context/frames.py) so that the frame ends only where cairn ends it.
# The tail is sent, uncached, with every request: a todo.md longer than this is recited in part.
TODO_MAX_BYTES = 8 * 1024

NO_TODO = (
    "There is no todo.md yet. Make one with todo_write: a short markdown checklist of the plan. "
    "Keep it current as you work; it is shown here every step."
)


def build_request(system_prompt: str, tools: list[dict[str, Any]], task: str, history: History, tail: str) -> Request:
    """The request for this step. The same inputs give the same bytes."""
    messages = [
        {"role": "system", "content": system_prompt},
        {"role": "user", "content": task},
        *history.messages(),
    ]
    history_end = len(messages)
    messages.append({"role": "user", "content": tail})
    return Request(messages, normalize_tools(tools), history_end, history.tokens())


def normalize_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tools with every object's keys in sorted order, whatever order they were written in.

    Dicts keep insertion order, and the HTTP client serializes them in that order, so a round trip
    through sorted JSON fixes the bytes the provider sees.
    """
    return json.loads(json.dumps(tools, sort_keys=True, ensure_ascii=False))


def todo_cut_note(path: str, shown_lines: int, total_lines: int) -> str:
    """What the tail says under a todo.md it recites only in part (longer than TODO_MAX_BYTES)."""
    return (f"[cairn cut todo.md here: only its first {TODO_MAX_BYTES // 1024} KiB (lines 1-{shown_lines} of "
            f"{total_lines:,}) are shown. The whole file is {path}; file_read reads the rest. Keep the plan short.]")


def render_tail(todo: str | None, notices: list[str], todo_cut: str | None = None, critic: str | None = None) -> str:
    """The status block at the end of every request: the plan, then the notices, in a fixed frame.

    `todo` is the text of todo.md (None or blank when there is none); `todo_cut`, the note that says
    it was cut (`todo_cut_note`). `notices` are one-line facts for this step: steps and budget left,
    a loop warning, files the user changed. `critic`: the critic's note (orchestrator/agent/critic.py), shown
    once, in the tail of the request after it was made.
    """
    plan = _defuse(todo.strip("\n")) if todo and todo.strip() else NO_TODO
    if todo_cut:
        plan = f"{plan}\n{_defuse(todo_cut)}"
    notes = "\n".join(f"- {_defuse(notice.strip())}" for notice in notices) if notices else "- none"
    critic = _defuse(critic) if critic else critic
    return "\n".join(
        [
            TAIL_BEGIN,
            "This block is written by cairn each step; it is not a message from the user.",
            "## todo.md",
            plan,
            "## Notices",
            notes,
            *(["## A critic's review of your recent steps", critic.strip()] if critic else []),
            TAIL_END,
        ]
    )


def _defuse(text: str) -> str:
    """`text` with every tag of cairn's frames in it made inert: `</cairn-status>` becomes
    `[/cairn-status]`, which no reader takes for the frame's end."""
    return defuse(text)
