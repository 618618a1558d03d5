"""`cairn resume RUN --from-step N`: a new run that starts where RUN was at the end of step N.

The fork's workspace is the checkpoint of step N (the nearest earlier one when step N changed nothing).
Its event log is a byte-for-byte prefix of RUN's, so replay gives the same history, the same message ids
and so the same request bytes; only the tail after step N's last action is trimmed:

- The prefix ends at the first event of a later step (the model call, compaction or inbox message of
  step N+1 all carry N+1).
- After step N's last action (its model call, answer and tool results), only checkpoint events and
  notices are kept. Dropped: the run's closing status and any user message given after step N (a
  `--message` on resume, an interactive reply): they belong to step N+1, and the fork may get its own.
  Nothing is dropped from the middle, because history ids count events.
- Two events are added: a notice that says where the fork came from, and a status that makes it
  resumable: `waiting` (with the question) when step N asked the person, else `interrupted`.
- Calls of step N that have no result (the run crashed in them) get the usual "not executed" results
  when the fork is resumed (`Loop.recover`).

A fork always has its own `workspace/`, also when the source worked on a folder in place (`--workspace`):
that folder is never written. `state/checkpoints.git` is copied with the later steps' refs removed, `state/inbox.jsonl` up to what the
kept events delivered, and `run.json` records `forked_from: {run, step}`. Skipped trees (node_modules, big
files) are not in checkpoints and so not in the fork; the notice says so.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.errors import UsageError
from orchestrator import events as ev
from orchestrator.store import inbox, run_files
from orchestrator.store.checkpoints import BRANCH, STEP_REF, Checkpoints, make_git
from orchestrator.store.run_dir import RunDir
from orchestrator.status import Status

ACTIONS = ("model_request", "assistant_message", "tool_started", "tool_finished", "compaction")
TAIL_KEPT = ("checkpoint", "notice")
RUN_SPECIFIC = ("id", "created", "updated", "status", "steps", "result", "usage", "check", "forked_from")


@dataclass
class ForkPlan:
    source: RunDir
    step: int
    lines: list[bytes]  # the event lines the fork keeps, as they are in the source
    events: list[Any]
    commit: str
    commit_step: int
    status: str  # "interrupted" or "waiting"
    result: str | None  # the question, when waiting


def plan_fork(source: RunDir, step: int) -> ForkPlan:
    """Everything the fork will hold, worked out without writing anything."""
    data = source.events.path.read_bytes() if source.events.path.exists() else b""
    lines = [line for line in data.split(b"\n")[:-1] if line.strip()]  # a torn last line is not kept
    events = [ev.parse_event(line) for line in lines]
    last = max((e.step for e in events), default=0)
    if not events or events[0].type != "run_started":
        raise UsageError(f"run {source.id} has no readable event log")
    if step < 0 or step > last:
        raise UsageError(f"run {source.id} has steps 0 to {last}; there is no step {step}")
    cut = next((i for i, e in enumerate(events) if e.step > step), len(events))
    end = max([0] + [i for i in range(cut) if events[i].type in ACTIONS])
    kept = list(range(end + 1)) + [i for i in range(end + 1, cut) if events[i].type in TAIL_KEPT]
    closing = [events[i] for i in range(end + 1, cut) if events[i].type == "status" and events[i].status != Status.RUNNING]
    status, result = "interrupted", None
    if closing and closing[-1].status == Status.WAITING:
        status, result = "waiting", closing[-1].result
    cp = Checkpoints.of(source)
    steps = cp.steps()
    commit = cp.commit_at(step, steps)
    if commit is None:
        raise UsageError(f"run {source.id} has no checkpoint at or before step {step}",
                         hint="runs made before checkpoints existed cannot be forked")
    commit_step = max(n for n in steps if n <= step)
    return ForkPlan(source, step, [lines[i] for i in kept], [events[i] for i in kept], commit, commit_step,
                    status, result)


def fork_run(plan: ForkPlan, runs_dir: Path) -> RunDir:
    source = plan.source
    meta = {k: v for k, v in source.read_meta().items() if k not in RUN_SPECIFIC}
    fork = RunDir.create(runs_dir, {**meta, "status": plan.status, "steps": plan.step, "result": plan.result,
                                    "forked_from": {"run": source.id, "step": plan.step}})
    _copy_checkpoints(source, fork, plan)
    if source.cairn_dir.is_dir():
        # cairn's files (/cairn) are outside the workspace, so not in its checkpoints: copy them as they are,
        # so that the pointers in the kept history still find their files.
        # By descriptor (store/run_files.py): the sandbox wrote them, and links stay links.
        run_files.copy_tree(source.cairn_dir, fork.cairn_dir, links=True)
    with open(fork.events.path, "wb") as f:
        f.write(b"".join(line + b"\n" for line in plan.lines))
    _copy_inbox(source, fork, inbox.delivered_offset(plan.events))
    skipped = Checkpoints.of(source).skipped()
    where = (f"the checkpoint of step {plan.commit_step}" if plan.commit_step == plan.step else
             f"the checkpoint of step {plan.commit_step} (steps {plan.commit_step + 1} to {plan.step} changed nothing)")
    note = f"forked from run {source.id} at step {plan.step}: the workspace is {where}"
    if skipped:
        note += "; not restored, since checkpoints skip them: " + ", ".join(sorted(skipped)[:10])
    fork.events.append(ev.Notice(step=plan.step, text=note))
    fork.events.append(ev.StatusChanged(step=plan.step, status=plan.status, reason=f"forked from {source.id}",
                                        result=plan.result))
    fork.update_meta(updated=time.time())
    return fork


def _copy_checkpoints(source: RunDir, fork: RunDir, plan: ForkPlan) -> None:
    src, dst = Checkpoints.of(source).git_dir, Checkpoints.of(fork).git_dir
    shutil.copytree(src, dst, symlinks=True,
                    ignore=shutil.ignore_patterns("index", "index.lock", "cairn-skipped.json", "*.lock"))
    g = make_git(dst)
    later = [n for n in Checkpoints(dst, fork.workspace).steps() if n > plan.step]
    commands = "".join(f"delete {STEP_REF}{n}\n" for n in later) + f"update {BRANCH} {plan.commit}\n"
    with tempfile.TemporaryFile() as f:
        f.write(commands.encode())
        f.seek(0)
        g.update_ref("--stdin", istream=f)
    # A fresh index and the files of that commit in the (empty) new workspace.
    make_git(dst, fork.workspace).read_tree("--reset", "-u", plan.commit)


def _copy_inbox(source: RunDir, fork: RunDir, offset: int) -> None:
    """`cairn say` messages are found by byte offset: the fork keeps the part its events delivered."""
    path = inbox.inbox_path(source.state)
    if offset and path.exists():
        with open(path, "rb") as f:
            inbox.inbox_path(fork.state).write_bytes(f.read(offset))
