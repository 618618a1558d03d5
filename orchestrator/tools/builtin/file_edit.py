"""file_edit: one exact, unique replacement in a file (the toolbox's `edit` op)."""

from __future__ import annotations

from typing import Any

from orchestrator.tools.outcome import Observation
from orchestrator.tools.registry import STRING, Tool, ToolContext, function_spec


def run(args: dict[str, Any], ctx: ToolContext) -> Observation:
    r = ctx.op("edit", path=args["path"], old=args["old"], new=args["new"])
    return Observation(f"edited {r['path']} ({r['bytes']} bytes now)")


TOOL = Tool(
    function_spec(
        "file_edit",
        "Replace one exact, unique occurrence of `old` with `new` in a file.",
        {"path": STRING, "old": {**STRING, "description": "Text that occurs exactly once."}, "new": STRING},
        ["path", "old", "new"],
    ),
    run,
    op="edit",
)
