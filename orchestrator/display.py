"""What a person watching a run sees: one line per action, and a live status line."""

from __future__ import annotations

import signal
import sys
import threading
import time

from rich.console import Console
from rich.live import Live
from rich.text import Text

from orchestrator.approvals import Answer, Question, answer_line
from orchestrator.store import events as ev
from orchestrator.store.replay import RunState
from orchestrator.terminal import clean


def short(text: str | None, width: int = 100) -> str:
    """One line of at most `width` characters, without control sequences (orchestrator/terminal.py)."""
    flat = " ".join(clean(text).split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def money(totals) -> str:  # noqa: ANN001 - guards.Totals
    return f"${totals.cost_usd:.4f}" if totals.cost_known else "cost unknown"


def event_line(event: ev.Event) -> str | None:
    """The one line a person sees for an event (None for the events nobody needs to see), safe to
    print on a terminal. Shared by the live display and `cairn watch`."""
    line = _event_line(event)
    return clean(line) if line is not None else None


def _event_line(event: ev.Event) -> str | None:
    if isinstance(event, ev.ToolStarted):
        return f"[{event.step}] {event.name} {short(event.arguments, 110)}"
    if isinstance(event, ev.ToolFinished):
        mark = "✗" if event.error else "→"
        where = f"  (saved to {event.offloaded_to})" if event.offloaded_to else ""
        return f"      {mark} {short(event.output or event.content, 100)}{where}"
    if isinstance(event, ev.AssistantMessage) and event.message.get("content"):
        return f"[{event.step}] {short(event.message['content'], 120)}"
    if isinstance(event, ev.UserMessage) and event.source in ("say", "inbox"):
        return f"[{event.step}] ✉ message ({event.source}): {short(event.text, 100)}"
    if isinstance(event, ev.CheckFinished):
        verdict = "passed" if event.passed else "failed"
        code = "could not run" if event.exit_code is None else f"exit code {event.exit_code}"
        then = "; its output goes back to the agent" if event.sent_back else ""
        return f"[{event.step}] check {verdict} ({code}): {short(event.command, 80)}{then}"
    if isinstance(event, ev.Compaction):
        return f"      ⟲ compaction ({event.kind}): {event.tokens_before:,} → {event.tokens_after:,} tokens"
    if isinstance(event, ev.Notice):
        return f"      ! {event.text}"
    if isinstance(event, ev.ApprovalAsked):
        return f"[{event.step}] ? {event.name} {short(event.arguments, 90)}: approval needed ({event.why})"
    if isinstance(event, ev.ApprovalAnswered):
        return f"      {answer_line(event)}"
    if isinstance(event, ev.StatusChanged) and event.status == "waiting" and event.reason.startswith("approval"):
        return f"waiting for {event.reason} (answer with cairn approve RUN [--deny REASON] [--always])"
    if isinstance(event, ev.StatusChanged) and event.status == "waiting":
        return f"the agent asks: {event.result}"
    if isinstance(event, ev.StatusChanged) and event.status != "running":
        return f"status: {event.status}" + (f" ({event.reason})" if event.reason else "")
    return None


def is_model_retry(event: ev.Event) -> bool:
    """A Notice the model client wrote before waiting to retry a request (see Session._retrying)."""
    return isinstance(event, ev.Notice) and getattr(event, "kind", None) == "model_retry"


class Quiet:
    """For --json: nothing but the final document reaches stdout; a model retry is still told on stderr,
    since it is a wait the person would otherwise not understand."""

    def event(self, event: ev.Event, state: RunState) -> None:
        if is_model_retry(event):
            sys.stderr.write(f"cairn: {event.text}\n")
            sys.stderr.flush()

    def pause(self) -> None:
        pass

    def resume(self) -> None:
        pass

    def close(self) -> None:
        pass


class LiveDisplay:
    """Action lines scroll above a status line: step, tool, tokens, cache hits, cost, elapsed."""

    def __init__(self, console: Console | None = None, chat: bool = False) -> None:
        self.console = console or Console(stderr=True)
        self.chat = chat  # an interactive session: answers are shown whole, and a text answer is no "stop"
        self.started = time.time()
        self.current = "starting"
        self.state: RunState | None = None
        self.live = Live(Text(""), console=self.console, refresh_per_second=4, transient=True,
                         auto_refresh=self.console.is_terminal, get_renderable=self._status)
        if self.console.is_terminal:
            self.live.start()

    def _status(self) -> Text:
        s = self.state
        if s is None:
            return Text("")
        t = s.totals
        return Text(
            f"step {s.step} · {self.current} · {t.prompt_tokens + t.completion_tokens:,} tokens · "
            f"cache {t.cache_hit_ratio:.0%} · {money(t)} · {time.time() - self.started:.0f}s",
            style="dim",
        )

    def event(self, event: ev.Event, state: RunState) -> None:
        self.state = state
        line = self._line(event)
        if line is not None:
            # emoji=False: no lazy import of rich._emoji_codes that a Ctrl-C handler printing mid-import could break
            self.console.print(line, highlight=False, markup=False, emoji=False)

    def _line(self, event: ev.Event) -> str | None:
        if self.chat:
            said = self._chat_line(event)
            if said is not False:
                return said
        if isinstance(event, ev.ToolStarted):
            self.current = f"{clean(event.name)} {short(event.arguments, 60)}"
        elif isinstance(event, ev.ToolFinished):
            self.current = "thinking"
        elif is_model_retry(event):
            self.current = event.text.split(":", 1)[0]  # "retry 2/6 in 8 s", until the answer comes
        elif isinstance(event, ev.AssistantMessage):
            self.current = "thinking"
        return event_line(event)

    def _chat_line(self, event: ev.Event) -> str | None | bool:
        """In a chat, the model's answer (text without a tool call) is the reply: shown whole, and the
        run's "stopped" that follows it is the turn ending, not news. False: the usual line."""
        if isinstance(event, ev.AssistantMessage) and event.message.get("content") and not event.message.get("tool_calls"):
            return f"\n{event.message['content'].strip()}\n"
        if isinstance(event, ev.StatusChanged) and event.status in ("stopped", "running"):
            return None
        return False

    def can_ask(self) -> bool:
        """A person can answer an approval here: the display and the input are a terminal."""
        return self.console.is_terminal and sys.stdin.isatty()

    def ask_approval(self, question: Question) -> Answer | None:
        """The live status line stops while the question is on the screen (orchestrator/approval_prompt.py)."""
        from orchestrator.approval_prompt import ask

        self.pause()
        # Ctrl-C while the question is up answers it (a refusal that stops the run), rather than asking to
        # stop "after the current action" while the prompt still waits for an answer.
        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, signal.default_int_handler) if main else None
        try:
            return ask(question)
        finally:
            if main:
                signal.signal(signal.SIGINT, previous)
            self.resume()

    def pause(self) -> None:
        """Before a prompt: the status line goes, so that nothing redraws under what the person types."""
        if self.live.is_started:
            self.live.stop()

    def resume(self) -> None:
        if self.console.is_terminal and not self.live.is_started:
            self.started = time.time()
            self.live.start()

    def close(self) -> None:
        if self.live.is_started:
            self.live.stop()


def make_display(json_output: bool, chat: bool = False) -> Quiet | LiveDisplay:
    # soft_wrap: a line is never broken by rich; piped (80 columns by rich's reckoning) it stays one line
    return Quiet() if json_output else LiveDisplay(Console(stderr=True, soft_wrap=True), chat=chat)
