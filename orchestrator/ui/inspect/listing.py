"""`cairn ls`: one row a run, from run.json (and the event log for runs that never wrote their end).

A run whose run.json or event log cannot be read, or does not fit its schema (store/run_meta.py: an
import from a broken cairn, a disk that filled, a hand edit) is listed as `unreadable` with one line
why, and never stops the others from being listed;
`unreadable_reason` is also what `cairn show` and `cairn report` say of it. Whether a run holds a
container comes from one question to the engine for all runs (inspect/held.py).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator.errors import UsageError
from orchestrator.ui.inspect.held import States, container_states, held_by
from orchestrator.ui.inspect.timeline import end_error, timeline
from orchestrator.store import run_meta
from orchestrator.store.liveness import run_is_live
from orchestrator import events as ev
from orchestrator.store.run_dir import RunDir
from orchestrator.ui.terminal import clean
from orchestrator.status import Status

UNREADABLE = "unreadable"

def meta_problem(meta: dict[str, Any]) -> str | None:
    """What is wrong with a run.json that parsed, in a few words; None when `ls` and `show` can read it
    (store/run_meta.py, the schema `cairn import` holds an archive to)."""
    return run_meta.problem(meta)


def events_problem(run: RunDir) -> str | None:
    """The first line of the event log that is not an event (a torn last line is not a problem)."""
    try:
        data = run.events.path.read_bytes() if run.events.path.exists() else b""
    except OSError as exc:
        return f"state/events.jsonl cannot be read ({exc.strerror})"
    lines = data.split(b"\n")[:-1]  # the part after the last newline is a torn line, set aside on resume
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            ev.parse_event(line)
        except ValidationError as exc:
            first = exc.errors()[0]
            return f"state/events.jsonl line {number} is not an event ({first['msg'][:80]})"
    return None


def unreadable_reason(run: RunDir) -> str | None:
    """Why this run cannot be shown, in one line; None when it can."""
    try:
        meta = run.read_meta()
    except UsageError as exc:
        return exc.message.replace(f"run {run.id} has an unreadable ", "")
    return meta_problem(meta) or events_problem(run)


def check_readable(run: RunDir, events_too: bool = False) -> None:
    """A UsageError in one line when the run cannot be shown (the event log is checked with
    `events_too`, or by the caller once parsing it failed)."""
    try:
        meta = run.read_meta()
    except UsageError:
        meta = None
    why = unreadable_reason(run) if meta is None or events_too else meta_problem(meta)
    if why:
        raise UsageError(f"run {run.id} is unreadable: {why}")



CRASHED = "the cairn process ended without recording how (a crash or a kill); cairn resume continues it"


def list_runs(runs_dir: Path, remember: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every run's row, oldest first. `remember` (a dict that `cairn serve` keeps between calls) holds
    each run's row and start time with the sizes and times of the files they were read from, which are
    read again only when one of those changed; a running run's row is always read again (whether its
    process still lives is in no file)."""
    runs = RunDir.all(runs_dir)
    held = container_states() if runs else {}
    listed = []
    for run in runs:
        started, row = _remembered(run, remember)
        listed.append((started, run.id, {**row, "container": held_by(run, held)}))
    if remember is not None:
        for gone in set(remember) - {run.id for run in runs}:
            remember.pop(gone, None)
    listed.sort(key=lambda entry: (entry[0], entry[1]))  # ids do not sort by time
    return [row for _started, _id, row in listed]


def _remembered(run: RunDir, remember: dict[str, Any] | None) -> tuple[float, dict[str, Any]]:
    stamp = _stamp(run) if remember is not None else None
    kept = remember.get(run.id) if remember is not None else None
    if kept is not None and kept[0] == stamp:
        return kept[1], kept[2]
    row = run_row(run)
    started = row["started"] or run.started()  # run.started() reads run.json again
    if remember is not None and row["status"] != Status.RUNNING:
        remember[run.id] = (stamp, started, row)
    return started, row


def _stamp(run: RunDir) -> tuple[Any, ...]:
    """What changes when a run's row may: its run.json, its event log and its pid file (a resume)."""
    out: list[Any] = []
    for path in (run.meta_path, run.events.path, run.state / "pid"):
        try:
            info = os.stat(path)
            out.append((info.st_mtime_ns, info.st_size))
        except OSError:
            out.append(None)
    return tuple(out)


def run_row(run: RunDir) -> dict[str, Any]:
    """One run's row of `ls` (its container not asked for): what `cairn serve` shows atop a run's page."""
    try:
        return _row(run)
    except (UsageError, ValidationError):
        return _unreadable_row(run, unreadable_reason(run) or "its event log cannot be read", None)
    except (AttributeError, TypeError, KeyError, ValueError, OverflowError) as exc:
        # A value no schema check foresaw: this run's row says so, and every other run is listed as usual.
        return _unreadable_row(run, f"state/run.json or its event log holds a value cairn cannot show "
                                    f"({type(exc).__name__}: {str(exc)[:120]})", None)


def _unreadable_row(run: RunDir, why: str, held: States | None) -> dict[str, Any]:
    return {"id": run.id, "task": "", "status": UNREADABLE, "reason": why, "steps": 0, "tokens": 0,
            "cache_hit_ratio": 0.0, "cost_usd": None, "started": 0, "duration_s": None, "check": None,
            "container": held_by(run, held)}


