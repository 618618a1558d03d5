"""The terminal sessions as the status block at the end of every request lists them, so the agent never
forgets a server it started, nor takes a session that ended with an old sandbox for a live one.

The toolbox is asked (its `sessions` op), not the history: only it knows what still runs, and after a
crash, a resume or a restarted sandbox it knows which sessions the last sandbox left running (its
registry in /cairn/sessions/). It is asked only in runs that have that registry, so a run that never
started a session pays nothing for this.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol

from orchestrator.errors import ToolError
from orchestrator.ports import ToolSandbox
from orchestrator.tools.sessions.answer import duration

REGISTRY = Path("sessions") / "sessions.json"  # in the run's cairn directory (the toolbox's REGISTRY_NAME)


class WithSessions(Protocol):
    """The agent whose sessions are listed: its run's cairn directory and its sandbox."""

    run_dir: Any  # a RunDir or a sub-agent's ChildRun: both have `cairn_dir`
    sandbox: ToolSandbox


def session_notices(agent: WithSessions) -> list[str]:
    """One notice a session: name, command, running for how long, exited or gone."""
    if not os.path.lexists(Path(agent.run_dir.cairn_dir) / REGISTRY):
        return []
    try:
        listing = agent.sandbox.call("sessions")
    except ToolError:
        return []
    return [describe(s) for s in listing.get("sessions") or [] if isinstance(s, dict)]


def describe(s: dict[str, Any]) -> str:
    head = f"Terminal session {s.get('name')} (`{_short(str(s.get('command')))}`)"
    if s.get("state") == "gone":
        return (f"{head} is gone: it was running when the run stopped or the sandbox restarted, and ended with "
                f"the old sandbox; its output is in {s.get('log_path')}. shell_start runs it again.")
    if s.get("running"):
        unread = int(s.get("unread") or 0)
        more = f"; {unread:,} bytes of output not yet read (shell_send with empty keys)" if unread else ""
        return f"{head}: running for {duration(float(s.get('seconds') or 0))}{more}."
    return (f"{head}: exited with code {s.get('exit_code')}; shell_send with empty keys reads the rest of its "
            "output and closes it.")


def _short(command: str, width: int = 80) -> str:
    flat = " ".join(command.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"
