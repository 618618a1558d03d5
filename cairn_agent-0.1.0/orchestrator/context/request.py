"""The request the context engine builds: a type of its own, so that the token counter can name it without
importing the builder (which imports the history, which imports the counter)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Request:
    """One request's messages and tools. `messages[history_end:]` is the tail, rebuilt each step."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    history_end: int
    history_tokens: int  # raw tokens of messages[2:history_end], as the history keeps them
