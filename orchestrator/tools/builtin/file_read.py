"""file_read: a text file, or a range of its lines (the toolbox's `read` op)."""

from __future__ import annotations

from typing import Any

from orchestrator.tools.outcome import Observation
from orchestrator.tools.registry import STRING, Tool, ToolContext, function_spec


def run(args: dict[str, Any], ctx: ToolContext) -> Observation:
    extra = {k: int(args[k]) for k in ("offset", "limit") if isinstance(args.get(k), (int, float))}
    r = ctx.op("read", path=args["path"], **extra)
    footer = ""
    if r["start_line"] > 1 or r["end_line"] < r["total_lines"]:
        shown = r["end_line"] - r["start_line"] + 1
        by_size = r.get("truncated") and shown < extra.get("limit", r["total_lines"])
        footer = (f"[lines {r['start_line']}-{r['end_line']} of {r['total_lines']} of {r['path']}"
                  f"{' (cut at the size limit)' if by_size else ''}; read on with offset={r['end_line'] + 1}]")
    return Observation(r["content"], footer=footer)


TOOL = Tool(
    function_spec(
        "file_read",
        "Read a text file, optionally a range of lines.",
        {
            "path": {**STRING, "description": "Relative paths are relative to the work directory; absolute "
                     "paths reach anywhere in the container."},
            "offset": {"type": "integer", "description": "First line to read, 1-based (optional)."},
            "limit": {"type": "integer", "description": "How many lines to read (optional)."},
        },
        ["path"],
    ),
    run,
    op="read",
)
