"""task_done: the model says the task is finished; the loop ends the run (or runs its check)."""

from __future__ import annotations

from typing import Any

from orchestrator.tools.outcome import Observation, TaskDone
from orchestrator.tools.registry import STRING, Tool, ToolContext, function_spec


def run(args: dict[str, Any], ctx: ToolContext) -> Observation:
    raise TaskDone(args["summary"])


TOOL = Tool(
    function_spec(
        "task_done",
        "Finish the task. Call it once the work is complete and checked.",
        {"summary": {**STRING, "description": "What was done and where the results are."}},
        ["summary"],
    ),
    run,
)
