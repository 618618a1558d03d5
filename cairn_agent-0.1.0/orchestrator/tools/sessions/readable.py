"""A session call on one line, as a person reads it in `cairn show`, `cairn watch`, the live display and
the report: the session, then the command started or the keys typed (⏎ for Enter, ^C for Ctrl-C)."""

from __future__ import annotations

import json
from typing import Any

from orchestrator.tools.sessions.keys import shown

SESSION_TOOLS = ("shell_start", "shell_send", "shell_stop")


def call_summary(name: str, arguments: Any) -> str | None:
    """The call in short, or None for a call that is not a session call (or whose arguments are not an
    object: it is shown as written)."""
    if name not in SESSION_TOOLS:
        return None
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    session = arguments.get("session")
    wait = arguments.get("wait")
    waited = f"  (wait {wait} s)" if isinstance(wait, (int, float)) and not isinstance(wait, bool) else ""
    if name == "shell_start":
        return f"{session or '(new session)'} $ {arguments.get('command')}{waited}"
    if name == "shell_send":
        keys = arguments.get("keys")
        typed = f"⌨ {shown(keys)}" if isinstance(keys, str) and keys else "(only reads)"
        return f"{session} {typed}{waited}"
    return f"{session}"
