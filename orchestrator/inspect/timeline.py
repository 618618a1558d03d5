"""A run's timeline from its event log: what `cairn show` and `cairn ls` print.

Reads only the state directory; imports no model library, so it is fast.
"""

from __future__ import annotations

import json
from typing import Any

from orchestrator.store import events as ev
from orchestrator.store.runs import RunDir


def _preview(text: str | None, width: int = 200) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _arguments(raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def timeline(run: RunDir) -> dict[str, Any]:
    """The document of `cairn show RUN --json` (CONTRACTS.md)."""
    meta = run.read_meta()
    events, torn = run.events.read()
    steps: dict[int, dict[str, Any]] = {}
    calls: dict[str, dict[str, Any]] = {}
    usage = {"prompt_tokens": 0, "cached_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0}
    cost_known = True
    status, result, task, compactions = meta.get("status", "running"), meta.get("result"), meta.get("task", ""), []

    def step_of(n: int) -> dict[str, Any]:
        return steps.setdefault(n, {"index": n, "text": None, "tool_calls": [], "usage": None, "notices": []})

    for e in events:
        if isinstance(e, ev.RunStarted):
            task = e.task
        elif isinstance(e, ev.ModelRequest):
            if getattr(e, "child", None) is None:  # a sub-agent's summed usage counts in the totals only
                step_of(e.step)["usage"] = e.usage
            for key in ("prompt_tokens", "cached_tokens", "completion_tokens"):
                usage[key] += e.usage.get(key, 0)
            if e.usage.get("cost_usd") is None:
                cost_known = False
            else:
                usage["cost_usd"] += e.usage["cost_usd"]
        elif isinstance(e, ev.AssistantMessage):
            step_of(e.step)["text"] = e.message.get("content")
        elif isinstance(e, ev.ToolStarted):
            call = {"id": e.call_id, "name": e.name, "arguments": _arguments(e.arguments), "result": None,
                    "error": False, "offloaded_to": None, "finished": False}
            calls[e.call_id] = call
            step_of(e.step)["tool_calls"].append(call)
        elif isinstance(e, ev.ToolFinished) and e.call_id in calls:
            calls[e.call_id].update(result=_preview(e.output or e.content), error=e.error,
                                    offloaded_to=e.offloaded_to, finished=True, duration_ms=e.duration_ms)
            if getattr(e, "child", None) is not None:
                calls[e.call_id]["child"] = e.child
        elif isinstance(e, ev.Compaction):
            compactions.append({"step": e.step, "kind": e.kind, "tokens_before": e.tokens_before,
                                "tokens_after": e.tokens_after, "summary_path": e.summary_path})
        elif isinstance(e, ev.Notice):
            step_of(e.step)["notices"].append(e.text)
        elif isinstance(e, ev.StatusChanged):
            status, result = e.status, e.result if e.result is not None else result

    for call in calls.values():
        if call["name"] == "agent_delegate":
            child = _child(run, call["id"], call.get("child"))
            if child is not None or "child" in call:
                call["child"] = child
    usage["cost_usd"] = round(usage["cost_usd"], 6) if cost_known else None
    usage["cache_hit_ratio"] = round(usage["cached_tokens"] / usage["prompt_tokens"], 4) if usage["prompt_tokens"] else 0.0
    return {
        "id": run.id,
        "status": status,
        "task": task,
        "model": meta.get("config", {}).get("model", {}).get("model"),
        "result": result,
        "created": meta.get("created"),
        "updated": meta.get("updated"),
        "steps": [steps[n] for n in sorted(steps) if n > 0],
        "compactions": compactions,
        "usage": usage,
        "torn_last_line": torn,
    }


def _child(run: RunDir, call_id: str, info: dict[str, Any] | None) -> dict[str, Any] | None:
    """The sub-agent run of an agent_delegate call (orchestrator/delegate.py), as a nested timeline."""
    from orchestrator.delegate import open_child

    child = open_child(run, call_id, info if isinstance(info, dict) else None)
    if child is None:
        return None
    doc = timeline(child)
    return {"id": child.id, "path": child.path, "status": doc["status"], "task": doc["task"],
            "result": doc["result"], "steps": doc["steps"], "usage": doc["usage"],
            "paths": (info or {}).get("paths") if isinstance(info, dict) else None}


def step_lines(doc: dict[str, Any], indent: str = "") -> list[str]:
    """One line a tool call: step, tool, arguments in short, result in short, error and offload marks.
    A sub-agent's steps follow its agent_delegate call, indented."""
    lines = []
    for step in doc["steps"]:
        tokens = (step["usage"] or {}).get("prompt_tokens", 0)
        if step["text"] and not step["tool_calls"]:
            lines.append(f"{indent}{step['index']:>4}  {'(text)':<12} {_preview(step['text'], 90)}")
        for call in step["tool_calls"]:
            mark = "✗" if call["error"] else ("…" if not call["finished"] else " ")
            args = call["arguments"] if isinstance(call["arguments"], str) else json.dumps(call["arguments"])
            saved = f"  ⇢ {call['offloaded_to']}" if call["offloaded_to"] else ""
            lines.append(f"{indent}{step['index']:>4} {mark}{call['name']:<12} {_preview(args, 50):<50} "
                         f"→ {_preview(call['result'], 50)}{saved}  [{tokens:,} tok]")
            child = call.get("child")
            if child:
                inner = indent + "     ┆ "
                lines.append(f"{inner}sub-agent {child['id']} [{child['status']}]: {_preview(child['task'], 70)}")
                lines += step_lines(child, inner)
    return lines
