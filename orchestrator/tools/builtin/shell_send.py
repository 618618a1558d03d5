"""shell_send: keys typed into a terminal session, and what it showed since the last answer (the
toolbox's `session_send` op)."""

from __future__ import annotations

from typing import Any

from orchestrator.tools.outcome import BadCall, Observation
from orchestrator.tools.registry import STRING, Tool, ToolContext, function_spec
from orchestrator.tools.sessions import keys as key_names
from orchestrator.tools.sessions.answer import MAX_WAIT, check_wait, observe

DEFAULT_WAIT = 2.0


def run(args: dict[str, Any], ctx: ToolContext) -> Observation:
    wait = check_wait(args, DEFAULT_WAIT)
    typed = args.get("keys", "")
    if not isinstance(typed, str):
        raise BadCall("keys must be a string (\"\" only waits and reads)")
    r = ctx.op("session_send", name=args["session"], keys=key_names.to_bytes(typed), wait=wait,
                         inline_bytes=ctx.cfg.inline_output_bytes)
    return observe(r)


TOOL = Tool(
    function_spec(
        "shell_send",
        "Type keys into a terminal session started with shell_start and get what it showed since the last "
        "answer (a full-screen program: its whole screen) and whether it still runs. The answer comes as soon "
        "as the program has taken the keys and waits for input again (a REPL's next prompt) or exits, else "
        "after `wait` seconds. In `keys` a "
        "newline is Enter, and these are keys: <Enter> <Tab> <Esc> <Backspace> <Up> <Down> <Left> <Right> "
        "and <C-a> ... <C-z> (<C-c> interrupts, <C-d> ends input); anything else is typed as it is. Empty "
        "keys only wait and read: the way to follow a long job.",
        {
            "session": {**STRING, "description": "The session's name, as shell_start gave it."},
            "keys": {**STRING, "description": "What to type, e.g. \"print(x)\\n\" or \"<C-c>\"; \"\" to only read."},
            "wait": {"type": "number", "description": f"Seconds to wait at most, 0 to {MAX_WAIT:g} (optional, "
                     f"default {DEFAULT_WAIT:g}); the answer comes sooner when the program waits for input or "
                     "exits, so a busy one gets all of it."},
        },
        ["session", "keys"],
    ),
    run,
    op="session_send",
)
