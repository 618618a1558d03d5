"""The state of a run, derived from its events.

The live loop and a resume go through the same `RunState.apply`, so a run rebuilt from its event log
has the same history, the same counters and so the same request bytes as the run that wrote it.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

from orchestrator.agent.approvals import Ledger
from orchestrator.config import ContextConfig
from orchestrator.context import History, Shaped, TokenCounter, shape_assistant_message
from orchestrator.context.framing import frame_result, framing
from orchestrator.context.person import PERSON_ANSWERS, PERSON_SOURCES
from orchestrator.agent.guards import Totals, signature
from orchestrator.llm.types import ToolCall
from orchestrator import events as ev
from orchestrator.store import inbox


class RunState:
    def __init__(self, ctx: ContextConfig, counter: TokenCounter) -> None:
        self.ctx = ctx
        self.count = counter.count_text
        self.task = ""
        self.system_prompt = ""
        self.tools: list[dict[str, Any]] = []
        self.history = History(counter)
        self.totals = Totals()
        self.step = 0
        self.status = "running"
        self.result: str | None = None
        self.open_calls: dict[str, ToolCall] = {}  # calls of the last answer that have no result yet
        self.started: set[str] = set()  # of those, the ones that began to run
        self.signatures: list[str] = []
        self.seed = 0  # the run's seed (RunStarted.seed)
        self.results = 0  # tool results recorded: the number of the next one, which picks its framing
        self.summaries = 0
        self.checks = 0  # checks run (--check), and the last one's verdict
        self.check: dict[str, Any] | None = None
        self.check_rounds = 0  # failed checks sent back to the agent since a person last spoke
        self.critic_note: ev.CriticNote | None = None  # the critic's last answer, until a request has shown it
        self.approvals = Ledger()  # the question a call waits on, its answer, the "always" answers
        self.denials: dict[str, str] = {}  # call id -> the reason a person gave for denying it, until its result
        self.question: Question | None = None  # the agent's last ask_user (agent/in_flight.py names it)
        self.inbox_offset = 0  # where the `cairn say` lines not yet delivered start in the inbox
        self.n_events = 0
        self.drives = 0  # `running` statuses seen: the drives of the run so far
        self.last_ts = 0.0  # of the last event applied: where a drive cut off by a crash ended

    def apply(self, event: ev.Event) -> None:
        self.n_events += 1
        self.approvals.apply(event)
        handler = getattr(self, "_on_" + event.type, None)
        if handler is not None:
            handler(event)
        self.last_ts = event.ts

    def _id(self) -> str:
        return f"e{self.n_events}"

    def meta(self) -> dict[str, Any]:
        """What run.json says of the run once it ends: status, steps, result, check and usage."""
        t = self.totals
        return {"status": self.status, "steps": self.step, "result": self.result, "check": self.check,
                "usage": {"prompt_tokens": t.prompt_tokens, "cached_tokens": t.cached_tokens,
                          "completion_tokens": t.completion_tokens,
                          "cost_usd": t.cost_usd if t.cost_known else None,
                          "cache_hit_ratio": round(t.cache_hit_ratio, 4)}}

    def _on_run_started(self, e: ev.RunStarted) -> None:
        self.task, self.system_prompt, self.tools = e.task, e.system_prompt, e.tools
        self.totals.started = e.ts
        # How results are framed (context/framing.py); a run made before the seed was recorded gets one from
        # its first event's time, the same at every resume.
        self.seed = e.seed if e.seed is not None else zlib.crc32(repr(e.ts).encode())

    def _on_user_message(self, e: ev.UserMessage) -> None:
        self.inbox_offset = max(self.inbox_offset, inbox.delivered_offset((e,)))  # `cairn say` lines taken
        # The person's words are never compacted away (context/person.py); a check's feedback is not theirs.
        said = e.text if e.source in PERSON_SOURCES else None
        if said is not None and self.question is not None and self.question.answered is None:
            self.question.answered = e.step
        self.history.append(self._id(), {"role": "user", "content": e.text}, e.step, kind="user", said=said)
        if e.source != "check":  # a person's word gives the check its rounds again
            self.check_rounds = 0

    def _on_model_request(self, e: ev.ModelRequest) -> None:
        self._spend(e.usage)
        if getattr(e, "child", None) is None:  # the agent's own request carried the pending critic note
            self.critic_note = None

    def _on_critic_note(self, e: ev.CriticNote) -> None:
        self._spend(e.usage)  # the critic's tokens count toward the budget like the agent's
        self.critic_note = e

    def _spend(self, u: dict[str, Any]) -> None:
        t = self.totals
        t.prompt_tokens += u.get("prompt_tokens", 0)
        t.cached_tokens += u.get("cached_tokens", 0)
        t.completion_tokens += u.get("completion_tokens", 0)
        if u.get("cost_usd") is None:
            t.cost_known = False
        else:
            t.cost_usd += u["cost_usd"]

    def _on_assistant_message(self, e: ev.AssistantMessage) -> None:
        self.step = e.step
        self.open_calls = {
            c["id"]: ToolCall(id=c["id"], name=c["function"]["name"], arguments=c["function"]["arguments"])
            for c in e.message.get("tool_calls") or []
        }
        # A long file the agent wrote stays in history as its path and size, not its text.
        message = shape_assistant_message(e.message, self.ctx.offload_tokens, self.count)
        self.history.append(self._id(), message, e.step, kind="assistant")

    def _on_tool_started(self, e: ev.ToolStarted) -> None:
        self.started.add(e.call_id)

    def _on_tool_finished(self, e: ev.ToolFinished) -> None:
        self.results += 1
        call = self.open_calls.pop(e.call_id, None)
        self.started.discard(e.call_id)
        self.history.append(
            self._id(),
            {"role": "tool", "tool_call_id": e.call_id, "content": e.content},
            e.step,
            kind="tool",
            tool=e.name,
            call_id=e.call_id,
            error=e.error,
            offloaded_to=e.offloaded_to,
            said=self.denials.pop(e.call_id, None),
        )
        arguments = call.arguments if call else ""
        self.signatures.append(signature(e.name, arguments, e.output or e.content))

    def _on_approval_answered(self, e: ev.ApprovalAnswered) -> None:
        if not e.approved and e.by in PERSON_ANSWERS and e.reason:
            self.denials[e.call_id] = e.reason

    def framed(self, shaped: Shaped, footer: str, tool: str, vary: bool = True) -> str:
        """The next tool result as the history keeps it, framed in the form its number in the run and the
        run's seed choose (context/framing.py; `vary` false: the plain form). Recorded in ToolFinished.content,
        so a resume sends the same bytes."""
        return frame_result(shaped.content, footer, tool, framing(self.seed, self.results, vary), shaped.offloaded_to)

    def _on_compaction(self, e: ev.Compaction) -> None:
        self.history.apply(e)
        if e.kind == "summary":
            self.summaries += 1
        if e.usage:  # the summary request's tokens count toward the budget like the agent's
            self._spend(e.usage)

    def _on_check_finished(self, e: ev.CheckFinished) -> None:
        self.checks = e.round
        self.check = check_verdict(e)
        if e.sent_back:
            self.check_rounds += 1

    def _on_status(self, e: ev.StatusChanged) -> None:
        if e.status == "waiting" and e.reason == "ask_user":
            self.question = Question(e.step, e.result or "")
        # The time budget counts the drives, not the time between them: a drive runs from its `running`
        # to its end, or, cut off by a crash, to its last event.
        t = self.totals
        if self.status == "running" and self.drives:
            t.spent_seconds += max(0.0, (self.last_ts if e.status == "running" else e.ts) - t.started)
        if e.status == "running":
            t.started, self.drives = e.ts, self.drives + 1
        self.status = e.status
        if e.result is not None:
            self.result = e.result


@dataclass
class Question:
    """The agent's question to the person (ask_user), and the step at which their answer came."""

    step: int
    text: str
    answered: int | None = None


def check_verdict(e: ev.CheckFinished) -> dict[str, Any]:
    """A check as `cairn show --json`, run.json and `ls` give it (docs/contracts.md: command, passed, exit_code,
    output_path)."""
    return {"command": e.command, "passed": e.passed, "exit_code": e.exit_code, "output_path": e.output_path,
            "round": e.round}
