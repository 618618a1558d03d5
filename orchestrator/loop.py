"""The agent loop: build the request, call the model, record, run the tools, check guards, repeat.

Every fact goes into the event log before the action it describes goes ahead, and the in-memory state
is only ever changed by applying those same events (`emit`), so a resumed run is the run that stopped.
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Any, Callable, Protocol

from orchestrator import critic
from orchestrator.check import check_done
from orchestrator.config import RunConfig
from orchestrator.errors import CairnError
from orchestrator.context import CannotCompact, TokenCounter, build_request, compact, needs_compaction
from orchestrator.context import TODO_MAX_BYTES, render_tail, shape_result, todo_cut_note
from orchestrator.context.offload import obs_path
from orchestrator.delegate import delegate, resumable_child, resume_delegate, top_of
from orchestrator.disk import DiskLimit, disk_limit_of
from orchestrator.guards import Finished, LoopGuard, budget_notice, check_budget, is_last_step
from orchestrator.llm.types import ContextOverflow  # not llm.client: that imports litellm
from orchestrator.llm.types import Reply, ToolCall
from orchestrator.sandbox import ToolError
from orchestrator.store import events as ev
from orchestrator.store import inbox
from orchestrator.store import journal
from orchestrator.store.replay import RunState
from orchestrator.store.runs import RunDir
from orchestrator.tools.dispatch import AskUser, BadCall, Observation, TaskDone, ToolRunner, parse_arguments
from orchestrator.tools.specs import force
from orchestrator.status import Status


# Ctrl-C and SIGTERM (`kill`, `docker stop`, systemd, a job scheduler) both stop a run between actions.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class ModelLike(Protocol):
    def complete(self, messages: list[dict], tools: list[dict], tool_choice: Any = "auto",
                 history_end: int | None = None, on_text: Callable[[str], None] | None = None) -> Reply: ...

    def context_window(self) -> int: ...


class Display(Protocol):
    def event(self, event: ev.Event, state: RunState) -> None: ...


class Agent:
    tag = ""  # a sub-agent's mark in the names of the files it saves (see delegate.py)

    def __init__(self, run: RunDir, cfg: RunConfig, sandbox: Any, model: ModelLike, display: Display) -> None:
        self.run_dir, self.cfg, self.sandbox, self.model, self.display = run, cfg, sandbox, model, display
        self.counter = TokenCounter()
        self.state = RunState(cfg.context, self.counter)
        self.tools = ToolRunner(sandbox, cfg.sandbox)
        self.guard = LoopGuard()
        self.notices: list[str] = []  # for the next request's tail only
        self.stop_requested = False
        self.stopped_by: str | None = None  # "Ctrl-C" or "SIGTERM", for the reason of the stop
        self.error: CairnError | None = None  # what made the run fail, for the exit code
        events, _torn = run.events.read()
        for event in events:
            self.state.apply(event)
        self.inbox_offset = inbox.delivered_offset(events)  # where the undelivered `cairn say` lines start
        self.disk: DiskLimit | None = None  # made when the run starts (`start_disk_limit`)
        self.checkpoints: Any = None  # store.checkpoints.Checkpoints, made at the first checkpoint
        self.critic_model: ModelLike | None = None  # --critic-model's own client; None: the critic asks `model`
        self.cut_off_child: tuple[ToolCall, Any] | None = None  # a sub-agent to go on with (see recover)

    def emit(self, event: ev._Event) -> None:
        self.run_dir.events.append(event)
        self.state.apply(event)
        self.display.event(event, self.state)

    # -- the loop ---------------------------------------------------------------------------------

    def run(self, message: str | None = None, source: str = "user") -> str:
        """Steps until the run ends; returns its status. Ctrl-C or SIGTERM stops between actions. A
        person's `message` (an answer, a new instruction) reaches the model in the next request."""
        self.emit(ev.StatusChanged(step=self.state.step, status="running"))
        # signal.signal works in the main thread only; a batch runs agents in worker threads and stops
        # them itself on Ctrl-C or SIGTERM by setting `stop_requested` (orchestrator/batch.py).
        main = threading.current_thread() is threading.main_thread()
        previous = {sig: signal.signal(sig, self._on_stop_signal) for sig in STOP_SIGNALS} if main else {}
        self.start_disk_limit()
        try:
            if self.cut_off_child is not None:
                self.finish_cut_off_step()  # first: the results of a step's calls follow the calls
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
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        self.emit(ev.StatusChanged(step=self.state.step, status=end.status, reason=end.reason, result=end.result))
        self._save_meta()
        self.run_dir.take_stop_request()  # a `cairn stop` that came as the run ended is not for its next run
        return self.state.status

    def step(self) -> None:
        step = self.state.step + 1
        self.take_messages(step)
        check_budget(self.cfg.limits, self.state.totals, step)
        reply = self.ask_model(step)
        self.emit(ev.AssistantMessage(step=step, message=reply.message))
        if not reply.tool_calls:
            raise Finished("stopped", "the model answered without a tool call", result=reply.message.get("content"))
        ending = self.run_tools(reply.tool_calls, step)
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
        if self._stop_asked():
            raise Finished("interrupted", "stopped by cairn stop")
        if self.stop_requested:
            raise Finished("interrupted", f"stopped by {self.stopped_by or 'Ctrl-C'}")
        critic.after_step(self, step)  # every --critic-every steps, a note for the next request's tail

    def _stop_asked(self) -> bool:
        """`cairn stop` (store/runs.py): a sub-agent sees its top run's request and stops; the top run takes it."""
        top = top_of(self.run_dir)
        return top.stop_path.exists() if top is not self.run_dir else top.take_stop_request()

    def run_tools(self, calls: list[ToolCall], step: int) -> Finished | None:
        """Runs the calls in order, each recorded before the next; returns how the run ends, if a call ends it."""
        ending: Finished | None = None
        seen: set[str] = set()
        for call in calls:
            # A second call of the same tool in one step names its saved output after its call id.
            label = call.id if call.name in seen else None
            seen.add(call.name)
            if ending is None:
                ending = self.execute(call, step, label)
            else:
                self.finish(call, step, Observation("not executed: an earlier call in this step ended the run", error=True))
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
            self.compact(step, request, window=min(self.model.context_window(), self.estimate(request)))
            try:
                return self._call(self.prepare(step, allow_compaction=False), tool_choice, step)
            except ContextOverflow as again:
                raise Finished("failed", f"the context is still too long after compaction: {again}") from again

    def prepare(self, step: int, allow_compaction: bool = True) -> Any:
        notices = [n for n in [budget_notice(self.cfg.limits, self.state.totals, step), *self.notices] if n]
        todo, cut = self.read_todo()
        note = self.state.critic_note  # made after the last step, or before a stop: shown once
        tail = render_tail(todo, notices, cut, critic.tail_text(note) if note else None)
        request = self._build(tail)
        if allow_compaction and needs_compaction(self.estimate(request), self.model.context_window(), self.cfg.context):
            self.compact(step, request)
            request = self._build(tail)
        return request

    def _build(self, tail: str) -> Any:
        s = self.state
        return build_request(s.system_prompt, s.tools, s.task, s.history, tail)

    def estimate(self, request: Any) -> int:
        return self.counter.estimate(request)

    def _call(self, request: Any, tool_choice: Any, step: int) -> Reply:
        estimated = self.estimate(request)
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
                summary_prefix=f"{self.tag}-" if self.tag else "",
            )
        except CannotCompact as exc:
            raise Finished("failed", str(exc)) from exc
        if event.replacements or event.span:
            self.emit(event)

    def summarize(self, messages: list[dict]) -> str:
        """The span goes to the model as plain text: some providers refuse tool calls without tools."""
        prompt = ("Summarize this part of an agent's work history for the agent itself: decisions, facts "
                  "learned, files written, errors met, and every file path mentioned. Be concise.")
        span = "\n\n".join(f"[{m['role']}] {m.get('content') or ''}"
                            + "".join(f"\n  call {c['function']['name']} {c['function']['arguments']}"
                                      for c in m.get("tool_calls") or []) for m in messages)
        reply = self.model.complete([{"role": "system", "content": prompt}, {"role": "user", "content": span}], [])
        return reply.message.get("content") or "(the model gave no summary)"

    # -- the tools --------------------------------------------------------------------------------

    def execute(self, call: ToolCall, step: int, label: str | None = None) -> Finished | None:
        """Runs one call and records its result; returns how the run ends if this call ends it."""
        self.emit(ev.ToolStarted(step=step, call_id=call.id, name=call.name, arguments=call.arguments))
        started = time.monotonic()
        ending = None
        try:
            args = parse_arguments(call.name, call.arguments, self.tools.extra_names)
            if call.name == "agent_delegate":  # a sub-agent on the same sandbox (orchestrator/delegate.py)
                observation = delegate(self, Agent, call, step, args)
            else:
                self.sandbox.call_key = self.journal_key(step, call)  # its request is journaled under it
                try:
                    observation = self.tools.run(call.name, args, obs_path(step, call.name, label))
                finally:
                    self.sandbox.call_key = None  # a call that never reached the toolbox leaves none behind
        except TaskDone as done:
            observation, ending = Observation("task reported done"), Finished("done", "task_done", done.summary)
        except AskUser as ask:
            observation = Observation("the question was sent to the person; their answer will follow")
            ending = Finished("waiting", "ask_user", ask.question)
        except (BadCall, ToolError) as exc:
            observation = Observation(f"error: {exc}", error=True)
        self.finish(call, step, observation, (time.monotonic() - started) * 1000, label)
        if observation.note:
            self.notices.append(f"The sandbox was restarted: {observation.note}. Files in "
                                f"{self.cfg.sandbox.workdir} are intact" + (
                                    "; so is what was installed outside it." if self.sandbox.reused else
                                    "; anything installed outside it is gone."))
        return ending

    def finish(self, call: ToolCall, step: int, observation: Observation, duration_ms: float | None = None,
               label: str | None = None) -> None:
        shaped = shape_result(step, call.name, observation.text, cfg=self.cfg.context, count=self.counter.count_text,
                              save=self.save_file, saved_path=observation.saved_path, call_id=label)
        content = "\n".join(part for part in (shaped.content.rstrip("\n"), observation.footer) if part)
        whole = "\n".join(part for part in (observation.text.rstrip("\n"), observation.footer) if part)
        self.emit(ev.ToolFinished(
            step=step, call_id=call.id, name=call.name, content=content, error=observation.error,
            offloaded_to=shaped.offloaded_to, duration_ms=duration_ms, output=whole if whole != content else None,
            **({"child": observation.child} if observation.child is not None else {}),
        ))

    def save_file(self, path: str, text: str) -> None:
        """Cairn's own files in the workspace are written inside the sandbox, like the agent's."""
        self.sandbox.call("write", path=path, content=text)

    def take_messages(self, step: int) -> None:
        """The person's messages (`cairn say`, in `state/`, which the sandbox never sees) reach the model
        at this step. No file in the workspace is ever taken as the person's words: anything in the
        sandbox, or a cloned repository, can write one (README, "Talking to a run")."""
        for text, offset in inbox.pending(self.run_dir.state, self.inbox_offset):
            self.emit(ev.UserMessage(step=step, text=text, source="say", inbox_offset=offset))
            self.inbox_offset = offset

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
            if self.checkpoints is None:
                from orchestrator.store.checkpoints import Checkpoints

                self.checkpoints = Checkpoints.of(self.run_dir)
            self.sandbox.give_back_files()  # first: git, as the host user, must be able to read them
            done = self.checkpoints.commit(step)
        except Exception as exc:  # noqa: BLE001 - git failing must not stop the agent
            self.emit(ev.Notice(step=step, text=f"checkpoint of step {step} failed: {exc}"))
            return
        if done.commit or done.skipped:
            self.emit(ev.Checkpoint(step=step, commit=done.commit, skipped=done.skipped))

    def recover(self) -> None:
        """After a stop or a crash: each call that started and never finished gets what the toolbox's
        journal says became of it (its result, or that it was killed mid-way, or that it never reached
        the sandbox), and is never run again; but a sub-agent cut off mid-way goes on where its log
        ends, as the first thing `run` does.

        The sandbox was started before this, which removed the crashed session's container: a command
        that was cut off is dead by now, and its journal can no longer change."""
        record = journal.read(self.run_dir.cairn_dir)
        if record.problem:
            self.emit(ev.Notice(step=self.state.step, text=f"the toolbox's journal was not read: {record.problem}"))
        for call in list(self.state.open_calls.values()):
            began = call.id in self.state.started
            child = resumable_child(self, call) if began else None
            if child is not None:
                self.cut_off_child = (call, child)
                break  # the calls after it are closed after it, in their order
            if not began:
                self.finish(call, self.state.step, Observation("not executed: the run stopped before this call",
                                                               error=True))
                continue
            entry = record.get(self.journal_key(self.state.step, call))
            # Named after its call id, like every call closed here: the step's other calls are not known.
            self.finish(call, self.state.step, self.recovered(call, entry), label=call.id)
        workdir = self.cfg.sandbox.workdir
        if self.state.step and self.sandbox.reused:
            self.notices.append(f"The run was resumed in the same sandbox: files in {workdir} and what was "
                                "installed outside it are intact; processes started before (servers, background "
                                "jobs) and the shell's state are gone.")
        elif self.state.step:
            self.notices.append(f"The run was resumed in a new sandbox: files in {workdir} are intact; anything "
                                f"installed or started outside {workdir} is gone." +
                                (f" ({self.sandbox.replaced})" if self.sandbox.replaced else ""))

    def recovered(self, call: ToolCall, entry: journal.Entry | None) -> Observation:
        """The observation of a call cut off by a crash, from its journal entry: a result it had is shaped
        as it would have been live; a call that was killed, or never reached the sandbox, says so."""
        if entry is not None and entry.state == "finished":
            replay = ToolRunner(journal.Replay(entry.response, self.sandbox.network_enabled), self.cfg.sandbox)
            try:
                args = parse_arguments(call.name, call.arguments, self.tools.extra_names)
                return replay.run(call.name, args, obs_path(self.state.step, call.name, call.id))
            except (BadCall, ToolError) as exc:
                return Observation(f"error: {exc}", error=True)
            except (KeyError, TypeError, ValueError, AttributeError):  # the sandbox can write the journal
                return Observation("the run stopped after this call finished, and the journal's record of its "
                                   "result is unreadable: it ran, its result is lost", error=True)
        if entry is not None:
            what = "command" if call.name == "shell_exec" else "call"
            ran = f" (it ran {entry.seconds:.1f} s)" if entry.seconds is not None else ""
            partial = entry.partial or {}
            footer = f"[killed: the run stopped while this {what} ran; it may have partly run{ran}]"
            if partial.get("truncated"):
                footer += (f"\n[its output so far was {partial.get('output_bytes')} bytes; only its head and tail "
                           f"came back; all of it is in {partial.get('output_path')}]")
            return Observation(str(partial.get("output") or ""), error=True, footer=footer,
                               saved_path=partial.get("output_path") if partial.get("truncated") else None)
        if call.name not in self.tools.extra_names:  # MCP calls go to their servers, not through the journal
            return Observation("not executed: the run stopped before this call reached the sandbox", error=True)
        return Observation("interrupted: the run stopped while this call went to its MCP server; it may or may "
                           "not have taken effect", error=True)

    def journal_key(self, step: int, call: ToolCall) -> str:
        top = top_of(self.run_dir)
        return journal.call_key(top.id, self.run_dir.root.relative_to(top.root).as_posix(), step, call.id)

    def finish_cut_off_step(self) -> None:
        """The rest of the step a crash cut off inside agent_delegate: the sub-agent goes on, the calls
        after it are not executed, and the step ends as every step does."""
        (call, child), self.cut_off_child = self.cut_off_child, None
        step, started = self.state.step, time.monotonic()
        observation = resume_delegate(self, Agent, child, step)
        # Named after its call id: another agent_delegate call of this step may have saved an output.
        self.finish(call, step, observation, (time.monotonic() - started) * 1000, label=call.id)
        for rest in list(self.state.open_calls.values()):
            self.finish(rest, step, Observation("not executed: the run stopped before this call", error=True))
        self.checkpoint(step)

    # -- the edges --------------------------------------------------------------------------------

    def start_disk_limit(self) -> None:
        """`--max-disk`, measured after steps (orchestrator/disk.py); a sub-agent (delegate.py) shares its
        parent's, as it shares its workspace and sandbox."""
        limit = getattr(self.cfg.sandbox, "max_disk", None)
        if limit and self.disk is None:
            parents = getattr(getattr(self, "parent", None), "disk", None)
            self.disk = parents or disk_limit_of(self.run_dir, self.sandbox, limit)

    def _on_stop_signal(self, signum: int, frame: Any) -> None:
        """Ctrl-C (SIGINT) or SIGTERM: stop after the current action; the same again stops at once."""
        name = "Ctrl-C" if signum == signal.SIGINT else "SIGTERM"
        if self.stop_requested:
            raise KeyboardInterrupt  # a second one stops at once
        self.stop_requested, self.stopped_by = True, name
        self.emit(ev.Notice(step=self.state.step, text=f"{name}: stopping after the current action"))

    def _save_meta(self) -> None:
        t = self.state.totals
        self.run_dir.update_meta(
            status=self.state.status, steps=self.state.step, result=self.state.result, check=self.state.check,
            usage={"prompt_tokens": t.prompt_tokens, "cached_tokens": t.cached_tokens,
                   "completion_tokens": t.completion_tokens,
                   "cost_usd": t.cost_usd if t.cost_known else None, "cache_hit_ratio": round(t.cache_hit_ratio, 4)},
        )

