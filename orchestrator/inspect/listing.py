"""`cairn ls`: one row a run, from run.json (and the event log for runs that never wrote their end)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from orchestrator.inspect.timeline import timeline
from orchestrator.runner import run_is_live
from orchestrator.store.runs import RunDir
from orchestrator.terminal import clean


def list_runs(runs_dir: Path) -> list[dict[str, Any]]:
    rows = []
    for run in RunDir.all(runs_dir):
        meta = run.read_meta()
        status, usage, steps = meta.get("status", "running"), meta.get("usage"), meta.get("steps", 0)
        if status == "running":
            # The run has not written its end: it is live, or it crashed (then it is resumable).
            doc = timeline(run)
            usage, steps = doc["usage"], len(doc["steps"])
            status = "running" if run_is_live(run) else "interrupted"
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
        })
    return rows


def render_runs(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "no runs yet (start one with: cairn run \"TASK\")"
    head = f"{'ID':<23} {'STATUS':<11} {'STEPS':>5} {'TOKENS':>9} {'CACHE':>5} {'COST':>9} {'STARTED':<16} {'TIME':>7}  TASK"
    lines = [head]
    for r in rows:
        cost = f"${r['cost_usd']:.4f}" if r["cost_usd"] is not None else "unknown"
        started = time.strftime("%Y-%m-%d %H:%M", time.localtime(r["started"])) if r["started"] else "?"
        duration = f"{r['duration_s']:.0f}s" if r["duration_s"] is not None else "?"
        task = " ".join(clean(r["task"]).split())
        lines.append(f"{r['id']:<23} {r['status']:<11} {r['steps']:>5} {r['tokens']:>9,} {r['cache_hit_ratio']:>5.0%} "
                     f"{cost:>9} {started:<16} {duration:>7}  {task[:60]}")
    return "\n".join(lines)
