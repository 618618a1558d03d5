"""Sub-agents: the built-in `agent_delegate` tool.

A call starts a child run and waits for it. The child is a `Loop` of its own: its own event log and
context (its RunStarted holds the parent's system prompt and tool list, so the cached prefix is shared,
and the task the parent wrote), its own step budget, and the parent's model client, workspace and the
*same* sandbox object. The parent waits for its children; the agent_delegate calls of one answer run
side by side (agent/parallel.py), each child on a thread of its own: the model client takes requests
from several threads, and the sandbox runs their read-only ops together and the others one at a time.
What the parent gets back is one tool result: how the child ended (its task_done summary, or its status
and last text) and the paths it wrote.

Where things are:

- The child's log is kept under the parent run, never mixed into the parent's:
  `<run>/state/children/<call id>/events.jsonl` and a small `run.json` (task, status, steps, usage).
  A child's own children nest below it (`.../children/<call id>/children/<call id>/`).
- The parent's ToolFinished of the call carries `child`: `{"id", "path", "status", "steps", "paths"}`,
  `path` relative to the top run's directory. `cairn show` nests the child's steps under the call.
- The child's usage counts toward the parent's totals: after the child, the parent records one
  ModelRequest with the child's summed usage and `child=<id>`, so budgets, `show` and run.json see
  it (the parent's budget left is also the child's budget: its cost, token and time limits are what
  the parent has left). A crash during a child loses that one event (the child's log keeps its usage).
- The child's big outputs go to `/cairn/obs/<step>-<tool>-sub-<call id>.txt`, so they never overwrite
  the parent's `/cairn/obs/<step>-<tool>.txt`. Its `todo.md` is the parent's (same workspace): a child
  may update the shared plan. Messages from outside (`cairn say`, INBOX.md) stay for the top run.
- A child makes no checkpoints of its own; the parent's checkpoint after the step holds its work.

"The paths it wrote" are, honestly: what changed in the workspace while the child ran (added, modified,
deleted), taken as the difference of two git trees of the workspace, built in a scratch index copied
from the run's checkpoint index (so unchanged files are not read again, and the parent's own
checkpoints are untouched); plus the paths of the child's successful file_write, file_edit and
todo_write calls that the diff does not show ("written": same content again, or a path checkpoints
skip, such as node_modules/ or a file over 10 MiB). cairn's own files are not in the workspace (they
are in /cairn), except in runs made before that, whose `.cairn/` is left out. Whatever a shell command changed shows up through the diff.
Children that ran side by side each see the others' changes in their diffs; their results say so.

A crash (SIGKILL, a power cut) during a child does not lose it: on `cairn resume` the parent's open
agent_delegate call is taken up again (`resume_delegate`), the child goes on where its log ends, as any
resumed run does, and the call's result is what it would have been (children that ran side by side go
on side by side). The workspace's tree from before the child is in the child's run.json, so its diff
still covers all it changed.

Depth: `limits.delegate_depth` (default 1) is how deep children nest; a child at that depth that calls
agent_delegate gets an error result saying so (the tool stays in its list, so the prefix is the same).
Ctrl-C during a child stops the child now (its running command cut short), and then the parent.
"""

from __future__ import annotations

import functools
import json
import posixpath
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol

from orchestrator.config import LimitsConfig, RunConfig
from orchestrator.errors import first_line
from orchestrator.llm.types import ToolCall
from orchestrator.ports import Display, Model, Sandbox, Unseen
from orchestrator import events as ev
from orchestrator.agent.parallel import CHILDREN_AT_ONCE
from orchestrator.store.children import CHILDREN, ChildRun, open_child, safe_name
from orchestrator.tools.builtin import agent_delegate
from orchestrator.tools.registry import Tool, ToolContext
from orchestrator.store.run_dir import RunDir
from orchestrator.store.trust import safe_config
from orchestrator.tools.outcome import WRITING_TOOLS, BadCall, Observation
from orchestrator.status import Status

