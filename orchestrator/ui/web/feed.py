"""A run's event log as the page reads it: one small JSON item per event, streamed as server-sent events.

The stream follows `state/events.jsonl` as `cairn watch` does (inspect/watch.EventTail: whole lines
appended since the last read), from a byte offset the page gives, so a reconnect (EventSource does that
by itself, sending Last-Event-ID) neither repeats nor skips an event. The log is looked at every
POLL_S seconds: a stat() per open page, against a thread per page for an inotify watcher.

While a call runs, what it shows so far (a command's output, a terminal session's screen: view/live_output.py)
is streamed beside the items as `output` messages, looked at every POLL_S too: appended text, or the
whole screen again.

An item keeps what the page shows and no more: the system prompt and tool specs of `run_started` stay
out, a long tool result is cut (the page loads a step whole on demand). The lines that `cairn show` and
the report print for the same things (an approval's answer, a check's verdict) come from the same
functions here, so the three say it alike.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any, AsyncIterator

from starlette.concurrency import run_in_threadpool

from orchestrator.agent.approvals import answer_line
from orchestrator.ui.inspect.report import RESULT_PREVIEW
from orchestrator.ui.inspect.timeline import check_line
from orchestrator.ui.display import call_line
from orchestrator.ui.inspect.watch import EventTail
from orchestrator import events as ev
from orchestrator.agent.state import check_verdict
from orchestrator.store.liveness import run_is_live
from orchestrator.store.run_dir import RunDir
from orchestrator.view.live_output import SESSION_CALLS, SHELL_CALL, Follower

POLL_S = 0.1
BATCH = 500  # items in one server-sent event: a long log arrives in a few dozen messages, not thousands
KEEPALIVE_S = 15.0


def clip(text: str | None, width: int = RESULT_PREVIEW) -> str | None:
    if text is None or len(text) <= width:
        return text
    return text[:width] + f"\n… ({len(text) - width:,} more characters: open the step whole)"


def pretty(raw: str) -> str:
    try:
        return json.dumps(json.loads(raw), indent=2, ensure_ascii=False)
    except (ValueError, TypeError):
        return raw


def item(e: Any) -> dict[str, Any] | None:
    """The page's item for one event; None for one the page does not show."""
    base = {"ts": e.ts, "step": e.step}
    if isinstance(e, ev.RunStarted):
        return {**base, "t": "task", "task": e.task}
    if isinstance(e, ev.UserMessage):
        return {**base, "t": "message", "source": e.source, "text": clip(e.text)}
    if isinstance(e, ev.ModelRequest):
        keys = ("prompt_tokens", "cached_tokens", "completion_tokens", "cost_usd")
        return {**base, "t": "usage", "child": getattr(e, "child", None) is not None,
                "usage": {k: e.usage.get(k) for k in keys}}
    if isinstance(e, ev.AssistantMessage):
        content = e.message.get("content")
        return {**base, "t": "text", "text": clip(content if isinstance(content, str) else None)}
    if isinstance(e, ev.ToolStarted):
        return {**base, "t": "call", "id": e.call_id, "name": e.name, "line": named(e.name, e.arguments),
                "arguments": clip(pretty(e.arguments))}
    if isinstance(e, ev.ToolFinished):
        return {**base, "t": "result", "id": e.call_id, "result": clip(e.output or e.content), "error": e.error,
                "offloaded_to": e.offloaded_to, "duration_ms": e.duration_ms}
    if isinstance(e, ev.Compaction):
        return {**base, "t": "compaction", "kind": e.kind, "tokens_before": e.tokens_before,
                "tokens_after": e.tokens_after}
    if isinstance(e, ev.Notice):
        return {**base, "t": "notice", "text": clip(e.text)}
    if isinstance(e, ev.StatusChanged):
        return {**base, "t": "status", "status": e.status, "reason": e.reason, "result": clip(e.result)}
    if isinstance(e, ev.Checkpoint):
        return {**base, "t": "checkpoint", "changed": e.commit is not None}
    if isinstance(e, ev.CheckFinished):
        verdict = check_verdict(e)
        return {**base, "t": "check", "line": check_line(verdict), "passed": e.passed, "round": e.round,
                "output": clip(e.output), "sent_back": e.sent_back}
    if isinstance(e, ev.CriticNote):
        return {**base, "t": "critic", "text": clip(e.text), "path": e.path}
    if isinstance(e, ev.ApprovalAsked):
        return {**base, "t": "asked", "id": e.call_id, "name": e.name, "line": named(e.name, e.arguments),
                "arguments": clip(pretty(e.arguments)), "why": e.why}
    if isinstance(e, ev.ApprovalAnswered):
        return {**base, "t": "answered", "id": e.call_id, "line": answer_line(e)}
    return None


