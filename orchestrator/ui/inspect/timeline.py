"""A run's timeline from its event log: what `cairn show` and `cairn ls` print, and what the report reads.

Reads only the state directory; imports no model library, so it is fast.
"""

from __future__ import annotations

import json
from typing import Any

from orchestrator.agent.approvals import answer_line
from orchestrator.context.offload import CAIRN_DIR
from orchestrator.ui.display import call_line
from orchestrator import events as ev
from orchestrator.ui.approval_prompt import waiting_block
from orchestrator.store.children import ChildRun, open_child
from orchestrator.agent.state import check_verdict
from orchestrator.store.run_dir import RunDir
from orchestrator.ui.terminal import clean
from orchestrator.tools.sessions.readable import call_summary
from orchestrator.status import Status
from orchestrator.view.read import read_view


def _preview(text: str | None, width: int = 200) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _arguments(raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def walk(run: RunDir) -> dict[str, Any]:
    """One pass over the event log, keeping everything its views need whole: each step's text, the
    messages it got, its notices, its calls (raw arguments, whole results), the usage of its own last
    model request and the sum of all its requests (a sub-agent's included); the run's totals, its
    compactions, its checks (--check), and how it ended. `timeline` (show, ls) and the report page are views of this."""
    meta = run.read_meta()
    events, torn = run.events.read()
    steps: dict[int, dict[str, Any]] = {}
    calls: dict[str, dict[str, Any]] = {}
    shown: set[int] = set()  # the steps `cairn show` lists (not those that only got a message)
    usage = {"prompt_tokens": 0, "cached_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0}
    critic = {"requests": 0, "prompt_tokens": 0, "cached_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0}
    critic_cost_known, critic_notes = True, []
    cost_known = True
    status, result, task, compactions = meta.get("status", "running"), meta.get("result"), meta.get("task", ""), []
    checks: list[dict[str, Any]] = []
    end: dict[str, Any] | None = None  # the StatusChanged that ended the run, and where it is in the log
    approvals: dict[str, dict[str, Any]] = {}  # call id -> its question and answer, until the call starts

    def step_of(n: int, show: bool = True) -> dict[str, Any]:
        if show:
            shown.add(n)
        return steps.setdefault(n, new_step(n))

    for index, e in enumerate(events):
        if isinstance(e, ev.RunStarted):
            task = e.task
        elif isinstance(e, ev.ModelRequest):
            own = getattr(e, "child", None) is None  # a sub-agent's summed usage is not this step's request
            step = step_of(e.step, show=own)
            if own:
                step["usage"] = e.usage
            spent = step["spent"]
            spent["requests"] += 1
            for key in ("prompt_tokens", "cached_tokens", "completion_tokens"):
                usage[key] += e.usage.get(key, 0)
                spent[key] += e.usage.get(key, 0) or 0
            if e.usage.get("cost_usd") is None:
                cost_known = False
            else:
                usage["cost_usd"] += e.usage["cost_usd"]
                spent["cost_usd"] = (spent["cost_usd"] or 0.0) + e.usage["cost_usd"]
        elif isinstance(e, ev.CriticNote):  # in the run's totals (its budget), and apart
            critic_notes.append({"step": e.step, "model": e.model, "path": e.path, "text": e.text})
            critic["requests"] += 1
            for key in ("prompt_tokens", "cached_tokens", "completion_tokens"):
                usage[key] += e.usage.get(key, 0)
                critic[key] += e.usage.get(key, 0)
            if e.usage.get("cost_usd") is None:
                cost_known = critic_cost_known = False
            else:
                usage["cost_usd"] += e.usage["cost_usd"]
                critic["cost_usd"] += e.usage["cost_usd"]
        elif isinstance(e, ev.AssistantMessage):
            step_of(e.step)["text"] = e.message.get("content")
        elif isinstance(e, ev.UserMessage):
            step_of(e.step, show=False)["messages"].append({"source": e.source, "text": e.text})
        elif isinstance(e, ev.ToolStarted):
            call = {"id": e.call_id, "name": e.name, "raw": e.arguments, "output": None, "error": False,
                    "offloaded_to": None, "finished": False, "duration_ms": None, "child": None}
            if e.call_id in approvals:
                call["approval"] = approvals.pop(e.call_id)
            calls[e.call_id] = call
            step_of(e.step)["calls"].append(call)
        elif isinstance(e, ev.ApprovalAsked):
            approvals[e.call_id] = {"asked": e.why, "name": e.name, "arguments": e.arguments, "step": e.step}
        elif isinstance(e, ev.ApprovalAnswered):
            approvals.setdefault(e.call_id, {})["answer"] = answer_line(e)
        elif isinstance(e, ev.ToolFinished) and e.call_id in calls:
            calls[e.call_id].update(output=e.output or e.content, error=e.error, offloaded_to=e.offloaded_to,
                                    finished=True, duration_ms=e.duration_ms, child=getattr(e, "child", None))
        elif isinstance(e, ev.Compaction):
            if e.usage:  # a summary's request counts in the run's totals, as in run.json (store/replay.py)
                for key in ("prompt_tokens", "cached_tokens", "completion_tokens"):
                    usage[key] += e.usage.get(key, 0) or 0
                if e.usage.get("cost_usd") is None:
                    cost_known = False
                else:
                    usage["cost_usd"] += e.usage["cost_usd"]
            compactions.append({"step": e.step, "kind": e.kind, "tokens_before": e.tokens_before,
                                "tokens_after": e.tokens_after, "summary_path": e.summary_path})
        elif isinstance(e, ev.Notice):
            step_of(e.step)["notices"].append(e.text)
        elif isinstance(e, ev.CheckFinished):
            checks.append({**check_verdict(e), "step": e.step, "timed_out": e.timed_out, "error": e.error,
                           "sent_back": e.sent_back, "duration_ms": e.duration_ms, "output": e.output})
        elif isinstance(e, ev.StatusChanged):
            # A drive's start puts what the last one ended with behind it: an answered question is no result.
            status, result = e.status, e.result if e.status != Status.RUNNING else None
            end = {"index": index, "type": e.type, "step": e.step, "reason": e.reason}

    usage["cost_usd"] = round(usage["cost_usd"], 6) if cost_known else None
    usage["cache_hit_ratio"] = round(usage["cached_tokens"] / usage["prompt_tokens"], 4) if usage["prompt_tokens"] else 0.0
    critic["cost_usd"] = round(critic["cost_usd"], 6) if critic_cost_known else None
    usage["critic"] = critic  # already counted in the totals above; this says how much of them
    return {"meta": meta, "events": events, "torn": torn, "task": task, "status": status, "result": result,
            "steps": steps, "shown": shown, "usage": usage, "compactions": compactions, "checks": checks,
            "critic_notes": critic_notes, "approval_waiting": _waiting(approvals, status),
            "error": end_error(status, result, end)}


def _waiting(approvals: dict[str, dict[str, Any]], status: str) -> dict[str, Any] | None:
    """The question a waiting run stopped for, answered (by `cairn approve`, not yet resumed) or not."""
    if status != Status.WAITING:
        return None
    for call_id, approval in approvals.items():
        if "asked" in approval:
            return {"call_id": call_id, "name": approval["name"], "arguments": _arguments(approval["arguments"]),
                    "why": approval["asked"], "answer": approval.get("answer"), "step": approval.get("step")}
    return None


def end_error(status: str, result: str | None, end: dict[str, Any] | None) -> dict[str, Any] | None:
    """Why a run that did not finish ended: `{"reason": one line, "event": where the log says so}`;
    None for a run that is done or still running. Shared by show, ls, the report and the batch summary."""
    if status in (Status.DONE, Status.RUNNING):
        return None
    said = (end or {}).get("reason") or ""
    if status == Status.WAITING and said.startswith("approval"):
        said = f"waits for {said}"
    elif status == Status.WAITING:
        said = f"the agent asks: {result}" if result else "the agent waits for an answer"
    whole = status == Status.WAITING and said.startswith("waits for approval")  # a person decides from it
    reason = one_line(said, len(said) if whole else 300) or f"the run ended as {status} without a recorded reason"
    event = {k: end[k] for k in ("index", "type", "step")} if end else None
    return {"reason": reason, "event": event}


def one_line(text: str | None, width: int = 300) -> str:
    """A reason as one line: a multi-line error message keeps its words, not its layout."""
    return _preview(text, width)


def new_step(n: int) -> dict[str, Any]:
    """A step of `walk`, before any of its events."""
    spent = {"prompt_tokens": 0, "cached_tokens": 0, "completion_tokens": 0, "cost_usd": None, "requests": 0}
    return {"index": n, "text": None, "messages": [], "notices": [], "calls": [], "usage": None, "spent": spent}


def timeline(run: RunDir, walked: dict[str, Any] | None = None) -> dict[str, Any]:
    """The document of `cairn show RUN --json` (docs/contracts.md), from `walk(run)` (done here if not given)
    and the run's view (orchestrator/view/), which says what the run is doing now, as every face does."""
    w = walked or walk(run)
    meta = w["meta"]
    now = _now(run, w)
    return {
        "id": run.id,
        "status": now["status"],
        "task": w["task"],
        "model": meta.get("config", {}).get("model", {}).get("model"),
        "result": now["result"],
        "error": now["error"],
        "forked_from": now["forked_from"],
        "waiting": now["waiting"],
        "running": now["running"],
        "created": meta.get("created"),
        "updated": meta.get("updated"),
        "steps": [{"index": n, "text": step["text"], "tool_calls": [_shown_call(run, c) for c in step["calls"]],
                   "usage": step["usage"], "notices": step["notices"]}
                  for n, step in sorted(w["steps"].items()) if n > 0 and n in w["shown"]],
        # Messages from outside, where they reached the run: a `cairn say` message reaches the step after
        # it was sent, which a run that then failed may never have shown.
        "messages": [{"step": n, **m} for n, step in sorted(w["steps"].items()) for m in step["messages"]],
        "compactions": w["compactions"],
        "critic_notes": w["critic_notes"],
        "approval_waiting": w["approval_waiting"] if now["status"] == Status.WAITING else None,
        "usage": w["usage"],
        "check": _check(meta, w["checks"]),
        "checks": [{**{key: c[key] for key in ("round", "step", "command", "passed", "exit_code", "output_path",
                                                "timed_out", "sent_back")}, "output_tail": output_tail(c["output"])}
                   for c in w["checks"]],
        "torn_last_line": w["torn"],
    }


def _now(run: RunDir, w: dict[str, Any]) -> dict[str, Any]:
    """What the run is doing now: its view (orchestrator/view/), as every face says it. A sub-agent's run
    (and an in-memory one) has no lock of its own: what its log says is all there is."""
    if not isinstance(run, RunDir) or isinstance(run, ChildRun):
        return {"status": w["status"], "result": w["result"], "error": w["error"], "forked_from": None,
                "waiting": None, "running": None}
    view = read_view(run)
    end = w["error"]["event"] if w["error"] and view.status == w["status"] else None
    return {"status": view.status, "result": view.result,
            "error": {"reason": view.reason, "event": end} if view.reason else None,
            "forked_from": view.forked_from, "waiting": view.waiting, "running": view.running}


def _check(meta: dict[str, Any], checks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The run's check as docs/contracts.md has it: the last one's verdict; for a run with a check that has not
    run yet (no task_done so far), its command with `passed` null; None for a run without a check."""
    if checks:
        last = checks[-1]
        return {key: last[key] for key in ("command", "passed", "exit_code", "output_path")}
    command = ((meta.get("config") or {}).get("check") or {}).get("command")
    return {"command": command, "passed": None, "exit_code": None, "output_path": None} if command else None


def critic_line(critic: dict[str, Any]) -> str:
    """The critic's share of a run's usage (`usage.critic`), as show and the report print it."""
    cost = f", ${critic['cost_usd']:.4f}" if critic["cost_usd"] is not None else ", cost unknown"
    return (f"critic: {critic['requests']} review(s), {critic['prompt_tokens']:,} prompt + "
            f"{critic['completion_tokens']:,} completion tokens{cost} (in the totals)")


def check_line(check: dict[str, Any], run: RunDir | None = None) -> str:
    """One line on a check, for show, the end of a run and the report: its verdict, code and output file
    (named where a person on this machine opens it when `run` is given, else as the sandbox names it)."""
    if check.get("passed") is None:
        return f"check: not run yet · {check['command']}"
    verdict = "passed" if check["passed"] else "failed"
    code = "could not run" if check.get("exit_code") is None else f"exit code {check['exit_code']}"
    path = check.get("output_path")
    saved = f" · output in {host_path(run, path) if run is not None else path}" if path else ""
    return f"check {verdict} ({code}) · {check['command']}{saved}"


CHECK_TAIL_LINES = 12


def output_tail(output: str | None, lines: int = CHECK_TAIL_LINES) -> str:
    """The last lines of a check's output as the agent was shown it (where it failed), without cairn's
    closing notes (`[exit code 1, 0.4 s]`), cleaned of control sequences."""
    rows = clean(output or "").rstrip().splitlines()
    while rows and rows[-1].startswith("[") and rows[-1].rstrip().endswith("]"):
        rows.pop()
    while rows and not rows[-1].strip():
        rows.pop()
    return "\n".join(rows[-lines:])


def failed_check_lines(doc: dict[str, Any], run: RunDir | None, indent: str = "") -> list[str]:
    """The run's last check in one line, and when it failed, the tail of its output under it: what
    `cairn show` and the end of a run print."""
    check = doc["check"]
    if check is None:
        return []
    lines = [indent + check_line(check, run)]
    last = doc["checks"][-1] if doc.get("checks") else None
    if check.get("passed") is False and last and last.get("output_tail"):
        lines.append(f"{indent}  the end of its output:")
        lines += [f"{indent}  │ {line}" for line in last["output_tail"].splitlines()]
    return lines


def host_path(run: RunDir, path: str) -> str:
    """Where a file the sandbox names `path` (one of cairn's, under /cairn, or the workspace's) is on the host."""
    if path == CAIRN_DIR or path.startswith(CAIRN_DIR + "/"):
        return str(run.cairn_dir / path[len(CAIRN_DIR):].lstrip("/"))
    return str(run.workspace / path) if not path.startswith("/") else path


def _shown_call(run: RunDir, c: dict[str, Any]) -> dict[str, Any]:
    call = {"id": c["id"], "name": c["name"], "arguments": _arguments(c["raw"]),
            "result": _preview(c["output"]) if c["finished"] else None, "error": c["error"],
            "offloaded_to": c["offloaded_to"], "finished": c["finished"]}
    if c.get("approval"):  # asked, or answered by a rule or an earlier "always" (orchestrator/agent/approvals.py)
        call["approval"] = {key: c["approval"][key] for key in ("asked", "answer") if key in c["approval"]}
    if c["finished"]:
        call["duration_ms"] = c["duration_ms"]
    if c["name"] == "agent_delegate":  # its sub-agent's steps, nested (orchestrator/agent/delegate.py)
        child = _child(run, c["id"], c["child"])
        if child is not None or c["child"] is not None:
            call["child"] = child
    return call


def _child(run: RunDir, call_id: str, info: dict[str, Any] | None) -> dict[str, Any] | None:
    """The sub-agent run of an agent_delegate call (orchestrator/store/children.py), as a nested timeline."""
    child = open_child(run, call_id, info if isinstance(info, dict) else None)
    if child is None:
        return None
    doc = timeline(child)
    return {"id": child.id, "path": child.path, "status": doc["status"], "task": doc["task"],
            "result": doc["result"], "steps": doc["steps"], "usage": doc["usage"],
            "paths": (info or {}).get("paths") if isinstance(info, dict) else None}


ARRIVING = ("say", "inbox")  # messages taken at the start of a step, before its model request


def step_lines(doc: dict[str, Any], indent: str = "") -> list[str]:
    """One line a tool call: step, tool, arguments in short, result in short, error and offload marks;
    one line a message from outside (`cairn say`, a resume's answer) where it reached the run.
    A sub-agent's steps follow its agent_delegate call, indented. Safe to print on a terminal: the
    run's text is cleaned of control sequences before it is cut short (orchestrator/ui/terminal.py)."""
    lines: list[str] = []
    steps = {step["index"]: step for step in doc["steps"]}
    messages: dict[int, list[dict[str, Any]]] = {}
    for m in doc.get("messages") or []:
        messages.setdefault(m["step"], []).append(m)
    for n in sorted(set(steps) | set(messages)):
        lines += [_message_line(n, m, indent) for m in messages.get(n, []) if m["source"] in ARRIVING]
        step = steps.get(n)
        if step is not None:
            lines += _call_lines(step, indent)
        lines += [_message_line(n, m, indent) for m in messages.get(n, []) if m["source"] not in ARRIVING]
    return lines


def _call_lines(step: dict[str, Any], indent: str) -> list[str]:
    lines = []
    tokens = (step["usage"] or {}).get("prompt_tokens", 0)
    if step["text"] and not step["tool_calls"]:
        lines.append(f"{indent}{step['index']:>4}  {'(text)':<12} {_preview(clean(step['text']), 90)}")
    for call in step["tool_calls"]:
        mark = "✗" if call["error"] else ("…" if not call["finished"] else " ")
        args = call["arguments"] if isinstance(call["arguments"], str) else json.dumps(call["arguments"])
        what = call_line(call["name"], args, width=60).splitlines()[0]  # `$ command`, `write path (n lines)`, ...
        lines.append(f"{indent}{step['index']:>4} {mark}{_preview(clean(what), 62):<62} "
                     f"→ {_preview(clean(call['result']), 60)}  [{tokens:,} tok]")
        if call["offloaded_to"]:  # on a line of its own: a row stays within 160 columns
            lines.append(f"{indent}       ⇢ saved in {clean(call['offloaded_to'])}")
        if call.get("approval"):
            lines.append(f"{indent}       {approval_line(call['approval'])}")
        child = call.get("child")
        if child:
            inner = indent + "     ┆ "
            lines.append(f"{inner}sub-agent {child['id']} [{child['status']}]: {_preview(clean(child['task']), 70)}")
            lines += step_lines(child, inner)
    return lines


def approval_line(approval: dict[str, Any]) -> str:
    """A call's approval on one line: why it was asked (when it was) and the answer."""
    asked = f"? asked: {_preview(clean(approval['asked']), 90)} · " if approval.get("asked") else ""
    return asked + clean(approval.get("answer") or "not answered")


def _message_line(step: int, message: dict[str, Any], indent: str) -> str:
    return f"{indent}{step:>4} ✉{message['source']:<12} {_preview(clean(message['text']), 100)}"


def step_text(walked: dict[str, Any], n: int) -> str:
    """`cairn show RUN --step N` as text: the step whole, its messages, its text, and each call with
    its arguments and its whole result (as the run recorded it)."""
    step = walked["steps"][n]
    spent = step["spent"]
    out = [f"step {n}: {spent['requests']} model request(s), {spent['prompt_tokens']:,} prompt tokens "
           f"({spent['cached_tokens']:,} cached), {spent['completion_tokens']:,} completion"]
    for m in step["messages"]:
        out += ["", f"✉ message ({m['source']}):", _indented(m["text"])]
    if step["text"]:
        out += ["", "the model said:", _indented(step["text"])]
    for c in step["calls"]:
        state = "error" if c["error"] else ("done" if c["finished"] else "not finished")
        took = f", {c['duration_ms'] / 1000:.1f} s" if c["duration_ms"] is not None else ""
        args = _arguments(c["raw"])
        shown = args if isinstance(args, str) else json.dumps(args, indent=2, ensure_ascii=False)
        out += ["", f"── {c['name']} ({state}{took})", "arguments:", _indented(shown)]
        summary = call_summary(c["name"], args)  # a session call: the keys as typed
        if summary:
            out += ["in short:", _indented(summary)]
        if c.get("approval"):
            out += [approval_line(c["approval"])]
        if c["finished"]:
            out += ["result:" + (f" (saved whole to {c['offloaded_to']})" if c["offloaded_to"] else ""),
                    _indented(c["output"] or "")]
    waiting = walked.get("approval_waiting")
    if waiting and waiting.get("step") == n and not waiting.get("answer"):  # asked, so never started: not in calls
        out += ["", f"── {waiting['name']} (waiting for approval)", waiting_block(waiting["name"], waiting["arguments"],
                                                                             waiting["why"], indent="")]
    for text in step["notices"]:
        out += ["", f"! {text}"]
    return "\n".join(out)


def _indented(text: str) -> str:
    return "\n".join("    " + line for line in (text.rstrip("\n") or "(empty)").splitlines())
