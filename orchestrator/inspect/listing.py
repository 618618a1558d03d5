"""`cairn ls`: one row a run, from run.json (and the event log for runs that never wrote their end)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from orchestrator.inspect.timeline import end_error, one_line, timeline
from orchestrator.runner import run_is_live
from orchestrator.store.runs import RunDir

CRASHED = "the cairn process ended without recording how (a crash or a kill); cairn resume continues it"


def list_runs(runs_dir: Path) -> list[dict[str, Any]]:
    rows = []
    for run in sorted(RunDir.all(runs_dir), key=lambda r: (r.started(), r.id)):  # ids do not sort by time
        meta = run.read_meta()
        status, usage, steps = meta.get("status", "running"), meta.get("usage"), meta.get("steps", 0)
        if status == "running":
            # The run has not written its end: it is live, or it crashed (then it is resumable).
            doc = timeline(run)
            usage, steps = doc["usage"], len(doc["steps"])
            status = "running" if run_is_live(run) else "interrupted"
        if status == "interrupted" and meta.get("status", "running") == "running":
            reason = CRASHED
        else:
            error = end_error(status, meta.get("result"), _last_status(run))
            reason = error["reason"] if error else None
        usage = usage or {}
        created = meta.get("created") or 0
        rows.append({
            "id": run.id,
            "task": meta.get("task", ""),
            "status": status,
            "steps": steps,
            "tokens": usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0),
            "cache_hit_ratio": usage.get("cache_hit_ratio", 0.0),
            "cost_usd": usage.get("cost_usd"),
            "started": created,
            "duration_s": round((meta.get("updated") or time.time()) - created, 1) if created else None,
            "reason": reason,
        })
    return rows


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


def render_runs(rows: list[dict[str, Any]], width: int | None = None) -> str:
    """The table of `cairn ls`. A run that did not finish says why in a last column, cut to `width`
    (the terminal's) when there is one; piped, every line is whole."""
    if not rows:
        return "no runs yet (start one with: cairn run \"TASK\")"
    reasons = any(r.get("reason") for r in rows)
    task_width = 40 if reasons else 60
    head = (f"{'ID':<23} {'STATUS':<11} {'STEPS':>5} {'TOKENS':>9} {'CACHE':>5} {'COST':>9} {'STARTED':<16} {'TIME':>7}  "
            + (f"{'TASK':<{task_width}}  REASON" if reasons else "TASK"))
    lines = [head]
    for r in rows:
        cost = f"${r['cost_usd']:.4f}" if r["cost_usd"] is not None else "unknown"
        started = time.strftime("%Y-%m-%d %H:%M", time.localtime(r["started"])) if r["started"] else "?"
        duration = f"{r['duration_s']:.0f}s" if r["duration_s"] is not None else "?"
        task = _clip(" ".join(r["task"].split()), task_width)
        line = (f"{r['id']:<23} {r['status']:<11} {r['steps']:>5} {r['tokens']:>9,} {r['cache_hit_ratio']:>5.0%} "
                f"{cost:>9} {started:<16} {duration:>7}  ")
        if r.get("reason"):
            line += f"{task:<{task_width}}  " + (_clip(r["reason"], width - len(line) - task_width - 2)
                                                 if width else r["reason"])
        else:
            line += task
        lines.append(line.rstrip())
    return "\n".join(lines)


def _clip(text: str, width: int) -> str:
    if width < 2:
        return ""
    return text if len(text) <= width else text[: width - 1] + "…"