def named(name: str, arguments: str) -> str:
    """A call as `cairn show` names it: `$ cat probe.html`, `write notes.md (3 lines)`, ..."""
    return call_line(name, arguments, width=100).splitlines()[0]


class Running:
    """The call that runs now, as the stream's events tell it, and what it shows so far."""

    def __init__(self, run: RunDir) -> None:
        self.run = run
        self.call: dict[str, Any] | None = None
        self.follower: Follower | None = None

    def see(self, e: Any) -> None:  # noqa: ANN401 - an event
        """The newest command or session call started is followed until it finishes (a call that shows
        nothing while it runs, started beside it, changes nothing), or until the drive ends."""
        if isinstance(e, ev.ToolStarted) and e.name in (SHELL_CALL, *SESSION_CALLS):
            self.call, self.follower = {"call_id": e.call_id, "name": e.name, "arguments": e.arguments,
                                        "since": e.ts}, None
        elif isinstance(e, ev.StatusChanged) or \
                isinstance(e, ev.ToolFinished) and self.call is not None and e.call_id == self.call["call_id"]:
            self.call, self.follower = None, None

    def output(self) -> dict[str, Any] | None:
        """The `output` message for what came since the last look; None when nothing did. A call left
        open by a run that is not live (a crash) shows nothing: its output is not coming."""
        call = self.call
        if call is None:
            return None
        if self.follower is None:
            if not run_is_live(self.run):
                self.call = None
                return None
            self.follower = Follower(self.run.cairn_dir, call)
        got = self.follower.read()
        if got is None:
            return None
        return {"id": call["call_id"], "text": got[0], "replace": got[1]}


def _new_items(tail: EventTail, running: Running) -> list[dict[str, Any]]:
    out = []
    for e in tail.new():
        running.see(e)
        shown = item(e)
        if shown is not None:
            out.append(shown)
    return out


def sse(data: str, event_id: int | None = None, event: str | None = None) -> str:
    head = (f"id: {event_id}\n" if event_id is not None else "") + (f"event: {event}\n" if event else "")
    return head + "".join(f"data: {line}\n" for line in data.split("\n")) + "\n"


async def stream(run: RunDir, offset: int) -> AsyncIterator[str]:
    """Server-sent events: `items` (a list of items; its id is the byte offset after them), then the same
    as the log grows, `caught-up` once after the first read, `output` (the running call's `id`, `text`
    and whether it `replace`s what came before) as it comes, and a comment now and then so that a proxy
    keeps the connection. Starlette ends it when the browser goes away."""
    tail = EventTail(run.events.path)
    tail.offset = max(0, offset)
    running = Running(run)
    yield "retry: 1000\n\n"
    first, idle, size = True, 0.0, -1
    while True:
        try:
            now = os.stat(run.events.path).st_size
        except OSError:
            now = 0
        if now != size:
            size = now
            items = await run_in_threadpool(_new_items, tail, running)  # a long log is parsed off the event loop
            for k in range(0, len(items), BATCH):
                yield sse(json.dumps(items[k:k + BATCH], ensure_ascii=False, separators=(",", ":")), tail.offset, "items")
            if items:
                idle = 0.0
        if first:
            yield sse(json.dumps({"offset": tail.offset}), tail.offset, "caught-up")
            first = False
        if running.call is not None:
            shown = await run_in_threadpool(running.output)
            if shown is not None:
                yield sse(json.dumps(shown, ensure_ascii=False), event="output")
                idle = 0.0
        await asyncio.sleep(POLL_S)
        idle += POLL_S
        if idle >= KEEPALIVE_S:
            idle = 0.0
            yield ": keep-alive\n\n"
