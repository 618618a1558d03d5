"""shell_stop: end a terminal session and every process it started (the toolbox's `session_stop` op)."""

from __future__ import annotations

from typing import Any

from orchestrator.tools.outcome import Observation
from orchestrator.tools.registry import STRING, Tool, ToolContext, function_spec
from orchestrator.tools.sessions.answer import observe


def run(args: dict[str, Any], ctx: ToolContext) -> Observation:
    r = ctx.op("session_stop", name=args["session"], inline_bytes=ctx.cfg.inline_output_bytes)
    return observe(r, stopped=True, inline_bytes=ctx.cfg.inline_output_bytes)


TOOL = Tool(
    function_spec(
        "shell_stop",
        "End a terminal session: its program and everything it started are killed (hang-up, then "
        "terminate, then kill). You get its last output. Stop servers and jobs you no longer need.",
        {"session": {**STRING, "description": "The session's name."}},
        ["session"],
    ),
    run,
    op="session_stop",
)
