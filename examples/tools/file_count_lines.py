"""An example of a tool of your own (docs/extending.md, "Adding a tool"): the number of lines of a text file.

It uses the toolbox's `read` op, asking for one line: the answer counts them all (`total_lines`), so a
big file is never sent back whole. Like every tool, it runs inside the sandbox and sees what the agent
sees; a missing or binary file comes back to the model as an error it can read.
"""

from __future__ import annotations

from typing import Any

from orchestrator.tools.outcome import Observation
from orchestrator.tools.registry import STRING, Tool, ToolContext, function_spec


def count_lines(args: dict[str, Any], ctx: ToolContext) -> Observation:
    r = ctx.op("read", path=args["path"], limit=1)
    return Observation(f"{r['path']}: {r['total_lines']} lines")


FILE_COUNT_LINES = Tool(
    function_spec(
        "file_count_lines",
        "Count the lines of a text file without reading it into the context.",
        {"path": {**STRING, "description": "Relative paths are relative to the work directory."}},
        ["path"],
    ),
    count_lines,
    op="read",
)
