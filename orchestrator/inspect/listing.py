"""`cairn ls`: one row a run, from run.json (and the event log for runs that never wrote their end), and
whether it holds a container: one question to the engine for all runs, without docker-py (whose import
alone costs more than the rest of `ls`), and none at all when no engine listens."""

from __future__ import annotations

import http.client
import json
import os
import socket
import time
import urllib.parse
from pathlib import Path
from typing import Any

from orchestrator.inspect.timeline import timeline
from orchestrator.runner import run_is_live
from orchestrator.store.runs import RunDir


ENGINE_TIMEOUT = 2.0  # seconds: ls stays quick when an engine hangs
DEFAULT_SOCKET = "/var/run/docker.sock"


def list_runs(runs_dir: Path) -> list[dict[str, Any]]:
    rows = []
    runs = RunDir.all(runs_dir)
    held = container_states() if runs else {}
    for run in runs:
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
            "container": _held_by(run, held),
        })
    return rows


def _held_by(run: RunDir, held: dict[tuple[str, str | None], str] | None) -> str | None:
    """"running" or "stopped" when the run holds a container, else None (also when no engine answered).
    A container made for another directory of the same run id (a copy's original) is not this run's."""
    held = held or {}
    return held.get((run.id, str(run.root.resolve()))) or held.get((run.id, None))


def container_states() -> dict[tuple[str, str | None], str] | None:
    """"running" or "stopped" for each container cairn made, by (run id, the run directory it was made
    for, None when not recorded). None when no engine answers, or the engine is not a local socket
    (`DOCKER_HOST=tcp://`, `ssh://`, which ls does not reach)."""
    host = os.environ.get("DOCKER_HOST") or f"unix://{DEFAULT_SOCKET}"
    if not host.startswith("unix://"):
        return None
    filters = urllib.parse.quote(json.dumps({"label": ["cairn.managed=1"]}))
    connection = _UnixConnection(host[len("unix://"):])
    try:
        connection.request("GET", f"/containers/json?all=1&filters={filters}")
        response = connection.getresponse()
        if response.status != 200:
            return None
        containers = json.loads(response.read())
    except (OSError, ValueError, http.client.HTTPException):
        return None
    finally:
        connection.close()
    states = {}
    for container in containers:
        labels = container.get("Labels") or {}
        if labels.get("cairn.run"):
            state = "running" if container.get("State") == "running" else "stopped"
            states[(labels["cairn.run"], labels.get("cairn.run_dir"))] = state
    return states


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=ENGINE_TIMEOUT)
        self.socket_path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(ENGINE_TIMEOUT)
        self.sock.connect(self.socket_path)


def render_runs(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "no runs yet (start one with: cairn run \"TASK\")"
    head = (f"{'ID':<23} {'STATUS':<11} {'STEPS':>5} {'TOKENS':>9} {'CACHE':>5} {'COST':>9} {'STARTED':<16} "
            f"{'TIME':>7} {'CONTAINER':<9}  TASK")
    lines = [head]
    for r in rows:
        cost = f"${r['cost_usd']:.4f}" if r["cost_usd"] is not None else "unknown"
        started = time.strftime("%Y-%m-%d %H:%M", time.localtime(r["started"])) if r["started"] else "?"
        duration = f"{r['duration_s']:.0f}s" if r["duration_s"] is not None else "?"
        task = " ".join(r["task"].split())
        lines.append(f"{r['id']:<23} {r['status']:<11} {r['steps']:>5} {r['tokens']:>9,} {r['cache_hit_ratio']:>5.0%} "
                     f"{cost:>9} {started:<16} {duration:>7} {r.get('container') or '-':<9}  {task[:60]}")
    return "\n".join(lines)
