"""`cairn ls`: one row a run, from the run's view (orchestrator/view/): the same status, reason and result
`show`, `watch`, the web page and the API give it.

A run whose run.json or event log cannot be read, or does not fit its schema (store/run_meta.py: an
import from a broken cairn, a disk that filled, a hand edit) is listed as `unreadable` with one line why, and never stops the others from being listed;
`unreadable_reason` is also what `cairn show` and `cairn report` say of it. Whether a run holds a
container comes from one question to the engine for all runs (inspect/held.py).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from orchestrator.errors import UsageError
from orchestrator.store.run_dir import RunDir
from orchestrator.ui.inspect.held import container_states, held_by
from orchestrator.ui.terminal import clean
from orchestrator.view.read import UNREADABLE, RunView, read_view, views


def unreadable_reason(run: RunDir) -> str | None:
    """Why this run cannot be shown, in one line; None when it can."""
    view = read_view(run)
    return view.reason if view.status == UNREADABLE else None


def check_readable(run: RunDir) -> None:
    """A UsageError in one line when the run cannot be shown."""
    why = unreadable_reason(run)
    if why:
        raise UsageError(f"run {run.id} is unreadable: {why}")


def list_runs(runs_dir: Path) -> list[dict[str, Any]]:
    """Every run's row, oldest first."""
    found = views(runs_dir)
    held = container_states() if found else {}
    return [{**row_of(view), "container": held_by(RunDir(runs_dir / view.id), held)} for view in found]


def run_row(run: RunDir) -> dict[str, Any]:
    """One run's row of `ls` (its container not asked for): what `cairn serve` shows atop a run's page."""
    return row_of(read_view(run))


def row_of(view: RunView) -> dict[str, Any]:
    """A run's row: its view in the few words `ls` shows (`ls --json` gives these keys)."""
    usage = view.usage
    return {
        "id": view.id,
        "task": view.task,
        "status": view.status,
        "steps": view.steps,
        "tokens": (usage.get("prompt_tokens") or 0) + (usage.get("completion_tokens") or 0),
        "cache_hit_ratio": usage.get("cache_hit_ratio") or 0.0,
        "cost_usd": usage.get("cost_usd"),
        "started": view.created,
        "duration_s": round((view.updated or time.time()) - view.created, 1) if view.created else None,
        "check": check_word(view.check),
        "reason": view.reason,
        "result": view.result,
        "forked_from": view.forked_from,
        "waiting": view.waiting,
        "running": _running(view.running),
    }


def _running(call: dict[str, Any] | None) -> dict[str, Any] | None:
    """The call that runs now, without its output (`show --json` and the page have that)."""
    return {key: value for key, value in call.items() if key != "output"} if call else None


def check_word(check: dict[str, Any] | None) -> str | None:
    """`passed` or `failed` for a run whose check ran (--check), else None."""
    if not check or check.get("passed") is None:
        return None
    return "passed" if check["passed"] else "failed"


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
    task_width, below = _task_width(rows, room) if reasons else (None, False)
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


TASK_AT_LEAST, REASON_AT_LEAST = 30, 24  # columns each gets beside the other, before the reason goes below


def _task_width(rows: list[dict[str, Any]], room: int | None) -> tuple[int | None, bool]:
    """The TASK column's width when a REASON column follows it, and whether the reasons go on lines of
    their own instead (None, True). Each gets what it needs when both fit; else the reasons whole when
    the task keeps its least beside them; else each its least, and the columns left shared as each
    still needs them."""
    if room is None:
        return 40, False
    need_task = max(len(" ".join(clean(r["task"]).split())) for r in rows)
    need_reason = max(len(" ".join(clean(r.get("reason") or "").split())) for r in rows)
    least_task, least_reason = min(need_task, TASK_AT_LEAST), min(need_reason, REASON_AT_LEAST)
    if max(4, least_task) + 2 + least_reason > room:
        return None, True
    if need_task + 2 + need_reason <= room:
        return max(need_task, 4), False
    if room - need_reason - 2 >= least_task:  # the reasons whole, the task the rest
        return room - need_reason - 2, False
    spare = room - max(4, least_task) - 2 - least_reason
    more_task, more_reason = need_task - least_task, need_reason - least_reason
    return max(4, least_task) + spare * more_task // max(1, more_task + more_reason), False


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
