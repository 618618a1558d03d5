"""A run as one ATIF trajectory: the Agent Trajectory Interchange Format of Harbor (the harness of
Terminal-Bench), RFC 0001 in Harbor's repository. `cairn show RUN --atif` prints it; the Harbor agent
writes it as the trial's `trajectory.json`.

Read from the run's event log alone (and its children's), so the same log always gives the same document:

- the system prompt is the first step (`system`), the task the second (`user`); every message from a
  person after it (an answer, `cairn say`) is a `user` step, and a failed check sent back to the agent a
  `system` one, where it reached the run;
- each model request of the agent is one `agent` step: the answer's text, its reasoning where the provider
  gave it, its tool calls, their results as the observation (what entered the context: a big output's
  preview and the path of the file holding it whole, `extra.offloaded_to`), and the request's usage as
  the step's metrics (prompt tokens including cached ones, cached, completion, cost);
- a compaction is a `system` step marked as ATIF marks context management, `extra.context_management`
  with `type` "compaction" and `boundary` "replace": its observation is the whole context as it stood
  after the compaction (system prompt, task, history), so the context of any later request is that
  observation and the steps after it;
- a sub-agent (`agent_delegate`) is a trajectory of its own in `subagent_trajectories`, referenced by
  its call's result;
- `final_metrics` are the run's totals as `cairn show --json` gives them: besides the steps' requests,
  they count the sub-agents', the critic's and the summaries' (`extra` says how much of each).
"""

from __future__ import annotations

from datetime import datetime, timezone
import json
from typing import Any

from orchestrator.version import __version__
from orchestrator.context import TokenCounter
from orchestrator import events as ev
from orchestrator.store.children import ChildRun, open_child
from orchestrator.agent.state import RunState
from orchestrator.store.run_dir import RunDir
from orchestrator.store.trust import safe_config

SCHEMA_VERSION = "ATIF-v1.7"  # the version whose fields this export uses (subagents, extra, llm_call_count)
AGENT_NAME = "cairn"
USAGE_KEYS = ("prompt_tokens", "cached_tokens", "completion_tokens")
PERSON = ("user", "answer", "say", "inbox")  # the sources of a UserMessage that are a person's words


def trajectory(run: RunDir) -> dict[str, Any]:
    """The run as one ATIF document, a JSON-ready dict (`None` fields left out, as Harbor writes them)."""
    return _Export(run).document()


def iso(ts: float) -> str:
    """An event's time as ISO 8601 in UTC, to the microsecond: the same event, the same string."""
    return datetime.fromtimestamp(ts, timezone.utc).isoformat()


def _arguments(raw: str) -> tuple[dict[str, Any], str | None]:
    """A call's arguments as ATIF wants them (an object), and the raw text when it was not one."""
    try:
        parsed = json.loads(raw)
    except (json.JSONDecodeError, TypeError):
        return {}, raw
    return (parsed, None) if isinstance(parsed, dict) else ({}, raw)


