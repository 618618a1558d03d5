"""A session op's result (sandbox_image/PROTOCOL.md, "Terminal sessions") as the Observation the model
reads: the rendered output, then a footer that always says whether the program still runs."""

from __future__ import annotations

import base64
from typing import Any

from orchestrator.tools.outcome import BadCall, Observation
from orchestrator.tools.sessions.screen import render_lines, render_screen

MAX_WAIT = 600.0  # seconds one call may wait; longer jobs are read again later
NO_OUTPUT = "(no new output)"


def check_wait(args: dict[str, Any], default: float) -> float:
    """The call's `wait`, or BadCall saying what it must be."""
    wait = args.get("wait", default)
    if wait is None:
        return default
    if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 <= wait <= MAX_WAIT:
        raise BadCall(f"wait must be a number of seconds from 0 to {MAX_WAIT:g}, not {wait!r}")
    return float(wait)


def observe(r: dict[str, Any], stopped: bool = False) -> Observation:
    """The observation of a session_start/send/stop result."""
    head, tail = base64.b64decode(r.get("head") or ""), base64.b64decode(r.get("tail") or "")
    columns, rows = int(r.get("columns") or 120), int(r.get("rows") or 40)
    name, log = r["session"], r["log_path"]
    if r.get("screen"):
        text, (row, column) = render_screen(head, columns, rows)
        header = f"[the screen of session {name} (a full-screen program, {columns}x{rows}; cursor at row {row}, column {column}):]"
        text = f"{header}\n{text}" if text else f"{header}\n(blank)"
    elif tail:
        omitted = int(r["end"]) - int(r["start"]) - len(head) - len(tail)
        text = (f"{render_lines(head, columns, rows, on_screen=bool(r.get('from_screen')))}\n[... {omitted:,} bytes of output omitted here; all that the "
                f"session printed is kept in {log} ...]\n{render_lines(tail, columns, rows)}")
    else:
        text = render_lines(head, columns, rows, on_screen=bool(r.get("from_screen"))) or NO_OUTPUT
    return Observation(text, error=bool(r.get("exit_code")) and not stopped, footer=footer(r, stopped))


def footer(r: dict[str, Any], stopped: bool) -> str:
    name, seconds = r["session"], float(r.get("seconds") or 0)
    if stopped:
        state = f"[session {name} stopped ({r.get('note') or 'done'}); exit code {r.get('exit_code')}]"
    elif r.get("running") and r.get("waits_for_input"):
        state = f"[session {name} is still running ({duration(seconds)} so far) and waits for input; type with shell_send]"
    elif r.get("running"):
        state = f"[session {name} is still running ({duration(seconds)} so far); read on or type with shell_send]"
    else:
        state = f"[session {name} exited with code {r.get('exit_code')} after {duration(seconds)}; it is closed]"
    lines = [state]
    note = r.get("note")
    if not stopped and isinstance(note, str) and note.startswith("interrupted"):
        lines.append(f"[{note}]")
    if r.get("unseen"):  # the toolbox could not tell whether it waits for input: the whole wait was waited
        lines.append(f"[cairn cannot see here whether it waits for input ({r['unseen']}); so this answer came after "
                     "the whole wait]")
    if r.get("not_kept"):
        lines.append(f"[{r['not_kept']:,} bytes it printed past the log's size limit were counted, not kept]")
    if r.get("sandbox_restarted"):
        lines.append(str(r["sandbox_restarted"]))
    return "\n".join(lines)


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