if TYPE_CHECKING:
    from orchestrator.agent.state import RunState
    from orchestrator.tools.registry import Registry


class Parent(Protocol):
    """What a sub-agent is made of and reports to: the agent that calls agent_delegate (loop.Loop, or a
    sub-agent at a lower depth, whose `depth` is then set)."""

    cfg: RunConfig
    run_dir: RunDir | ChildRun
    state: RunState
    sandbox: Sandbox
    model: Model
    display: Display
    tools: Registry
    stop_requested: bool

    def emit(self, event: ev.Event) -> None: ...


OWN_FILES = (".cairn/obs/", ".cairn/summaries/", ".cairn/inbox/")  # cairn's in runs made before /cairn
USAGE_KEYS = ("prompt_tokens", "cached_tokens", "cache_write_tokens", "completion_tokens")

ENDINGS = {
    "done": "finished its task",
    "stopped": "stopped (it answered without a tool call)",
    "budget": "ran out of its budget",
    "looping": "was stopped by the loop guard",
    "waiting": "stopped to ask a question; it cannot reach the person: answer it in a new agent_delegate "
               "task, or ask_user yourself",
    "interrupted": "was interrupted",
    "failed": "failed",
}


def _new_child_run(parent: Parent, call_id: str, step: int, task: str, cfg: RunConfig, depth: int) -> ChildRun:
    base = parent.run_dir.state / CHILDREN
    name = safe_name(call_id)
    root, n = base / name, 1
    while root.exists():  # a provider that reuses call ids across steps
        n += 1
        root = base / f"{name}-{n}"
    root.mkdir(parents=True)
    run = ChildRun(root, parent.run_dir)
    run.write_meta({"id": root.name, "created": time.time(), "task": task, "status": "running",
                    "parent": parent.run_dir.top_run.id, "call_id": call_id, "parent_step": step, "depth": depth,
                    "config": cfg.model_dump(mode="json")})
    s = parent.state
    run.events.append(ev.RunStarted(task=task, system_prompt=s.system_prompt, tools=s.tools,
                                    parent=parent.run_dir.top_run.id, call_id=call_id, depth=depth, seed=ev.new_seed()))
    return run


# -- the child agent --------------------------------------------------------------------------------

@functools.cache
def _child_agent_class(agent_class: type) -> type:
    """The child's class: the parent's agent class (handed in by the loop, so this module need not import
    it) with what a sub-agent does differently."""

    class ChildAgent(agent_class):  # type: ignore[misc,valid-type]
        def __init__(self, run: ChildRun, cfg: RunConfig, parent: Parent, depth: int) -> None:
            self.parent, self.depth, self._stop = parent, depth, False
            super().__init__(run, cfg, parent.sandbox, parent.model, child_display(parent.display, depth),
                             tools=parent.tools)
            self.tag = "sub-" + run.id

        @property
        def stop_requested(self) -> bool:  # a stop of the parent (Ctrl-C, a batch stopping) stops the child
            return self._stop or bool(self.parent.stop_requested)

        @stop_requested.setter
        def stop_requested(self, value: bool) -> None:
            self._stop = value

        def take_messages(self, step: int) -> None:
            pass  # `cairn say` and INBOX.md are for the top run

        def checkpoint(self, step: int) -> None:
            pass  # the parent's checkpoint after its step holds the child's work

    return ChildAgent


def child_display(parent: Display, depth: int) -> Display:
    """What shows a sub-agent's events: the parent display's `child(depth)` where it has one (the terminal's
    indents the child's lines under the parent's: ui/display.py), else nothing."""
    make = getattr(parent, "child", None)
    return make(depth) if make is not None else Unseen()


# -- the tool ---------------------------------------------------------------------------------------

