"""A scripted model for runs whose sub-agents work side by side: one script of turns per agent.

The scripted model plays its turns in the order requests come, and sub-agents that run at once ask in
any order. `ByTask` keeps a script per agent, found by the agent's task (the first user message of its
requests: the run's task, or the task an agent_delegate call gave), so each agent plays its own turns
whatever the order. Each answer comes after `delay` seconds, as a model takes its time, and `asked`
records when each request began and ended, so a test can see which overlapped.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from orchestrator.llm.types import Reply
from orchestrator.testing import ScriptedModel


class ByTask:
    """The Model port (`complete`, `context_window`) playing `scripts[task]` for the agent whose task it is."""

    name = "by-task"

    def __init__(self, scripts: dict[str, list[dict[str, Any]]], delay: float = 0.0) -> None:
        self.models = {task: ScriptedModel({"turns": turns, "task": task}) for task, turns in scripts.items()}
        self.delay = delay
        self.asked: list[tuple[str, float, float]] = []  # (task, began, ended) of each request
        self._lock = threading.Lock()

    def context_window(self) -> int:
        return 128_000

    def complete(self, messages: list[dict], tools: list[dict], tool_choice: str | dict = "auto",
                 history_end: int | None = None, on_text: Callable[[str], None] | None = None) -> Reply:
        task = next(m["content"] for m in messages if m["role"] == "user")
        began = time.monotonic()
        time.sleep(self.delay)
        try:
            return self.models[task].complete(messages, tools, tool_choice, history_end, on_text)
        finally:
            with self._lock:
                self.asked.append((task, began, time.monotonic()))

    @property
    def requests(self) -> list[dict[str, Any]]:
        return [body for model in self.models.values() for body in model.requests]
