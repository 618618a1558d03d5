"""shell_start: a program in a terminal session of its own, that keeps running after the call (the
toolbox's `session_start` op; the host half is tools/sessions/)."""

from __future__ import annotations

from typing import Any

from orchestrator.tools.outcome import Observation
from orchestrator.tools.registry import STRING, Tool, ToolContext, function_spec
from orchestrator.tools.sessions.answer import MAX_WAIT, check_wait, observe

DEFAULT_WAIT = 5.0


def run(args: dict[str, Any], ctx: ToolContext) -> Observation:
    wait = check_wait(args, DEFAULT_WAIT)
    name = args.get("session")
    r = ctx.op("session_start", command=args["command"], wait=wait,
                         **({"name": name} if name is not None else {}),
                         inline_bytes=ctx.cfg.inline_output_bytes, max_file_bytes=ctx.cfg.max_output_file_bytes)
    return observe(r)


TOOL = Tool(
    function_spec(
        "shell_start",
        "Start a program in a terminal session of its own that keeps running after this call: a server, "
        "a long build or training run, a REPL or debugger, anything that asks questions or draws a "
        "full-screen UI. It starts in the work directory. The answer comes as soon as the program waits for "
        "input (a prompt, a REPL ready) or exits, else after `wait` seconds: what it printed, and whether it "
        "still runs and waits for input. Continue with shell_send, end it with shell_stop. Everything it "
        "prints is also kept in /cairn/sessions/<session>.log. For a command that simply finishes, use "
        "shell_exec.",
        {
            "command": {**STRING, "description": "The command line, run by bash (e.g. `python3 -m http.server "
                        "8000`, `python3`, `bash`)."},
            "session": {**STRING, "description": "A name for the session (optional; by default the program's "
                        "name)."},
            "wait": {"type": "number", "description": f"Seconds to wait at most, 0 to {MAX_WAIT:g} (optional, "
                     f"default {DEFAULT_WAIT:g}); the answer comes sooner when the program waits for input or "
                     "exits, so a busy one (a server, a build) gets all of it."},
        },
        ["command"],
    ),
    run,
    op="session_start",
)