def delegate_tool(agent_class: type) -> Tool:
    """agent_delegate for agents of `agent_class` (the agent loop, `Loop`, or a subclass): the child is made from
    the class of the agent that calls it, so neither the tool nor this module imports the loop."""

    def run(args: dict[str, Any], ctx: ToolContext) -> Observation:
        if ctx.agent is None or ctx.call is None:
            raise BadCall("agent_delegate needs the agent that calls it")
        return delegate(ctx.agent, agent_class, ctx.call, ctx.step, args)  # type: ignore[arg-type] - the Loop

    def take_up(agent: Parent, call: ToolCall) -> Callable[[int], Observation] | None:
        """A child a crash cut off goes on where its log ends, if it got as far as having one."""
        child = open_child(agent.run_dir, call.id)
        if child is None:
            return None
        return lambda step: resume_delegate(agent, agent_class, child, step)

    return agent_delegate.tool(run, take_up)


def delegate(parent: Parent, agent_class: type, call: ToolCall, step: int, args: dict[str, Any]) -> Observation:
    """Runs agent_delegate for the agent `parent`, whose child is made from `agent_class` (the loop's
    Loop); BadCall for a call that cannot run."""
    depth = getattr(parent, "depth", 0) + 1
    allowed = parent.cfg.limits.delegate_depth
    if depth > allowed:
        if allowed == 0:
            raise BadCall("agent_delegate is turned off for this run (limits.delegate_depth is 0); do the work yourself")
        raise BadCall(f"a sub-agent cannot delegate further (limits.delegate_depth is {allowed}); "
                      "do this part of the task yourself")
    task = args["task"].strip()
    if not task:
        raise BadCall("agent_delegate needs a task: the sub-task, written out whole")
    cfg = parent.cfg.model_copy(update={"limits": child_limits(parent, _steps_argument(args.get("max_steps")))})
    run = _new_child_run(parent, call.id, step, task, cfg, depth)
    diff = WorkspaceDiff(parent.run_dir.top_run, run.root / "index.tmp")
    diff.start()
    run.update_meta(workspace_before=diff.before)
    return _run_child(parent, agent_class, run, cfg, depth, diff, step)


def resume_delegate(parent: Parent, agent_class: type, run: ChildRun, step: int) -> Observation:
    """The rest of an agent_delegate call a crash cut off: the child goes on where its log ends (or, if
    it had ended, its ending is read back), and the result is the one the call would have had."""
    meta = run.read_meta()
    cfg = safe_config(meta, run.id)  # as runner.load_config reads a run's stored config
    diff = WorkspaceDiff(parent.run_dir.top_run, run.root / "index.tmp")
    diff.resume(meta.get("workspace_before"))
    return _run_child(parent, agent_class, run, cfg, int(meta.get("depth") or getattr(parent, "depth", 0) + 1), diff, step,
                      resumed=True)


def _run_child(parent: Parent, agent_class: type, run: ChildRun, cfg: RunConfig, depth: int, diff: "WorkspaceDiff", step: int,
               resumed: bool = False) -> Observation:
    child = _child_agent_class(agent_class)(run, cfg, parent, depth)
    beside = CHILDREN_AT_ONCE.begin(parent.run_dir.top_run.root)
    try:
        if resumed and child.state.status != Status.RUNNING:
            status = child.state.status  # it had ended; only the parent's record of that was lost
        else:
            if resumed:
                child.recover()
            status = child.run()
    except Exception as exc:  # noqa: BLE001 - a bug in the child must not take the parent down
        reason = f"{type(exc).__name__}: {exc}"
        child.emit(ev.StatusChanged(step=child.state.step, status="failed", reason=reason))
        child.save_meta()
        status = "failed"
    except BaseException:  # a second Ctrl-C at the wrong moment: the parent stops at once
        diff.index.unlink(missing_ok=True)
        raise
    finally:
        others = CHILDREN_AT_ONCE.end(parent.run_dir.top_run.root, beside)
    changes = diff.finish()
    events, _torn = run.events.read()
    usage = child_usage(events)
    if usage["prompt_tokens"] or usage["completion_tokens"]:
        parent.emit(ev.ModelRequest(step=step, model=cfg.model.model, usage=usage, child=run.id))
    if status == Status.INTERRUPTED and not parent.stop_requested:
        parent.stop_requested = True
        parent.emit(ev.Notice(step=step, text="the sub-agent was interrupted: stopping after this step"))
    paths = written_paths(events, changes, cfg.sandbox.workdir)
    info = {"id": run.id, "path": run.path, "status": status, "steps": child.state.step, "paths": paths}
    text = result_text(events, status, child.state.step, paths, run.path, diff.error, cfg.sandbox.workdir, others)
    return Observation(text, error=status in (Status.BUDGET, Status.LOOPING, Status.INTERRUPTED, Status.FAILED), child=info)


