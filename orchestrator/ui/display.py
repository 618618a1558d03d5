"""What a person watching a run sees: one line per action, and a live status line."""

from __future__ import annotations

import json
import re
import signal
import sys
import threading
import time
from pathlib import Path

from typing import Any

from rich.console import Console
from rich.live import Live
from rich.text import Text

from orchestrator.agent.approvals import answer_line
from orchestrator.ports import Answer, Progress, Question
from orchestrator import events as ev
from orchestrator.agent.state import RunState
from orchestrator.ui.output_lines import OutputLines, as_is
from orchestrator.ui.terminal import clean
from orchestrator.tools.sessions.readable import call_summary


def short(text: str | None, width: int = 100) -> str:
    """One line of at most `width` characters, without control sequences (orchestrator/ui/terminal.py)."""
    flat = " ".join(clean(text).split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def money(totals) -> str:  # noqa: ANN001 - guards.Totals
    return f"${totals.cost_usd:.4f}" if totals.cost_known else "cost unknown"


def event_line(event: ev.Event) -> str | None:
    """What a person sees for an event, a line (a few for a result or an edit; None for the events nobody
    needs to see), safe to print on a terminal. Shared by the live display and `cairn watch`."""
    line = _event_line(event)
    return clean(line) if line is not None else None


WAITING_FOR_MODEL = "waiting for the model"
STARTING = "getting the run ready"
ENDED = re.compile(r" in \d+(\.\d+)? s$")  # a start-up line that says a wait is over: `sandbox started in 1.3 s`
RESULT_LINES = 4  # the first lines of a tool's result that the live view and `cairn watch` show
EDIT_LINES = 6  # the lines of a file_edit's small diff


def _event_line(event: ev.Event) -> str | None:
    if isinstance(event, ev.ToolStarted):
        return f"[{event.step}] {call_line(event.name, event.arguments)}"
    if isinstance(event, ev.ToolFinished):
        return _result_lines(event)
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


def _arguments(raw: str) -> dict:
    try:
        args = json.loads(raw or "{}")
    except (json.JSONDecodeError, TypeError):
        return {}
    return args if isinstance(args, dict) else {}


def call_line(name: str, raw: str, width: int = 110) -> str:
    """A tool call as a person reads it: `$ command`, `write path (12 lines)`, `edit path` and its small
    diff, ...; the tools cairn does not know, by name and arguments."""
    a = _arguments(raw)

    def text(key: str) -> str:
        value = a.get(key)
        return value if isinstance(value, str) else ""

    if name in ("shell_exec", "shell_start") and text("command"):
        lines = text("command").strip().splitlines() or [""]
        more = f"  (+{len(lines) - 1} line{'s' if len(lines) > 2 else ''})" if len(lines) > 1 else ""
        session = f"  [session {short(text('session'), 30)}]" if name == "shell_start" and text("session") else ""
        return f"$ {short(lines[0], width - 2)}{more}{session}"
    if name in ("shell_send", "shell_stop"):  # the keys as typed: `py ⌨ x=1⏎^C` (tools/sessions/readable.py)
        summary = call_summary(name, raw)
        if summary is not None:
            return short(summary, width)
    if name == "file_read" and text("path"):
        span = ""
        if isinstance(a.get("offset"), int) or isinstance(a.get("limit"), int):
            start = a.get("offset") or 1
            span = f" lines {start}-{start + a['limit'] - 1}" if isinstance(a.get("limit"), int) else f" from line {start}"
        return f"read {short(text('path'), width)}{span}"
    if name == "file_write" and text("path"):
        n = len(text("content").splitlines())
        return f"write {short(text('path'), width)} ({n} line{'s' if n != 1 else ''})"
    if name == "file_edit" and text("path"):
        old, new = text("old").splitlines(), text("new").splitlines()
        diff = [f"- {line}" for line in old] + [f"+ {line}" for line in new]
        shown = [f"      {as_is(line, width)}" for line in diff[:EDIT_LINES]]
        if len(diff) > EDIT_LINES:
            shown.append(f"      … {len(diff) - EDIT_LINES} more lines")
        return "\n".join([f"edit {short(text('path'), width)} (-{len(old)} +{len(new)})", *shown])
    if name == "web_fetch" and text("url"):
        return f"fetch {short(text('url'), width)}"
    if name == "todo_write":
        items = [line for line in text("content").splitlines() if line.lstrip().startswith(("- [", "* ["))]
        done = sum(1 for line in items if line.lstrip()[3:4] in ("x", "X"))
        return f"todo: {done}/{len(items)} done" if items else "todo"
    if name == "task_done":
        return f"done: {short(text('summary'), width)}"
    if name == "ask_user":
        return f"ask: {short(text('question'), width)}"
    if name == "agent_delegate":
        return f"delegate: {short(text('task'), width)}"
    return f"{name} {short(raw, width)}"


def _result_lines(event: ev.ToolFinished) -> str:
    """The first lines of a result, as they came (not squashed onto one), then how many more there are."""
    mark = "✗" if event.error else "→"
    where = f"  (saved to {event.offloaded_to})" if event.offloaded_to else ""
    body = event.output or event.content or ""
    if event.name == "file_read" and not event.error:
        n = len(body.splitlines())
        return f"      {mark} {n} line{'s' if n != 1 else ''}{where}"
    lines = [line for line in clean(body).splitlines() if line.strip()] or [""]
    shown = [f"      {mark if i == 0 else ' '} {as_is(line, 100)}" for i, line in enumerate(lines[:RESULT_LINES])]
    if len(lines) > RESULT_LINES:
        shown.append(f"        … {len(lines) - RESULT_LINES} more lines")
    shown[-1] += where
    return "\n".join(shown)


def end_line(event: ev.ToolFinished) -> str:
    """How a command whose output was shown as it came ended: its result's last line, as the tool gave it
    (`output`, not the framing the model reads it in: context/framing.py)."""
    last = (clean(event.output or event.content or "").strip().splitlines() or [""])[-1]
    return f"      {'✗' if event.error else '→'} {as_is(last, 100)}"


def is_model_retry(event: ev.Event) -> bool:
    """A Notice the model client wrote before waiting to retry a request (see LiveRun._retrying)."""
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
        self.current = STARTING
        self.since = time.time()  # when the current action (or wait) began
        self.retry_until = 0.0  # a model retry's wait ends then
        self.retry = ""
        self.model_wait: float | None = None  # how long the model may take to answer (its idle timeout)
        self.cairn_dir: Path | None = None  # the run's cairn/: a long command's output shows as it comes from it
        self.follower: OutputLines | None = None
        self.followed: str | None = None  # the call id of the command whose output is followed
        self.denied_here: set[str] = set()  # calls the person refused at this terminal's prompt
        self.state: RunState | None = None
        self.running: dict[str, str] = {}  # call id -> its short line, for calls running side by side
        self.asking = threading.Lock()  # sub-agents side by side ask one question at a time
        self.live = Live(Text(""), console=self.console, refresh_per_second=4, transient=True,
                         auto_refresh=self.console.is_terminal, get_renderable=self._status)
        if self.console.is_terminal:
            self.live.start()

    def _status(self) -> Text:
        s = self.state
        if s is None:  # the run's start: what it waits for (the sandbox, the model library), and how long
            now = time.time()
            return Text(f"starting · {self.current}, {now - self.since:.0f} s · {now - self.started:.0f}s", style="dim")
        t = s.totals
        return Text(
            f"step {s.step} · {self.doing()} · {t.prompt_tokens + t.completion_tokens:,} tokens · "
            f"cache {t.cache_hit_ratio:.0%} · {money(t)} · {time.time() - self.started:.0f}s",
            style="dim",
        )

    def progress(self, line: str) -> None:
        """A line on how the run's start goes (runs/new_run.progress): printed, and until the first step
        the status line says what is being waited for (the last line that began a wait) and how long."""
        self.console.print(clean(line), highlight=False, markup=False, emoji=False)
        if self.state is None and not ENDED.search(line):
            self.current, self.since = line, time.time()

    def child(self, depth: int) -> "ChildDisplay":
        """A sub-agent's display (agent/delegate.py): its lines indented under this run's."""
        return ChildDisplay(self, depth)

    def doing(self, now: float | None = None) -> str:
        """What is being waited for, and for how long: `waiting for the model, 37 s of 60`, `$ pytest -q, 12 s`."""
        now = time.time() if now is None else now
        if self.current != WAITING_FOR_MODEL:
            return f"{self.current}, {now - self.since:.0f} s"
        if now < self.retry_until:
            return f"{self.retry}: trying again in {self.retry_until - now:.0f} s"
        waited = now - max(self.since, self.retry_until)
        limit = f" of {self.model_wait:.0f}" if self.model_wait and waited <= self.model_wait else ""
        return f"{WAITING_FOR_MODEL}, {waited:.0f} s{limit}"

    def event(self, event: ev.Event, state: RunState) -> None:
        self.state = state
        line = self._line(event)
        if line is not None:
            # emoji=False: no lazy import of rich._emoji_codes that a Ctrl-C handler printing mid-import could break
            self.console.print(_coloured(event, line), highlight=False, markup=False, emoji=False)

    def _line(self, event: ev.Event) -> str | None:
        if isinstance(event, ev.ApprovalAsked) and self.can_ask():
            return None  # the question comes next, whole, on this terminal: said once
        if isinstance(event, ev.ApprovalAnswered) and event.by == "terminal":
            if not event.approved:  # the person said no here: the prompt said so, once; the call never ran
                self.denied_here.add(event.call_id)
            return None  # the person answered on this terminal a moment ago
        if isinstance(event, (ev.ToolStarted, ev.ToolFinished)) and event.call_id in self.denied_here:
            return None
        if self.chat:
            said = self._chat_line(event)
            if said is not False:
                return said
        if isinstance(event, ev.ToolFinished) and self.follower is not None and event.call_id == self.followed:
            streamed, self.follower = self.follower.stop(), None
            if streamed:  # its lines are on the screen already: the result's last line says how it ended
                return end_line(event)
        if isinstance(event, ev.ToolStarted):
            self.running[event.call_id] = short(call_line(event.name, event.arguments).splitlines()[0], 60)
            self.current, self.since = self._calls(), time.time()
            if event.name == "shell_exec" and self.cairn_dir is not None and self.console.is_terminal:
                call = {"name": event.name, "arguments": event.arguments, "since": event.ts}
                if self.follower is not None:
                    self.follower.stop()
                self.follower, self.followed = OutputLines(self.cairn_dir, call, self._say), event.call_id
        elif isinstance(event, ev.ToolFinished) and len(self.running) > 1:
            self.running.pop(event.call_id, None)
            self.current = self._calls()  # the calls still running beside it
        elif isinstance(event, (ev.ToolFinished, ev.StatusChanged, ev.UserMessage)):
            # The model's time starts now: the person's typing before a message is not the model's.
            self.running.clear()
            self.current, self.since = WAITING_FOR_MODEL, time.time()
        elif is_model_retry(event):
            # "retry 2/6 in 8 s: HTTP 429 ...": the wait is said as it runs down, then the new wait for the model
            number, _, why = event.text.partition(":")
            self.retry = f"the model failed ({why.strip()[:60]}), retry {number.split()[1] if len(number.split()) > 1 else ''}"
            self.retry_until = time.time() + float(getattr(event, "wait_s", 0) or 0)
        return event_line(event)

    def _say(self, line: str) -> None:
        self.console.print(line, highlight=False, markup=False, emoji=False)

    def _calls(self) -> str:
        lines = list(self.running.values())
        return lines[-1] if len(lines) == 1 else f"{len(lines)} calls at once: {short(lines[0], 40)} ..."

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
        """The live status line stops while the question is on the screen (orchestrator/ui/approval_prompt.py)."""
        with self.asking:
            return self._ask(question)

    def _ask(self, question: Question) -> Answer | None:
        from orchestrator.ui.approval_prompt import ask

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
        """After a prompt: the status line again, its clocks from now (the person's time is not the run's)."""
        self.since = time.time()
        if self.console.is_terminal and not self.live.is_started:
            self.started = time.time()
            self.live.start()

    def close(self) -> None:
        if self.follower is not None:
            self.follower.stop()
        if self.live.is_started:
            self.live.stop()


class ChildDisplay:
    """The child's action lines, indented under the parent's, on the parent's console (if it has one)."""

    def __init__(self, parent: LiveDisplay | ChildDisplay, depth: int) -> None:
        self.parent, self.depth = parent, depth

    @property
    def console(self) -> Any:
        return getattr(self.parent, "console", None)

    def event(self, event: ev.Event, state: Progress) -> None:
        console = self.console
        if console is None:
            return
        line = event_line(event)
        if line is not None:
            console.print("    " * self.depth + "┆ " + line, highlight=False, markup=False, emoji=False)

    def child(self, depth: int) -> "ChildDisplay":
        return ChildDisplay(self, depth)

    def close(self) -> None:
        pass


def _coloured(event: ev.Event, line: str) -> Text | str:
    """An edit's small diff in red and green; every other line as it is."""
    if not (isinstance(event, ev.ToolStarted) and event.name == "file_edit"):
        return line
    out = Text()
    for i, part in enumerate(line.split("\n")):
        style = "red" if part.startswith("      - ") else "green" if part.startswith("      + ") else None
        out.append(("\n" if i else "") + part, style=style)
    return out


def make_display(json_output: bool, chat: bool = False) -> Quiet | LiveDisplay:
    # soft_wrap: a line is never broken by rich; piped (80 columns by rich's reckoning) it stays one line
    return Quiet() if json_output else LiveDisplay(Console(stderr=True, soft_wrap=True), chat=chat)
