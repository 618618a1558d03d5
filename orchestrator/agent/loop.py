"""The agent loop: build the request, call the model, record, run the tools, check guards, repeat.

Every fact goes into the event log before the action it describes goes ahead, and the in-memory state
is only ever changed by applying those same events (`emit`), so a resumed run is the run that stopped.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from orchestrator import events as ev
from orchestrator.agent import approvals, critic, parallel, recovery
from orchestrator.agent.check import check_done
from orchestrator.agent.guards import Finished, LoopGuard, budget_notice, check_budget, is_last_step
from orchestrator.agent.in_flight import work_in_flight
from orchestrator.agent.state import RunState
from orchestrator.agent.stop_signals import model_request, stop_requests, stop_signals
from orchestrator.config import RunConfig
from orchestrator.context import CannotCompact, TokenCounter, build_request, compact, needs_compaction
from orchestrator.context import TODO_MAX_BYTES, render_tail, shape_result, todo_cut_note
from orchestrator.context.offload import obs_path
from orchestrator.errors import CairnError, ToolError
from orchestrator.llm.types import ContextOverflow, Reply, ToolCall
from orchestrator.ports import DiskLimit, Display, Model, Sandbox, Store, ToolSandbox
from orchestrator.status import Status
from orchestrator.tools.outcome import AskUser, BadCall, Observation, TaskDone
from orchestrator.tools.registry import Registry, ToolContext, force


class Loop:
    """One agent on one run: `run()` steps until the run ends. Its ports (orchestrator/ports.py) are given
    by the composition root (runs/compose.py): the run's store, sandbox, model, display and tools."""

    tag = ""  # a sub-agent's mark in the names of the files it saves (see agent/delegate.py)

    def __init__(self, run: Store, cfg: RunConfig, sandbox: Sandbox, model: Model, display: Display,
                 tools: Registry | None = None) -> None:
        """`tools`: the run's tool registry; by default the built-in tools, sub-agents made of this class."""
        self.run_dir, self.cfg, self.sandbox, self.model, self.display = run, cfg, sandbox, model, display
        self.counter = TokenCounter()
        self.state = RunState(cfg.context, self.counter)
        if tools is None:
            from orchestrator.agent.delegate import delegate_tool
            from orchestrator.tools.builtin import builtin_tools

            tools = Registry(builtin_tools(delegate_tool(type(self))))
        self.tools = tools
        self.guard = LoopGuard()
        self.notices: list[str] = []  # for the next request's tail only
        self.stop_requested = False
        self.stopped_by: str | None = None  # "Ctrl-C" or "SIGTERM", for the reason of the stop
        self.error: CairnError | None = None  # what made the run fail, for the exit code
        events, _torn = run.events.read()
        for event in events:
            self.state.apply(event)
        self.disk: DiskLimit | None = None  # made when the run starts (store/disk.py)
        self.critic_model: Model | None = None  # --critic-model's own client; None: the critic asks `model`
        self.summary_usage: dict[str, Any] = {}  # the last summary request's, until its compaction is recorded
        self.cut_off: list[tuple[ToolCall, Callable[[int], Observation]]] = []  # calls to finish (see recover)
        self.approval_step = False  # the last step stopped for an approval: its calls go on (see recover)
        self.waiting_for_model = False  # a model request is in flight (agent/stop_signals.py)
        self.emitting = threading.RLock()

    def emit(self, event: ev._Event) -> None:
        with self.emitting:  # calls running side by side (agent/parallel.py) log from their threads
            self.run_dir.events.append(event)
            self.state.apply(event)
            self.display.event(event, self.state)

    # -- the loop ---------------------------------------------------------------------------------

    def run(self, message: str | None = None, source: str = "user") -> str:
        """Steps until the run ends; returns its status. Ctrl-C or SIGTERM stops it now. A
        person's `message` (an answer, a new instruction) reaches the model in the next request."""
        self.emit(ev.StatusChanged(step=self.state.step, status="running"))
        self.start_disk_limit()
        try:
            with stop_signals(self), stop_requests(self, self.run_dir):
                if self.cut_off:
                    recovery.finish_cut_off_step(self)  # first: the results of a step's calls follow the calls
                elif self.approval_step:
                    recovery.finish_approval_step(self)
                if message:
                    self.emit(ev.UserMessage(step=self.state.step, text=message, source=source))
                if self.stop_requested:
                    raise Finished("interrupted", f"stopped by {self.stopped_by or 'Ctrl-C'}")
                while True:
                    self.step()
        except Finished as finished:
            end = finished
        except KeyboardInterrupt:
            end = Finished("interrupted", f"stopped by {self.stopped_by or 'Ctrl-C'}")
        except CairnError as exc:  # the model or the sandbox failed for good; the message says how
            self.error = exc
            end = Finished("failed", exc.message)
        self.emit(ev.StatusChanged(step=self.state.step, status=end.status, reason=end.reason, result=end.result))
        self.save_meta()
        self.run_dir.take_stop_request()  # a `cairn stop` that came as the run ended is not for its next run
        return self.state.status

    def step(self) -> None:
        step = self.state.step + 1
        self.take_messages(step)
        check_budget(self.cfg.limits, self.state.totals, step)
        reply = self.ask_model(step)
        self.emit(ev.AssistantMessage(step=step, message=reply.message,
                                      **({"reasoning": reply.reasoning} if reply.reasoning else {})))
        if not reply.tool_calls:
            raise Finished("stopped", "the model answered without a tool call", result=reply.message.get("content"))
        self.end_step(step, self.run_tools(reply.tool_calls, step))

    def end_step(self, step: int, ending: Finished | None) -> None:
        """After a step's calls: its checkpoint, then whatever ends the run or warns the agent."""
        self.checkpoint(step)  # before any ending: the last step's work is kept too
        if ending is not None and ending.status == Status.DONE and self.cfg.check.command and not self.tag:
            ending = check_done(self, step, ending)  # the run's check; a sub-agent's task_done is not the run's
        if ending is not None:
            raise ending
        over = self.disk.over() if self.disk is not None else None
        if over:
            raise Finished("budget", over)
        warning = self.guard.check(self.state.signatures)
        if warning:
            self.notices.append(warning)
        if self.run_dir.stop_asked():
            raise Finished("interrupted", "stopped by cairn stop")
        if self.stop_requested:
            raise Finished("interrupted", f"stopped by {self.stopped_by or 'Ctrl-C'}")
        critic.after_step(self, step)  # every --critic-every steps, a note for the next request's tail

    def run_tools(self, calls: list[ToolCall], step: int, seen: set[str] | None = None) -> Finished | None:
        """Runs the calls in order, each recorded before those after it, the ones that cannot interfere at
        once (agent/parallel.py); returns how the run ends, if a call ends it. `seen`: tools whose saved
        output already took the step's plain name (`<step>-<tool>.txt`)."""
        ending: Finished | None = None
        for group in parallel.groups(parallel.labelled(calls, set(seen or ()), self.tag)):
            if ending is None and self.stop_requested:  # a person stopped the run: no further call starts
                ending = Finished("interrupted", f"stopped by {self.stopped_by or 'Ctrl-C'}")
                for call, _ in group:
                    self.finish(call, step, Observation("not executed: the person stopped the run before this call",
                                                        error=True))
            elif ending is not None:
                for call, _ in group:
                    self.finish(call, step, Observation("not executed: an earlier call in this step ended the run", error=True))
            elif len(group) == 1:
                ending = self.execute(group[0][0], step, group[0][1])
            else:
                ending = parallel.run_together(self, group, step)
        return ending

    # -- the model --------------------------------------------------------------------------------

    def ask_model(self, step: int) -> Reply:
        request = self.prepare(step)
        tool_choice = force("task_done") if is_last_step(self.cfg.limits, step) else "auto"
        try:
            return self._call(request, tool_choice, step)
        except ContextOverflow as exc:
            self.emit(ev.Notice(step=step, text=f"the provider said the context is too long ({exc}); compacting"))
            # The provider's window is smaller than we thought: compact relative to what it refused.
            self.compact(step, request, window=min(self.model.context_window(), self.counter.estimate(request)))
            try:
                return self._call(self.prepare(step, allow_compaction=False), tool_choice, step)
            except ContextOverflow as again:
                raise Finished("failed", f"the context is still too long after compaction: {again}") from again

    def prepare(self, step: int, allow_compaction: bool = True) -> Any:
        notices = [n for n in [budget_notice(self.cfg.limits, self.state.totals, step), *self.notices, *work_in_flight(self)] if n]
        todo, cut = self.read_todo()
        note = self.state.critic_note  # made after the last step, or before a stop: shown once
        tail = render_tail(todo, notices, cut, critic.tail_text(note) if note else None)
        request = self._build(tail)
        if allow_compaction and needs_compaction(self.counter.estimate(request), self.model.context_window(),
                                                 self.cfg.context, round(self.state.history.growth() * self.counter.ratio)):
            self.compact(step, request)
            request = self._build(tail)
        return request

    def _build(self, tail: str) -> Any:
        s = self.state
        return build_request(s.system_prompt, s.tools, s.task, s.history, tail)

    def _call(self, request: Any, tool_choice: Any, step: int) -> Reply:
        estimated = self.counter.estimate(request)
        with model_request(self):
            reply = self.model.complete(request.messages, self.state.tools, tool_choice, history_end=request.history_end)
        self.counter.calibrate(reply.usage.prompt_tokens, estimated)
        self.notices = []  # they were shown
        priced = self.state.totals.cost_known
        self.emit(ev.ModelRequest(step=step, model=self.cfg.model.model, usage=reply.usage.model_dump(),
                                  estimated_prompt_tokens=estimated, messages=len(request.messages)))
        if priced and not self.state.totals.cost_known and self.cfg.limits.max_cost is not None:
            self.emit(ev.Notice(step=step, text=f"litellm knows no price for {self.cfg.model.model}: the cost limit "
                                                "cannot be enforced (a token limit, --max-tokens, can)"))
        return reply

    def compact(self, step: int, request: Any, window: int | None = None) -> None:
        """One bulk step down to the low-water mark; the event records what was replaced."""
        try:
            event = compact(
                self.state.history, window=window or self.model.context_window(), cfg=self.cfg.context,
                save=self.save_file, summarize=self.summarize, step=step,
                next_summary_number=self.state.summaries + 1,
                overhead_tokens=self.counter.overhead(request), counter=self.counter,
                summary_prefix=f"{self.tag}-" if self.tag else "", prefix=request.messages[:2],
            )
        except CannotCompact as exc:
            raise Finished("failed", str(exc)) from exc
        if event.replacements or event.span:
            event.usage, self.summary_usage = self.summary_usage, {}
            self.emit(event)

    def summarize(self, messages: list[dict]) -> str:
        """The agent's own request with the summary instruction appended (context/compaction.py
        `summary_request`): the same tools, none callable, so the provider's cache serves its prefix."""
        with model_request(self):
            reply = self.model.complete(messages, self.state.tools, "none", history_end=len(messages) - 1)
        self.summary_usage = reply.usage.model_dump()  # recorded with the compaction (`compact`)
        return reply.message.get("content") or "(the model gave no summary)"

    # -- the tools --------------------------------------------------------------------------------

    def execute(self, call: ToolCall, step: int, label: str | None = None) -> Finished | None:
        """Runs one call and records its result; returns how the run ends if this call ends it."""
        clearance = self.clear(call, step)
        self.begin(clearance.call, step)
        return self.record(clearance, step, label, self.perform(clearance, step, label))

    def clear(self, call: ToolCall, step: int) -> approvals.Clearance:
        return approvals.clear(self, call, step)  # a person's yes first, where one is needed

    def begin(self, call: ToolCall, step: int) -> None:
        self.emit(ev.ToolStarted(step=step, call_id=call.id, name=call.name, arguments=call.arguments))

    def perform(self, clearance: approvals.Clearance, step: int, label: str | None) -> parallel.Performed:
        """Runs a cleared call (the arguments the person edited, if they did): its observation, how it ends
        the run, if it does, and how long it took. Calls that run at once do this on their own threads."""
        call, started, ending = clearance.call, time.monotonic(), None
        try:
            args = self.tools.parse_arguments(call.name, call.arguments)
            refused = clearance.refused
            observation = refused if refused is not None else self.run_tool(call, args, step, label)
        except TaskDone as done:
            observation, ending = Observation("task reported done"), Finished("done", "task_done", done.summary)
        except AskUser as ask:
            observation = Observation("the question was sent to the person; their answer will follow")
            ending = Finished("waiting", "ask_user", ask.question)
        except (BadCall, ToolError) as exc:
            observation = Observation(f"error: {exc}", error=True)
        return observation, ending, (time.monotonic() - started) * 1000

    def record(self, clearance: approvals.Clearance, step: int, label: str | None,
               done: parallel.Performed) -> Finished | None:
        observation, ending, duration_ms = done
        if clearance.note:
            observation.footer = "\n".join(part for part in (observation.footer, clearance.note) if part)
        self.finish(clearance.call, step, observation, duration_ms, label)
        if observation.note:
            self.notices.append(f"The sandbox was restarted: {observation.note}. Files in "
                                f"{self.cfg.sandbox.workdir} are intact" + (
                                    "; so is what was installed outside it." if self.sandbox.reused else
                                    "; anything installed outside it is gone."))
        return ending

    def run_tool(self, call: ToolCall, args: dict[str, Any], step: int, label: str | None) -> Observation:
        # A call that reaches the toolbox has its request journaled under its key (store/journal.py).
        key = self.journal_key(step, call) if self.tools.get(call.name).journaled else None
        return self.tools.run(call.name, args, self.tool_context(step, call, label, journal_key=key))

    def tool_context(self, step: int, call: ToolCall, label: str | None, sandbox: ToolSandbox | None = None,
                     journal_key: str | None = None) -> ToolContext:
        return ToolContext(sandbox or self.sandbox, self.cfg.sandbox, obs_path(step, call.name, label), step, call,
                           self, journal_key)

    def finish(self, call: ToolCall, step: int, observation: Observation, duration_ms: float | None = None,
               label: str | None = None) -> None:
        shaped = shape_result(step, call.name, observation.text, cfg=self.cfg.context, count=self.counter.count_text,
                              save=self.save_file, saved_path=observation.saved_path, call_id=label)
        content = self.state.framed(shaped, observation.footer, call.name, self.cfg.context.vary_framing)
        whole = "\n".join(part for part in (observation.text.rstrip("\n"), observation.footer) if part)
        self.emit(ev.ToolFinished(
            step=step, call_id=call.id, name=call.name, content=content, error=observation.error,
            offloaded_to=shaped.offloaded_to, duration_ms=duration_ms, output=whole if whole != content else None,
            **({"child": observation.child} if observation.child is not None else {}),
        ))
        recovery.logged(self, step, call)  # its journal record may go

    def save_file(self, path: str, text: str) -> None:
        """Cairn's own files in the workspace are written inside the sandbox, like the agent's."""
        self.sandbox.call("write", path=path, content=text)

    def take_messages(self, step: int) -> None:
        """The person's messages (`cairn say`, in `state/`, which the sandbox never sees) reach the model
        at this step. No file in the workspace is ever taken as the person's words: anything in the
        sandbox, or a cloned repository, can write one (docs/trust.md, "The user's voice")."""
        for text, offset in self.run_dir.messages_after(self.state.inbox_offset):
            self.emit(ev.UserMessage(step=step, text=text, source="say", inbox_offset=offset))

    def read_todo(self) -> tuple[str | None, str | None]:
        """todo.md's text for the tail, and the note that says it was cut when it is longer than the tail
        takes (TODO_MAX_BYTES). Read through the sandbox, whose toolbox reads only a regular file: a FIFO
        or a device named todo.md is no plan, never a hang."""
        try:
            read = self.sandbox.call("read", path="todo.md", max_bytes=TODO_MAX_BYTES)
        except ToolError as exc:
            if "regular file" in str(exc):
                return None, f"[cairn did not read todo.md: {exc}. todo_write replaces it with a plan.]"
            return None, None
        if not read.get("truncated"):
            return read["content"], None
        where = f"{self.cfg.sandbox.workdir.rstrip('/')}/todo.md"
        return read["content"], todo_cut_note(where, read["end_line"], read["total_lines"])

    def checkpoint(self, step: int) -> None:
        """Commits the workspace after a step (store/checkpoints); the event names the commit and what was
        newly skipped, and is written only when there is one or the other. A failed checkpoint is a
        notice, never the end of the run."""
        try:
            self.sandbox.give_back_files()  # first: git, as the host user, must be able to read them
            done = self.run_dir.checkpoint(step)
        except Exception as exc:  # noqa: BLE001 - git failing must not stop the agent
            self.emit(ev.Notice(step=step, text=f"checkpoint of step {step} failed: {exc}"))
            return
        if done.commit or done.skipped:
            self.emit(ev.Checkpoint(step=step, commit=done.commit, skipped=done.skipped))

    def recover(self) -> None:
        """After a stop or a crash: the calls a crash cut off are closed, never run again (agent/recovery.py)."""
        recovery.recover(self)

    def journal_key(self, step: int, call: ToolCall) -> str:
        return self.run_dir.journal_key(step, call.id)

    # -- the edges --------------------------------------------------------------------------------

    def start_disk_limit(self) -> None:
        """`--max-disk`, measured after steps by the store (store/disk.py); a sub-agent (agent/delegate.py) shares its
        parent's, as it shares its workspace and sandbox."""
        limit = getattr(self.cfg.sandbox, "max_disk", None)
        if limit and self.disk is None:
            parents = getattr(getattr(self, "parent", None), "disk", None)
            self.disk = parents or self.run_dir.disk_limit(self.sandbox, limit)

    def save_meta(self) -> None:
        self.run_dir.update_meta(**self.state.meta())