def _steps_argument(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadCall(f"max_steps of agent_delegate must be a positive integer, not {value!r}")
    return value


def child_limits(parent: Parent, requested: int | None) -> LimitsConfig:
    """The child's step budget, and what is left of the parent's cost, token and time budgets."""
    limits, totals = parent.cfg.limits, parent.state.totals
    update: dict[str, Any] = {"max_steps": min(limits.child_max_steps, requested or limits.child_max_steps)}
    if limits.max_cost is not None and totals.cost_known:
        update["max_cost"] = limits.max_cost - totals.cost_usd
        if update["max_cost"] <= 0:
            raise BadCall("the run's cost budget is spent: there is none left for a sub-agent")
    if limits.max_tokens is not None:
        update["max_tokens"] = limits.max_tokens - totals.prompt_tokens - totals.completion_tokens
        if update["max_tokens"] <= 0:
            raise BadCall("the run's token budget is spent: there is none left for a sub-agent")
    if limits.max_wall_seconds is not None:
        update["max_wall_seconds"] = limits.max_wall_seconds - totals.elapsed()
        if update["max_wall_seconds"] <= 0:
            raise BadCall("the run's time budget is spent: there is none left for a sub-agent")
    return limits.model_copy(update=update)


def child_usage(events: list[Any]) -> dict[str, Any]:
    """The child's usage summed over its model calls (its own children's included)."""
    usage: dict[str, Any] = {key: 0 for key in USAGE_KEYS}
    cost: float | None = 0.0
    requests = 0
    for e in events:
        if isinstance(e, ev.ModelRequest):
            requests += int(e.usage.get("requests", 1) or 1)
            for key in USAGE_KEYS:
                usage[key] += e.usage.get(key, 0) or 0
            cost = None if cost is None or e.usage.get("cost_usd") is None else cost + e.usage["cost_usd"]
    usage["cost_usd"] = cost
    usage["requests"] = requests
    return usage

# -- what the child wrote ---------------------------------------------------------------------------

class WorkspaceDiff:
    """The workspace's git tree before and after the child, staged by the checkpoints' own code into a
    scratch index (a copy of the checkpoint index); the run's own index and refs are not touched."""

    def __init__(self, top: RunDir, index: Path) -> None:
        from orchestrator.store.checkpoints import Checkpoints

        self.checkpoints = Checkpoints(top.state / "checkpoints.git", top.workspace, index=index)
        self.index = index
        self.before: str | None = None
        self.error: str | None = None

    def _tree(self) -> str:
        self.checkpoints.stage()
        return self.checkpoints.git.write_tree()

    def start(self) -> None:
        try:
            self._copy_index()
            self.before = self._tree()
        except Exception as exc:  # noqa: BLE001 - without a diff, the calls' paths still tell something
            self._failed(exc)

    def resume(self, before: str | None) -> None:
        """Take up a diff a crash cut off, from the tree `start` had written down."""
        try:
            if not before:
                raise RuntimeError("the workspace's tree from before the sub-agent was not recorded")
            self._copy_index()
            self.before = before
        except Exception as exc:  # noqa: BLE001
            self._failed(exc)

    def _copy_index(self) -> None:
        if not self.checkpoints.exists():
            raise RuntimeError("the run has no checkpoint repository")
        if (self.checkpoints.git_dir / "index").is_file():
            shutil.copyfile(self.checkpoints.git_dir / "index", self.index)

    def _failed(self, exc: Exception) -> None:
        self.error = first_line(exc)
        self.index.unlink(missing_ok=True)

    def finish(self) -> list[tuple[str, str]] | None:
        """(git status letter, path) of every path that changed, or None when the diff could not be taken."""
        from orchestrator.store.checkpoints import tree_changes

        if self.before is None:
            return None
        try:
            return tree_changes(self.checkpoints.git, self.before, self._tree())
        except Exception as exc:  # noqa: BLE001
            self._failed(exc)
            return None
        finally:
            self.index.unlink(missing_ok=True)


def workspace_path(path: str, workdir: str = "/workspace") -> str | None:
    """A path as the tools take it, relative to the work directory; None for one outside it."""
    path = posixpath.normpath(path.strip())
    if path == workdir or path == ".":
        return None
    if path.startswith(workdir + "/"):
        path = path[len(workdir) + 1:]
    return None if path.startswith(("/", "../")) or path == ".." else path


def written_paths(events: list[Any], changes: list[tuple[str, str]] | None,
                  workdir: str = "/workspace") -> list[dict[str, str]]:
    """What the child changed: the workspace diff first, then the paths its writing calls name that the
    diff does not show."""
    kinds = {"A": "added", "M": "modified", "D": "deleted", "T": "modified"}
    out = [{"path": path, "change": kinds.get(letter, "modified")} for letter, path in sorted(changes or [],
           key=lambda c: c[1]) if not path.startswith(OWN_FILES)]
    seen = {p["path"] for p in out}
    started: dict[str, ev.ToolStarted] = {}
    for e in events:
        if isinstance(e, ev.ToolStarted) and e.name in WRITING_TOOLS:
            started[e.call_id] = e
        elif isinstance(e, ev.ToolFinished) and e.call_id in started and not e.error:
            s = started.pop(e.call_id)
            try:
                target = "todo.md" if s.name == "todo_write" else json.loads(s.arguments).get("path")
            except (ValueError, AttributeError):
                continue
            path = workspace_path(target, workdir) if isinstance(target, str) else None
            if path and path not in seen:
                seen.add(path)
                out.append({"path": path, "change": "written"})
    return out


def result_text(events: list[Any], status: str, steps: int, paths: list[dict[str, str]], log: str,
                diff_error: str | None, workdir: str = "/workspace", others: bool = False) -> str:
    ending = next((e for e in reversed(events) if isinstance(e, ev.StatusChanged)), None)
    reason = ending.reason if ending is not None else ""
    result = ending.result if ending is not None else None
    said = next((e.message.get("content") for e in reversed(events)
                 if isinstance(e, ev.AssistantMessage) and e.message.get("content")), None)
    why = f" ({reason})" if reason and status not in (Status.DONE, Status.STOPPED, Status.WAITING) else ""
    lines = [f"The sub-agent {ENDINGS.get(status, status)}{why} after {steps} step(s)."]
    if status == Status.DONE:
        lines.append(f"Its summary: {result or '(none)'}")
    elif status == Status.WAITING:
        lines.append(f"Its question: {result or '(none)'}")
    else:
        lines.append(f"Its last text: {result or said or '(none)'}")
    if paths:
        lines.append(f"Paths it wrote in {workdir}:")
        lines += [f"  {p['change']:<9}{p['path']}" for p in paths]
    else:
        lines.append(f"It changed no files in {workdir}.")
    if diff_error:
        lines.append(f"(the workspace diff could not be taken: {diff_error}; the paths are those its calls name)")
    elif others and paths:
        lines.append("(other sub-agents worked beside it: these paths may hold what they changed too)")
    lines.append(f"Its log: {log}/events.jsonl")
    return "\n".join(lines)
