"""What the report page shows beyond `walk`: when each step ran, what it changed, what the model was sent.

- **Times.** Every event carries `ts` (wall clock, when it was written). A tool call's start is its
  `tool_started` time and its length the `duration_ms` it measured; a model request's end is its
  `model_request` time and its start the event written just before it (the end of the previous step,
  a message, a compaction), so its length includes building the request and reading todo.md (a few ms).
- **Diffs.** Per step, `git diff` between the checkpoint before it and its own, without cairn's own
  files (changes.CAIRN_OWN), read no further than a per-step bound, and then fitted into a page bound.
- **Requests.** The messages of each model request are rebuilt by replaying the event log through the
  same `RunState` and `build_request` the loop uses (docs/design.md: the same events give the same request
  bytes). The tail is rebuilt too: todo.md as the checkpoint of the step before holds it (that is what
  the loop read), and the notices cairn derives from the log (the budget, the loop guard, a resume).

Reads only the state directory; imports no model library.
"""

from __future__ import annotations

import json
from typing import Any

from orchestrator import events as ev
from orchestrator.store.checkpoint_log import BATCH_BYTES, Change, CheckpointLog, StepCommit
from orchestrator.store.run_dir import RunDir

DIFF_STEP_BYTES = 48 * 1024  # of one step's diff, at most
DIFF_PAGE_BYTES = 3 * 1024 * 1024  # of all the steps' diffs together


# -- times ----------------------------------------------------------------------------------------


def step_times(events: list[Any]) -> dict[int, dict[str, Any]]:
    """Per step: `start` and `end` (epoch seconds), its model requests and tool calls as spans
    (`start`, `ms`), and `ms`, its length. A sub-agent's events are in its own log, so its calls show
    as the one agent_delegate call that ran it."""
    out: dict[int, dict[str, Any]] = {}
    previous: float | None = None
    for e in events:
        n = e.step
        if n > 0 and not isinstance(e, ev.StatusChanged):
            step = out.setdefault(n, {"start": previous if previous is not None else e.ts, "end": e.ts,
                                      "model": [], "tools": {}})
            step["end"] = max(step["end"], e.ts)
            if isinstance(e, ev.ModelRequest) and getattr(e, "child", None) is None and previous is not None:
                step["model"].append({"start": previous, "ms": max(0.0, (e.ts - previous) * 1000)})
            elif isinstance(e, ev.ToolStarted):
                step["tools"][e.call_id] = {"start": e.ts, "ms": None, "name": e.name, "error": False}
            elif isinstance(e, ev.ToolFinished) and e.call_id in step["tools"]:
                span = step["tools"][e.call_id]
                span["error"] = e.error
                span["ms"] = e.duration_ms if e.duration_ms is not None else (e.ts - span["start"]) * 1000
        previous = e.ts
    for step in out.values():
        step["ms"] = (step["end"] - step["start"]) * 1000
        step["tools"] = list(step["tools"].values())
    return out


def sessions(events: list[Any]) -> list[tuple[float, float]]:
    """The spans in which the run was running: from each `running` status to the status that ended it
    (or the last event). Between them the run was stopped, waiting, or had crashed."""
    spans: list[tuple[float, float]] = []
    start: float | None = None
    last = None
    for e in events:
        last = e.ts
        if isinstance(e, ev.StatusChanged):
            if e.status == "running" and start is None:
                start = e.ts
            elif e.status != "running" and start is not None:
                spans.append((start, e.ts))
                start = None
        elif start is None and e.step > 0 and not isinstance(e, ev.RunStarted):
            start = e.ts  # a log without a `running` status (an old cairn, a crash): the step is proof
    if start is not None and last is not None:
        spans.append((start, last))
    return spans


# -- diffs ----------------------------------------------------------------------------------------


def step_diffs(run: RunDir, steps: list[int], log: CheckpointLog | None) -> dict[int, dict[str, Any]]:
    """Per step that changed files: `text` (a unified diff, perhaps cut), `bytes` (its whole size, or at
    least DIFF_STEP_BYTES + 1 when git was stopped early), `cut` (a note when cut, else None).
    Empty for a run without checkpoints. Read from `log` (store/checkpoint_log.py): the steps whose changed
    blobs are small are diffed in one git process, each big one in a process stopped at the bound."""
    from orchestrator.ui.inspect.changes import CAIRN_OWN, EMPTY_TREE

    if log is None:
        return {}
    wanted = set(steps)
    commits = [c for c in log.commits if c.step in wanted and c.step > 0 and _own_changes(c)]
    sizes = log.blob_sizes({b for c in commits for ch in _own_changes(c) for b in (ch.old, ch.new) if b})
    small = [c for c in commits if sum(sizes.get(b, 0) + 100 for ch in _own_changes(c) for b in (ch.old, ch.new) if b)
             <= BATCH_BYTES]
    patches = log.patches([c.commit for c in small], CAIRN_OWN)
    out: dict[int, dict[str, Any]] = {}
    for c in commits:
        if c.commit in patches:
            whole = patches[c.commit]
            data = whole if len(whole) <= DIFF_STEP_BYTES else whole[: whole.rfind(b"\n", 0, DIFF_STEP_BYTES) + 1]
            text, size = data.decode("utf-8", "replace"), len(whole)
        else:
            before = c.parent or EMPTY_TREE
            text, size = _read_bounded(log.git, ["diff", "--no-color", "--no-ext-diff", "--no-textconv", "--find-renames",
                                                 before, c.commit, "--", *CAIRN_OWN], DIFF_STEP_BYTES)
        if text:
            out[c.step] = {"text": text, "bytes": size, "cut": None}
    _fit(out, DIFF_PAGE_BYTES)
    for n, d in out.items():
        if len(d["text"].encode()) < d["bytes"] or d["bytes"] > DIFF_STEP_BYTES:
            d["cut"] = (f"cut at {len(d['text'].encode()):,} bytes of "
                        f"{'over ' if d['bytes'] > DIFF_STEP_BYTES else ''}{d['bytes']:,}; "
                        f"`cairn diff {run.id} --step {n}` prints it whole")
    return out