def _tally() -> dict[str, Any]:
    return {"requests": 0, "prompt_tokens": 0, "cached_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0}


def _add(tally: dict[str, Any], usage: dict[str, Any], requests: int = 1) -> None:
    """Adds one request's usage (or a sub-agent's sum of `requests`) to a tally; its cost stays None once
    one request's price was unknown."""
    tally["requests"] += requests
    for key in USAGE_KEYS:
        tally[key] += usage.get(key, 0) or 0
    if tally["cost_usd"] is not None:
        cost = usage.get("cost_usd")
        tally["cost_usd"] = None if cost is None else tally["cost_usd"] + cost


def _metrics(usage: dict[str, Any], e: ev.ModelRequest) -> dict[str, Any]:
    extra = {key: usage[key] for key in ("cache_write_tokens", "latency_s") if usage.get(key)}
    if e.estimated_prompt_tokens:
        extra["estimated_prompt_tokens"] = e.estimated_prompt_tokens
    if e.messages:
        extra["messages"] = e.messages
    return _drop_none({"prompt_tokens": usage.get("prompt_tokens", 0) or 0,
                       "cached_tokens": usage.get("cached_tokens", 0) or 0,
                       "completion_tokens": usage.get("completion_tokens", 0) or 0,
                       "cost_usd": usage.get("cost_usd"), "extra": extra or None})


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


class _Export:
    """One pass over the log. A RunState replays it beside, so that a compaction's step can hold the
    context exactly as the loop had it afterwards (the same `apply` the loop and a resume use)."""

    def __init__(self, run: RunDir) -> None:
        self.run = run
        self.meta = run.read_meta()
        self.events, self.torn = run.events.read()
        cfg = safe_config(self.meta, run.id)
        self.model = cfg.model.model
        # Only a compaction's step needs the context replayed (its messages are counted: tokenizing costs)
        compacted = any(isinstance(e, ev.Compaction) for e in self.events)
        self.replay = RunState(cfg.context, TokenCounter()) if compacted else None
        self.steps: list[dict[str, Any]] = []
        self.calls: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}  # call id -> (its step, its call)
        self.approvals: dict[str, dict[str, Any]] = {}  # call id -> question and answer, until the call starts
        self.subagents: list[dict[str, Any]] = []
        self.tools: list[dict[str, Any]] = []
        self.own, self.delegated, self.critic, self.summaries = _tally(), _tally(), _tally(), _tally()
        self.total = _tally()  # all of them in the log's order: the sum `cairn show --json` makes, to the last bit
        self.status, self.result = self.meta.get("status", "running"), self.meta.get("result")
        self.index = 0
        self.task = self.meta.get("task", "")
        self.pending: dict[str, Any] | None = None  # the step of the last model request, until its answer
        self.last_agent: dict[str, Any] | None = None  # the last agent step, for the notices of its loop step
        self.raw: dict[str, str] = {}  # call id -> its arguments as the model wrote them
        self.end: dict[str, Any] | None = None  # the StatusChanged that ended the run, and where it is in the log

    def document(self) -> dict[str, Any]:
        for self.index, e in enumerate(self.events):
            if self.replay is not None:
                self.replay.apply(e)  # first: a compaction's step shows the context as it is after it
            handler = getattr(self, "_on_" + e.type, None)
            if handler is not None:
                handler(e)
        if not self.steps:  # a run that crashed before its first event still had a task
            self._step("user", self.task, self.meta.get("created"))
        top = self.run.top_run
        doc = {
            "schema_version": SCHEMA_VERSION,
            "session_id": top.id,
            "trajectory_id": self.run.path if isinstance(self.run, ChildRun) else self.run.id,
            "agent": _drop_none({"name": AGENT_NAME, "version": __version__, "model_name": self.model,
                                 "tool_definitions": self.tools or None}),
            "steps": self.steps,
            "notes": ("final_metrics are the run's totals: besides the requests of its agent steps they count "
                      "its sub-agents' (in subagent_trajectories), its critic's and its summaries' requests; "
                      "final_metrics.extra gives each share."),
            "final_metrics": self._final_metrics(),
            "extra": {"cairn": self._outcome()},
            "subagent_trajectories": self.subagents or None,
        }
        return _drop_none(doc)

    # -- steps ----------------------------------------------------------------------------------

    def _step(self, source: str, message: str, ts: float | None, **fields: Any) -> dict[str, Any]:
        step = {"step_id": len(self.steps) + 1, "timestamp": iso(ts) if ts is not None else None,
                "source": source, "message": message, **fields}
        step = _drop_none(step)
        self.steps.append(step)
        return step

    def _on_run_started(self, e: ev.RunStarted) -> None:
        self.task, self.tools = e.task, e.tools
        self._step("system", e.system_prompt, e.ts)
        self._step("user", e.task, e.ts, extra={"cairn": {"source": "task"}})

    def _on_user_message(self, e: ev.UserMessage) -> None:
        source = "user" if e.source in PERSON else "system"
        self._step(source, e.text, e.ts, extra={"cairn": {"source": e.source, "step": e.step}})

    def _on_model_request(self, e: ev.ModelRequest) -> None:
        if getattr(e, "child", None) is not None:  # a sub-agent's summed usage: its trajectory has the steps
            self._spend(self.delegated, e.usage, int(e.usage.get("requests", 1) or 1))
            return
        self._spend(self.own, e.usage)
        fields: dict[str, Any] = {"llm_call_count": 1, "metrics": _metrics(e.usage, e),
                                  "extra": {"cairn": {"step": e.step}}}
        if e.model != self.model:
            fields["model_name"] = e.model
        self.pending = self.last_agent = self._step("agent", "", e.ts, **fields)

    def _on_assistant_message(self, e: ev.AssistantMessage) -> None:
        step, self.pending = self.pending, None
        if step is None or step["extra"]["cairn"]["step"] != e.step:
            # an answer without its request in the log (an old cairn): a step of its own, without metrics
            step = self.last_agent = self._step("agent", "", e.ts, extra={"cairn": {"step": e.step}})
        step["message"] = e.message.get("content") or ""
        reasoning = e.message.get("reasoning_content") or getattr(e, "reasoning", None)
        if reasoning:
            step["reasoning_content"] = reasoning
        calls = []
        for c in e.message.get("tool_calls") or []:
            arguments, raw = _arguments(c["function"]["arguments"])
            call = {"tool_call_id": c["id"], "function_name": c["function"]["name"], "arguments": arguments}
            if raw is not None:
                call["extra"] = {"raw_arguments": raw}
            calls.append(call)
            self.calls[c["id"]], self.raw[c["id"]] = (step, call), c["function"]["arguments"]
        if calls:
            step["tool_calls"] = calls

    def _on_approval_asked(self, e: ev.ApprovalAsked) -> None:
        self.approvals.setdefault(e.call_id, {})["asked"] = e.why

    def _on_approval_answered(self, e: ev.ApprovalAnswered) -> None:
        from orchestrator.agent.approvals import answer_line

        self.approvals.setdefault(e.call_id, {})["answer"] = answer_line(e)

    def _on_tool_started(self, e: ev.ToolStarted) -> None:
        if e.call_id not in self.calls:
            return
        _, call = self.calls[e.call_id]
        extra = call.setdefault("extra", {})
        if e.call_id in self.approvals:
            extra["approval"] = self.approvals.pop(e.call_id)
        if e.arguments != self.raw[e.call_id]:
            extra["arguments_run"] = e.arguments  # a person edited them before approving the call
        if not extra:
            del call["extra"]

    def _on_tool_finished(self, e: ev.ToolFinished) -> None:
        if e.call_id not in self.calls:
            return
        step, _ = self.calls[e.call_id]
        extra = _drop_none({"error": e.error or None, "offloaded_to": e.offloaded_to, "duration_ms": e.duration_ms})
        result: dict[str, Any] = {"source_call_id": e.call_id, "content": e.content}
        if extra:
            result["extra"] = extra
        child = getattr(e, "child", None)
        if e.name == "agent_delegate":
            sub = self._subagent(e.call_id, child if isinstance(child, dict) else None)
            if sub is not None:
                ref = {"trajectory_id": sub["trajectory_id"], "session_id": sub["session_id"]}
                if isinstance(child, dict):
                    ref["extra"] = {key: child[key] for key in ("path", "status", "steps") if key in child}
                result["subagent_trajectory_ref"] = [ref]
        step.setdefault("observation", {"results": []})["results"].append(result)

    def _spend(self, share: dict[str, Any], usage: dict[str, Any], requests: int = 1) -> None:
        _add(share, usage, requests)
        _add(self.total, usage, requests)

    def _subagent(self, call_id: str, info: dict[str, Any] | None) -> dict[str, Any] | None:
        child = open_child(self.run, call_id, info)
        if child is None:
            return None
        sub = trajectory(child)
        self.subagents.append(sub)
        return sub

    def _on_compaction(self, e: ev.Compaction) -> None:
        if e.usage:
            self._spend(self.summaries, e.usage)
        replay = self.replay
        assert replay is not None  # made whenever the log holds a compaction
        context = [{"role": "system", "content": replay.system_prompt},
                   {"role": "user", "content": replay.task}, *replay.history.messages()]
        what = {"pointers": "old tool results and long arguments became pointers to the files holding them",
                "digest": "old turns were folded into a digest, a line a step, saved whole",
                "summary": "old turns were summarized by the model, saved whole"}.get(e.kind, e.kind)
        saved = f" ({e.summary_path})" if e.summary_path else ""
        management = _drop_none({"type": "compaction", "boundary": "replace", "tokens_before": e.tokens_before,
                                 "tokens_after": e.tokens_after, "strategy": e.kind})
        cairn = _drop_none({"step": e.step, "summary_path": e.summary_path, "replaced": len(e.replacements) or None,
                            "span": len(e.span) or None, "usage": e.usage or None})
        self._step("system", f"Context compacted before step {e.step}: {what}{saved}; "
                             f"{e.tokens_before:,} → {e.tokens_after:,} tokens.", e.ts,
                   observation={"results": [_context_result(m) for m in context]},
                   extra={"context_management": management, "cairn": cairn})

    def _on_critic_note(self, e: ev.CriticNote) -> None:
        self._spend(self.critic, e.usage)
        self._step("system", e.text, e.ts, extra={"cairn": _drop_none({"source": "critic", "step": e.step,
                                                                       "model": e.model, "path": e.path,
                                                                       "usage": e.usage})})

    def _on_check_finished(self, e: ev.CheckFinished) -> None:
        from orchestrator.ui.inspect.timeline import check_line
        from orchestrator.agent.state import check_verdict

        self._step("system", check_line(check_verdict(e)), e.ts,
                   extra={"cairn": _drop_none({"source": "check", "step": e.step, "round": e.round,
                                               "sent_back": e.sent_back, "timed_out": e.timed_out or None,
                                               "error": e.error})})

    def _on_notice(self, e: ev.Notice) -> None:
        if self.last_agent is not None and self.last_agent["extra"]["cairn"]["step"] == e.step:
            self.last_agent["extra"]["cairn"].setdefault("notices", []).append(e.text)

    def _on_status(self, e: ev.StatusChanged) -> None:
        self.status = e.status
        self.end = {"index": self.index, "type": e.type, "step": e.step, "reason": e.reason}
        if e.result is not None:
            self.result = e.result

    # -- the run as a whole ---------------------------------------------------------------------

    def _final_metrics(self) -> dict[str, Any]:
        parts = {"agent": self.own, "subagents": self.delegated, "critic": self.critic, "summaries": self.summaries}
        total = self.total
        cost = None if total["cost_usd"] is None else round(total["cost_usd"], 6)
        extra: dict[str, Any] = {name: {**p, "cost_usd": None if p["cost_usd"] is None else round(p["cost_usd"], 6)}
                                 for name, p in parts.items() if p["requests"] or name == "agent"}
        extra["cache_hit_ratio"] = round(total["cached_tokens"] / total["prompt_tokens"], 4) if total["prompt_tokens"] else 0.0
        return _drop_none({"total_prompt_tokens": total["prompt_tokens"],
                           "total_completion_tokens": total["completion_tokens"],
                           "total_cached_tokens": total["cached_tokens"], "total_cost_usd": cost,
                           "total_steps": len(self.steps), "extra": extra})

    def _outcome(self) -> dict[str, Any]:
        from orchestrator.ui.inspect.timeline import end_error

        error = end_error(self.status, self.result, self.end)
        out = {"run_id": self.run.id, "status": self.status, "result": self.result,
               "error": error["reason"] if error else None, "torn_last_line": self.torn}
        if isinstance(self.run, ChildRun):
            out["path"] = self.run.path
        return _drop_none(out)


def _context_result(message: dict[str, Any]) -> dict[str, Any]:
    """One message of the context after a compaction, as an observation result: its text as the content,
    its role (and its calls, or the call it answers) in `extra`. A tool result's call id stays in `extra`:
    ATIF's `source_call_id` names a call of the same step only."""
    content = message.get("content")
    if not isinstance(content, str):
        content = "" if content is None else json.dumps(content, ensure_ascii=False, sort_keys=True)
    extra = {key: value for key, value in message.items() if key != "content"}
    return {"content": content, "extra": extra}