def _row(run: RunDir) -> dict[str, Any]:
    """One run's row; UsageError or ValidationError when its run.json or event log cannot be read."""
    live = run_is_live(run)  # before run.json: a run writes its end there before its lock goes
    meta = run.read_meta()
    why = meta_problem(meta)
    if why:
        raise UsageError(why)
    status, usage, steps = meta.get("status", "running"), meta.get("usage"), meta.get("steps", 0)
    if status == Status.RUNNING:
        # The run has not written its end: it is live, or it crashed (then it is resumable).
        doc = timeline(run)
        usage, steps = doc["usage"], len(doc["steps"])
        status = "running" if live else "interrupted"
    if status == Status.INTERRUPTED and meta.get("status", Status.RUNNING) == Status.RUNNING:
        reason = CRASHED
    else:
        error = end_error(status, meta.get("result"), _last_status(run))
        reason = error["reason"] if error else None
    usage = usage or {}
    created = meta.get("created") or 0
    return {
        "id": run.id,
        "task": meta.get("task", ""),
        "status": status,
        "steps": steps,
        "tokens": (usage.get("prompt_tokens") or 0) + (usage.get("completion_tokens") or 0),
        "cache_hit_ratio": usage.get("cache_hit_ratio") or 0.0,
        "cost_usd": usage.get("cost_usd"),
        "started": created,
        "duration_s": round((meta.get("updated") or time.time()) - created, 1) if created else None,
        "check": check_word(meta.get("check")),
        "reason": reason,
    }


def check_word(check: dict[str, Any] | None) -> str | None:
    """`passed` or `failed` for a run whose check ran (--check), else None."""
    if not check or check.get("passed") is None:
        return None
    return "passed" if check["passed"] else "failed"


def _last_status(run: RunDir, tail: int = 65536) -> dict[str, Any] | None:
    """The run's last StatusChanged event, read from the end of its log: the end of a run is its last
    line or nearly, and `ls` should not read a whole long log per run to find it."""
    try:
        with open(run.events.path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - tail))
            chunk = f.read()
    except OSError:
        return None
    lines = chunk.split(b"\n")
    if size > tail:
        lines = lines[1:]  # the first is likely cut
    for line in reversed(lines):
        if b'"type": "status"' not in line:
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        return {"reason": event.get("reason") or "", "step": event.get("step"), "type": "status", "index": None}
    return _status_of(run) if size > tail else None  # further back than the tail: read the whole log


def _status_of(run: RunDir) -> dict[str, Any] | None:
    events, _torn = run.events.read()
    for e in reversed(events):
        if getattr(e, "type", None) == "status":
            return {"reason": e.reason, "step": e.step, "type": "status", "index": None}
    return None


def render_runs(rows: list[dict[str, Any]], width: int | None = None, wide: bool = False) -> str:
    """The table of `cairn ls`: id, status, (check,) steps, cost, start, task, and for a run that did not
    finish why (REASON). On a terminal the task and the reason share what is left of its width; where
    that leaves the reason too little (80 columns), it goes on a line of its own under its run. Piped, or
    with `wide` (which adds tokens, cache, time and container), every line is whole."""
    if not rows:
        return "no runs yet (start one with: cairn run \"TASK\")"
    reasons = any(r.get("reason") for r in rows)
    checks = wide or any(r.get("check") for r in rows)
    id_width = max(len(r["id"]) for r in rows)
    extra = f"{'TOKENS':>9} {'CACHE':>5} {'TIME':>7} {'CONTAINER':<9} " if wide else ""
    lead = (f"{'ID':<{id_width}} {'STATUS':<11} " + (f"{'CHECK':<6} " if checks else "")
            + f"{'STEPS':>5} {'COST':>9} {'STARTED':<11} {extra} ")
    room = None if wide or width is None else max(10, width - len(lead))
    task_width = (min(40, max(12, room // 3)) if room is not None else 40) if reasons else None
    below = room is not None and reasons and room - task_width - 2 < 30  # no room beside the task
    if below:
        task_width = None
    lines = [(lead + (f"{'TASK':<{task_width}}  REASON" if task_width else "TASK")).rstrip()]
    for r in rows:
        cost = f"${r['cost_usd']:.4f}" if r["cost_usd"] is not None else "-"
        started = time.strftime("%m-%d %H:%M", time.localtime(r["started"])) if r["started"] else "?"
        more = ""
        if wide:
            duration = f"{r['duration_s']:.0f}s" if r["duration_s"] is not None else "?"
            more = (f"{r['tokens']:>9,} {r['cache_hit_ratio']:>5.0%} {duration:>7} "
                    f"{r.get('container') or '-':<9} ")
        line = (f"{r['id']:<{id_width}} {r['status']:<11} " + (f"{r['check'] or '-':<6} " if checks else "")
                + f"{r['steps']:>5} {cost:>9} {started:<11} {more} ")
        task = " ".join(clean(r["task"]).split()) if r["status"] != UNREADABLE else ""
        reason = " ".join(clean(r.get("reason") or "").split())
        if task_width:
            line += f"{_clip(task, task_width) if room is not None else task:<{task_width}}  "
            line += _clip(reason, room - task_width - 2) if room is not None else reason
        else:
            line += _clip(task, room) if room is not None else task
        lines.append(line.rstrip())
        if below and reason:
            lines.append("  ↳ " + _clip(reason, width - 4))
    return "\n".join(lines)


def select_runs(rows: list[dict[str, Any]], statuses: list[str] | None = None,
                newest: int | None = None) -> list[dict[str, Any]]:
    """`cairn ls --status S[,S...]` (the runs in one of these statuses) and `-n N` (the newest N of
    them), kept oldest first."""
    if statuses:
        rows = [r for r in rows if r["status"] in statuses]
    if newest is not None:
        rows = rows[-newest:] if newest else []
    return rows


def _clip(text: str, width: int) -> str:
    if width < 2:
        return ""
    return text if len(text) <= width else text[: width - 1] + "…"
