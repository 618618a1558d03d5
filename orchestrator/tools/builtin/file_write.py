"""file_write: a whole file, written atomically (the toolbox's `write` op)."""

from __future__ import annotations

from typing import Any

from orchestrator.tools.outcome import Observation
from orchestrator.tools.registry import STRING, Tool, ToolContext, function_spec


def run(args: dict[str, Any], ctx: ToolContext) -> Observation:
    r = ctx.op("write", path=args["path"], content=args["content"])
    return Observation(f"wrote {r['bytes']} bytes to {r['path']}")


TOOL = Tool(
    function_spec(
        "file_write",
        "Write a whole file (atomically; parent folders are created). Relative paths are relative to the "
        "work directory.",
        {"path": STRING, "content": {**STRING, "description": "The complete new content."}},
        ["path", "content"],
    ),
    run,
    op="write",
)
