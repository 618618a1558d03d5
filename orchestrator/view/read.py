"""The one read model of a run: what every face shows (`ls`, `show`, `watch`, `report`, the web page, the
Python API, batch summaries, the Harbor agent), folded from the run's event log and its lock.

The status is the truth now, the same on every face: `running` while a process holds the run's lock
(from the moment `cairn run` or `cairn resume` takes it until that drive ends), else what the log last
said, and a run that went away mid-drive (a crash, a kill) is `interrupted`. run.json is not read for
the status at all: it holds the run's settings, its task and where it came from (`forked_from`).

The fold of the log is kept in `state/view.json` with the size of the log it covers, so a long run's log
is read once: a later read folds only what was appended since (measured: bench/ls_bench.py).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator import events as ev
from orchestrator.errors import UsageError
from orchestrator.status import Status, is_status
from orchestrator.store import run_meta
from orchestrator.store.liveness import run_is_live
from orchestrator.store.run_dir import RunDir
from orchestrator.view.fold import Fold
from orchestrator.view.live_output import SESSION_CALLS, SHELL_CALL, running_output

CACHE = "view.json"
FOLD_FORMAT = 2  # raised when what a fold keeps changes: a cache of another format is folded again
UNREADABLE = "unreadable"
CRASHED = "the cairn process ended without recording how (a crash or a kill); cairn resume continues it"

# The run.json fields a face reads, and the JSON types they must have when present.
_FIELDS: dict[str, tuple[type, ...]] = {"task": (str,), "status": (str,), "result": (str, type(None)),
                                        "steps": (int,), "usage": (dict, type(None)), "config": (dict,),
                                        "created": (int, float), "updated": (int, float),
                                        "forked_from": (dict, type(None)), "check": (dict, type(None))}


@dataclass
class RunView:
    """A run as it is now. `to_json()` is what `ls --json` gives for it; `show --json` adds its steps."""

    id: str
    task: str
    status: str
    reason: str | None  # why a run that did not finish ended, in one line; None when done or running
    result: str | None  # what its last drive ended with: task_done's summary, the question it asks, ...
    steps: int
    model: str | None
    created: float
    updated: float
    usage: dict[str, Any]
    check: dict[str, Any] | None  # the last check's verdict; `passed` None when it has not run yet
    forked_from: dict[str, Any] | None  # {"run", "step"}: the run and step it was forked from
    waiting: dict[str, Any] | None  # what it waits for: {"kind": "question", ...} or {"kind": "approval", ...}
    running: dict[str, Any] | None  # the call that runs now, with its output so far (a command, a session)
    live: bool  # a process drives it now

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "task": self.task, "status": self.status, "reason": self.reason,
                "result": self.result, "steps": self.steps, "model": self.model, "created": self.created,
                "updated": self.updated, "usage": self.usage, "check": self.check,
                "forked_from": self.forked_from, "waiting": self.waiting, "running": self.running,
                "live": self.live}


def read_view(run: RunDir, keep: bool = True, holding: bool = False) -> RunView:
    """The run as it is now. A run whose run.json or log cannot be read is `unreadable`, with why as its
    reason: it never stops a face from showing the others. `keep`: save the fold for the next reader.
    `holding`: this process holds the run's lock and is about to drive it (runs/resume.py): the run is
    what its last drive left."""
    live = not holding and run_is_live(run)  # first: a drive writes its end in the log before its lock goes
    meta: dict[str, Any] = {}
    problem: str | None = None
    try:
        meta = run.read_meta()
        problem = meta_problem(meta)
        fold = None if problem else fold_log(run, keep=keep)
    except UsageError as exc:
        problem, fold = exc.message.replace(f"run {run.id} has an unreadable ", ""), None
    except (ValidationError, ValueError) as exc:
        meta, problem, fold = {}, f"state/events.jsonl cannot be read ({_first(exc)})", None
    if fold is None:
        return _unreadable(run, meta, problem or "it cannot be read", live)
    try:
        return _view(run, meta, fold, live)
    except (AttributeError, TypeError, KeyError, ValueError, OverflowError) as exc:
        # A value no schema check foresaw: this run is unreadable, saying so, and every other is shown as usual.
        return _unreadable(run, meta, f"state/run.json or its event log holds a value cairn cannot show "
                                      f"({type(exc).__name__}: {str(exc)[:120]})", live)


def _view(run: RunDir, meta: dict[str, Any], fold: Fold, live: bool) -> RunView:
    status, reason, result = fold.status, None, fold.result
    if not fold.statuses and is_status(meta.get("status")) and meta["status"] != Status.RUNNING:
        status, result = meta["status"], meta.get("result")  # a log that never said: what run.json says
    if live:
        status = Status.RUNNING
    elif status == Status.RUNNING:
        status, reason = Status.INTERRUPTED, CRASHED
    else:
        reason = end_reason(status, fold.reason, result)
    running = dict(fold.running) if live and fold.running else None
    if running is not None and running["name"] in (SHELL_CALL, *SESSION_CALLS):
        running["output"] = running_output(run.cairn_dir, running)
    created = _number(meta.get("created"))
    return RunView(
        id=run.id, task=fold.task or meta.get("task") or "", status=status, reason=reason,
        result=None if status == Status.RUNNING else result, steps=fold.step,
        model=((meta.get("config") or {}).get("model") or {}).get("model"), created=created,
        updated=_updated(run, meta, created), usage=fold.totals(), check=_check(meta, fold),
        forked_from=_forked_from(meta), waiting=fold.waiting if status == Status.WAITING or live else None,
        running=running, live=live)


def fold_log(run: RunDir, keep: bool = True) -> Fold:
    """The fold of the run's whole log: the saved one taken up where it stopped, the rest read now. A torn
    last line is left for a resume to set aside, as the log's reader does. ValidationError on a line that
    is not an event."""
    path = run.events.path
    cached = _cached(run)
    start, fold = (cached if cached is not None else (0, Fold()))
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if start > size or (start and not _at_line_start(f, start)):
                start, fold = 0, Fold()  # the log was cut (a fork, a torn line set aside): read it again
            f.seek(start)
            data = f.read()
    except FileNotFoundError:
        return fold
    end = data.rfind(b"\n") + 1
    for number, line in enumerate(data[:end].split(b"\n")):
        if line.strip():
            try:
                fold.apply(ev.parse_event(line))
            except ValidationError as exc:
                before = _lines_before(path, start) + number + 1
                raise UsageError(f"state/events.jsonl line {before} is not an event ({_first(exc)})") from None
    if keep and end:
        _save(run, start + end, fold)
    return fold


def meta_problem(meta: dict[str, Any]) -> str | None:
    """What is wrong with a run.json that parsed, in a few words; None when the faces can read it (its
    schema, store/run_meta.py, which `cairn import` holds an archive to, and the fields a face reads)."""
    schema = run_meta.problem(meta)
    if schema:
        return schema
    for key, types in _FIELDS.items():
        if key in meta and (not isinstance(meta[key], types) or isinstance(meta[key], bool) and bool not in types):
            return f"state/run.json: {key} is {type(meta[key]).__name__}, not {types[0].__name__}"
    if not is_status(meta.get("status", Status.RUNNING)):
        return f"state/run.json: status {str(meta['status'])[:40]!r} is not a run status"
    if not isinstance(meta.get("config", {}).get("model", {}), dict):
        return "state/run.json: config.model is not an object"
    return None


def end_reason(status: str, said: str, result: str | None) -> str | None:
    """Why a run that did not finish ended, in one line; None for a run that is done or running."""
    if status in (Status.DONE, Status.RUNNING):
        return None
    if status == Status.WAITING and said.startswith("approval"):
        return f"waits for {' '.join(said.split())}"  # whole: a person decides from it
    if status == Status.WAITING:
        said = f"the agent asks: {result}" if result else "the agent waits for an answer"
    flat = " ".join(said.split())
    return (flat if len(flat) <= 300 else flat[:299] + "…") or f"the run ended as {status} without a recorded reason"


# -- the pieces ---------------------------------------------------------------------------------------

def _cached(run: RunDir) -> tuple[int, Fold] | None:
    try:
        with open(run.state / CACHE, "rb") as f:
            data = json.loads(f.read(1 << 20))
        if data.get("format") != FOLD_FORMAT:
            return None
        size, fold = data["events_size"], Fold.from_json(data["fold"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return (size, fold) if isinstance(size, int) and size >= 0 and fold is not None else None


def _save(run: RunDir, size: int, fold: Fold) -> None:
    """Best effort: a runs dir this process cannot write is read again next time, no worse."""
    try:
        fd, tmp = tempfile.mkstemp(dir=run.state, prefix=".view.", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump({"format": FOLD_FORMAT, "events_size": size, "fold": fold.to_json()}, f)
        os.replace(tmp, run.state / CACHE)
    except OSError:
        pass


def _lines_before(path: Path, offset: int) -> int:
    with open(path, "rb") as f:
        return f.read(offset).count(b"\n")


def _at_line_start(f: Any, offset: int) -> bool:  # noqa: ANN401 - an open binary file
    f.seek(offset - 1)
    return f.read(1) == b"\n"


def _unreadable(run: RunDir, meta: dict[str, Any], why: str, live: bool) -> RunView:
    task = meta.get("task") if isinstance(meta.get("task"), str) else ""
    return RunView(id=run.id, task=task, status=UNREADABLE, reason=why, result=None, steps=0, model=None,
                   created=_number(meta.get("created")), updated=_number(meta.get("updated")),
                   usage={"prompt_tokens": 0, "cached_tokens": 0, "completion_tokens": 0, "cost_usd": None,
                          "cache_hit_ratio": 0.0},
                   check=None, forked_from=None, waiting=None, running=None, live=live)


def _check(meta: dict[str, Any], fold: Fold) -> dict[str, Any] | None:
    """The last check's verdict; for a run with a check that has not run yet, its command with `passed`
    null; None for a run without a check."""
    if fold.check is not None:
        return dict(fold.check)
    command = ((meta.get("config") or {}).get("check") or {}).get("command")
    return {"command": command, "passed": None, "exit_code": None, "output_path": None} if command else None


def _forked_from(meta: dict[str, Any]) -> dict[str, Any] | None:
    source = meta.get("forked_from")
    if isinstance(source, dict) and isinstance(source.get("run"), str) and isinstance(source.get("step"), int):
        return {"run": source["run"], "step": source["step"]}
    return None


def _updated(run: RunDir, meta: dict[str, Any], created: float) -> float:
    """When the run last did something: its log's last write (run.json's own time for a run with none)."""
    try:
        return os.stat(run.events.path).st_mtime
    except OSError:
        return _number(meta.get("updated")) or created or time.time()


def _number(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def _first(exc: BaseException) -> str:
    if isinstance(exc, ValidationError):
        return exc.errors()[0]["msg"][:80]
    return str(exc).splitlines()[0][:80] if str(exc) else type(exc).__name__


def views(runs_dir: Path) -> list[RunView]:
    """Every run's view, oldest first."""
    found = [read_view(run) for run in RunDir.all(runs_dir)]
    return sorted(found, key=lambda v: (v.created, v.id))
