"""todo_write: the agent's plan, todo.md in the work directory (the toolbox's `write` op)."""

from __future__ import annotations

from typing import Any

from orchestrator.tools.outcome import Observation
from orchestrator.tools.registry import STRING, Tool, ToolContext, function_spec


def run(args: dict[str, Any], ctx: ToolContext) -> Observation:
    r = ctx.op("write", path="todo.md", content=args["content"])
    return Observation(f"todo.md updated ({r['bytes']} bytes)")


TOOL = Tool(
    function_spec(
        "todo_write",
        "Replace todo.md in the work directory, your plan, with new markdown. It is shown to you at the end of "
        "every request; keep it current.",
        {"content": {**STRING, "description": "The whole new todo.md."}},
        ["content"],
    ),
    run,
    op="write",
)