def _own_changes(commit: StepCommit) -> list[Change]:
    """What a step changed, without cairn's own files (changes.CAIRN_OWN: `.cairn` at the top)."""
    return [ch for ch in commit.changes if ch.path != ".cairn" and not ch.path.startswith(".cairn/")]


def _read_bounded(g: Any, args: list[str], limit: int) -> tuple[str, int]:
    """git's output up to `limit` bytes (cut at a line's end), and how many bytes it had: git is
    stopped once it passed the limit, so a huge diff is never read whole."""
    proc = g.execute(["git", *args], as_process=True)
    chunks, size = [], 0
    try:
        while size <= limit:
            chunk = proc.stdout.read(64 * 1024)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:  # stopped early, git dies of SIGPIPE: that is the point, not an error
        proc.proc.kill()
        proc.proc.wait()
        proc.stdout.close()
    data = b"".join(chunks)
    if len(data) > limit:
        data = data[: data.rfind(b"\n", 0, limit) + 1]
    return data.decode("utf-8", "replace"), size


def _fit(diffs: dict[int, dict[str, Any]], budget: int) -> None:
    """Shortens the largest diffs until all fit in `budget` bytes: each gets an equal share, and what a
    small one leaves goes to the others."""
    sizes = {n: len(d["text"].encode()) for n, d in diffs.items()}
    if sum(sizes.values()) <= budget:
        return
    left, share = budget, 0
    pending = sorted(sizes, key=sizes.get)
    while pending:
        share = left // len(pending)
        if sizes[pending[0]] > share:
            break
        left -= sizes[pending.pop(0)]
    for n in pending:
        text = diffs[n]["text"].encode()[:share]
        diffs[n]["text"] = text[: text.rfind(b"\n") + 1].decode("utf-8", "replace")


# -- requests -------------------------------------------------------------------------------------


def rebuilt_requests(run: RunDir, events: list[Any], log: CheckpointLog | None = None) -> dict[str, Any]:
    """The messages of every model request of the run, rebuilt from its log: `messages`, each distinct
    message once, and `requests`, one per `model_request` event (`step`, `index` among the run's
    requests, `ranges` of message numbers, [first, count], in order). Shared prefixes are stored once,
    so 300 steps do not cost 300 copies of the history.

    Linear in the run: each history message is serialized once (the history's entries are never changed
    in place: a compaction puts new ones in, history.py), the history's numbers are kept as it grows,
    not gathered again for each request, and the tails (one per request) are numbered after all the
    history's messages, so that a request's history is one range and a request costs two."""
    from orchestrator.context import TokenCounter, render_tail
    from orchestrator.agent.guards import Finished, LoopGuard, budget_notice
    from orchestrator.agent.state import RunState
    from orchestrator.store.trust import safe_config

    cfg = safe_config(run.read_meta(), run.id)
    state = RunState(cfg.context, TokenCounter())
    todo = _TodoAt(run, log)
    numbers = _Numbers()
    requests: list[dict[str, Any]] = []
    tails: list[dict[str, Any]] = []
    guard, guarded, notices, sessions_seen = LoopGuard(), 0, [], 0
    for e in events:
        if isinstance(e, ev.StatusChanged) and e.status == "running":
            sessions_seen += 1
            if sessions_seen > 1:  # a new Agent: a fresh loop guard; `recover` tells the model of the resume
                guard = LoopGuard()
                if state.step:
                    notices.append("The run was resumed in a new sandbox: files in /workspace are intact; "
                                   "anything installed or started outside /workspace is gone.")
        if isinstance(e, ev.ModelRequest) and getattr(e, "child", None) is None:
            if guarded < state.step:  # the loop checks for repetition after each step's calls
                guarded = state.step
                try:
                    warning = guard.check(state.signatures)
                except Finished:
                    warning = None
                if warning:
                    notices.append(warning)
            said = [n for n in [budget_notice(cfg.limits, state.totals, e.step), *notices] if n]
            text, cut = todo.before(e.step)
            # The request as build_request makes it: the system prompt, the task, the history, the tail.
            head = [numbers.of({"role": "system", "content": state.system_prompt}),
                    numbers.of({"role": "user", "content": state.task})]
            history = numbers.history(state.history.entries)
            tails.append({"role": "user", "content": render_tail(text, said, cut)})
            requests.append({"step": e.step, "index": len(requests), "ranges": _join(_ranges(head), history),
                             "count": len(head) + sum(n for _, n in history) + 1, "recorded": e.messages})
            notices = []
        state.apply(e)
        if isinstance(e, ev.Compaction):
            numbers.compacted()
    for request, tail in zip(requests, tails):
        request["ranges"] = _join(request["ranges"], [[numbers.of(tail), 1]])
    return {"messages": numbers.messages, "requests": requests}


class _Numbers:
    """Each distinct message gets a number, its place in `messages`; the history's numbers are kept as
    ranges that grow with it."""

    def __init__(self) -> None:
        self.messages: list[Any] = []
        self.table: dict[str, int] = {}
        self.entries: list[Any] = []  # the history's entries numbered so far, and their ranges
        self.ranges: list[list[int]] = []

    def of(self, message: dict[str, Any]) -> int:
        key = json.dumps(message, sort_keys=True, ensure_ascii=False)
        if key not in self.table:
            self.table[key] = len(self.messages)
            self.messages.append(message)
        return self.table[key]

    def compacted(self) -> None:
        self.entries, self.ranges = [], []  # numbered again at the next request

    def history(self, entries: tuple[Any, ...]) -> list[list[int]]:
        """The ranges of the history's messages; only entries not seen before are serialized."""
        known = len(self.entries)
        if known > len(entries) or (known and entries[known - 1] is not self.entries[-1]):
            self.compacted()  # changed otherwise than by growing: number it again
            known = 0
        for entry in entries[known:]:
            self.entries.append(entry)
            k = self.of(entry.message)
            if self.ranges and self.ranges[-1][0] + self.ranges[-1][1] == k:
                self.ranges[-1][1] += 1
            else:
                self.ranges.append([k, 1])
        return [list(r) for r in self.ranges]


def _join(*parts: list[list[int]]) -> list[list[int]]:
    """Ranges one after the other, a range that goes on where the one before ends merged into it."""
    out: list[list[int]] = []
    for part in parts:
        for first, count in part:
            if out and out[-1][0] + out[-1][1] == first:
                out[-1] = [out[-1][0], out[-1][1] + count]
            else:
                out.append([first, count])
    return out


def _ranges(numbers: list[int]) -> list[list[int]]:
    return _join([[k, 1] for k in numbers])


class _TodoAt:
    """todo.md as the loop read it before a step: from the checkpoint of the step before, read the way
    the sandbox's toolbox reads it for the tail (the first TODO_MAX_BYTES, whole lines). All its versions
    are read at once, from the checkpoints' log."""

    def __init__(self, run: RunDir, log: CheckpointLog | None) -> None:
        self.log = log
        self.blob_at: dict[str, str | None] = {}  # commit -> todo.md's blob there
        blob = None
        for c in log.commits if log is not None else []:
            for change in c.changes:
                if change.path == "todo.md":
                    blob = change.new
            self.blob_at[c.commit] = blob
        self.contents = log.blobs({b for b in self.blob_at.values() if b}) if log is not None else {}
        self.workdir = "/workspace"
        try:
            self.workdir = run.read_meta()["config"]["sandbox"].get("workdir") or self.workdir
        except (KeyError, AttributeError, TypeError):
            pass

    def before(self, step: int) -> tuple[str | None, str | None]:
        from orchestrator.context import TODO_MAX_BYTES, todo_cut_note

        commit = self.log.at(step - 1) if self.log is not None else None
        blob = self.blob_at.get(commit.commit) if commit is not None else None
        data = self.contents.get(blob) if blob else None
        if data is None:
            return None, None
        if b"\0" in data[:8192]:
            return None, None  # the toolbox refuses a binary file; the loop then shows no plan
        lines = [line + b"\n" for line in data.split(b"\n")]  # as a file iterates: on \n only
        lines[-1] = lines[-1][:-1]
        if not lines[-1]:
            lines.pop()
        chunks, size, end = [], 0, 0
        for number, line in enumerate(lines, 1):
            if size + len(line) > TODO_MAX_BYTES:
                if not chunks:
                    chunks, end = [line[:TODO_MAX_BYTES]], number
                content = b"".join(chunks).decode("utf-8", "replace")
                return content, todo_cut_note(f"{self.workdir.rstrip('/')}/todo.md", end, len(lines))
            chunks.append(line)
            size += len(line)
            end = number
        return data.decode("utf-8", "replace"), None
