"""`cairn batch FILE.jsonl`: many runs at once, each in its own sandbox, resumable as a whole.

One JSON object a line (CONTRACTS.md): `task` (required), `model`, `api_base`, `template`, `image`,
`workdir`, `check` (a command, or an object of check settings: `{"command": ..., "rounds": 2}`),
`settings` (a JSON file of run settings, as `cairn run --settings`; relative to the batch file),
`max_steps`, `max_cost`, `approve` (never, outside or always: which tool calls wait for a person; a
run that waits is left `waiting`, answered by `cairn approve RUN`). A line's settings: built-in
defaults < its template's cairn.json < `cairn batch --api-base` < its settings file < its own keys.
Blank lines are ignored. Every line is checked before
anything starts; a bad one is a usage error that names its line number.

Runs go N at a time in worker threads of this process: the loop waits on the model and on the
sandbox, so threads are enough, and they share one litellm import (~185 MB of RSS and 3-20 s a process,
measured by bench/batch_bench.py).

A batch manifest, `<runs-dir>/batches/<hash of the file's path>.json`, maps each line to its run, keyed
by a hash of the line's content (and its occurrence, for repeated lines). Running the same file again:
- a `done` run is skipped (one whose check failed is left, below);
- an `interrupted` run (Ctrl-C) or a crashed one (`running` with no live process) is resumed;
- a run that ended otherwise (`failed`, `stopped`, `waiting`, `budget`, `looping`, or `done` with its check
  failed) is left as it is and reported: it needs a person (`cairn resume RUN ...`);
- a line that is new or changed gets a new run.

Ctrl-C (or SIGTERM) stops every run between actions (each becomes `interrupted`, resumable by running
the batch again) and starts no new ones; a second one stops at once (runs are left crashed, also
resumable). The exit code is then 130 either way.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from pydantic import ValidationError

from orchestrator.config import RunConfig
from orchestrator.new_run import progress_to
from orchestrator.errors import CairnError, SandboxError, UsageError
from orchestrator.store import events as ev
from orchestrator.store.runs import RunDir
from orchestrator.terminal import clean, json_text
from orchestrator.status import Status

LINE_KEYS = {"task", "model", "api_base", "template", "image", "workdir", "check", "settings", "max_steps", "max_cost",
             "approve"}
RESUMABLE = ("interrupted",)  # and `running` runs whose process is gone (crashed)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)  # both stop every run between actions


@dataclass
class Job:
    line: int  # 1-based line number in the file
    key: str  # hash of the line's content, with its occurrence
    task: str
    cfg: RunConfig


@dataclass
class Row:
    """One run of the batch, as the live table and the summary show it."""

    line: int
    task: str
    id: str | None = None
    action: str = "pending"  # started, resumed, skipped, left (ended otherwise), pending (never started)
    status: str = "pending"
    step: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = 0.0
    result: str | None = None
    error: str | None = None
    seconds: float | None = None
    check: dict[str, Any] | None = None  # the run's last check (--check): command, passed, exit_code, output_path
    ray: bool = False  # a run of a batch on Ray (batch_ray.py): its rows say where it ran
    node: str | None = None  # the Ray node it runs (or ran) on
    notes: list[str] = field(default_factory=list)  # what happened on the way: a node lost, the run taken up

    @property
    def ok(self) -> bool:
        """Done, and its check passed when it has one."""
        return self.status == Status.DONE and (self.check is None or self.check.get("passed") is not False)

    def doc(self) -> dict[str, Any]:
        return {"line": self.line, "id": self.id, "task": self.task, "action": self.action, "status": self.status,
                "steps": self.step, "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "tokens": self.prompt_tokens + self.completion_tokens, "cost_usd": self.cost_usd,
                "result": self.result, "error": self.error, "seconds": self.seconds, "check": self.check,
                **({"node": self.node, "notes": self.notes} if self.ray else {})}


# -- the file ---------------------------------------------------------------------------------------


def parse_file(path: Path, api_base: str | None = None) -> list[Job]:
    """Every line checked; raises UsageError naming the first bad line. Nothing is started here.
    `api_base` (`cairn batch --api-base`) is the endpoint of the lines that name none."""

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read the batch file {path}: {exc}") from None
    jobs: list[Job] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        where = f"{path.name} line {number}"
        try:
            item = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{where}: not JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(item, dict):
            raise UsageError(f"{where}: must be a JSON object, like {{\"task\": \"...\"}}")
        unknown = sorted(set(item) - LINE_KEYS)
        if unknown:
            raise UsageError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(LINE_KEYS))})")
        task = item.get("task")
        if not isinstance(task, str) or not task.strip():
            raise UsageError(f"{where}: \"task\" is required and must be a non-empty string")
        cfg = _line_config(item, path.parent, where, api_base)
        digest = hashlib.sha256(json.dumps(item, sort_keys=True).encode()).hexdigest()[:16]
        seen[digest] = seen.get(digest, 0) + 1
        jobs.append(Job(number, f"{digest}#{seen[digest]}", task, cfg))
    if not jobs:
        raise UsageError(f"the batch file {path} has no tasks")
    return jobs


def _line_config(item: dict[str, Any], base: Path, where: str, api_base: str | None) -> RunConfig:
    """The run settings of one line (its layers are in this module's docstring)."""
    from orchestrator.runner import resolve_config, settings_file

    layers = [{"model": {"api_base": api_base}}] if api_base else []
    check = item.get("check")
    if not isinstance(item.get("template", ""), str):
        raise UsageError(f"{where}: \"template\" must be the name of a workspace template")
    try:
        if item.get("settings") is not None:
            if not isinstance(item["settings"], str) or not item["settings"].strip():
                raise UsageError("\"settings\" must be the path of a JSON file of settings")
            layers.append(settings_file(base / item["settings"], "settings file"))
        cfg = resolve_config({
            "model": {"model": item.get("model"), "api_base": item.get("api_base")},
            "limits": {"max_steps": item.get("max_steps"), "max_cost": item.get("max_cost")},
            "sandbox": {"image": item.get("image"), "workdir": item.get("workdir")},
            "check": check if isinstance(check, dict) else {"command": check},
            "approvals": {"mode": item.get("approve")},
        }, template=item.get("template"), layers=layers)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise UsageError(f"{where}: invalid {'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from None
    except UsageError as exc:  # a bad template or settings file, or no model anywhere
        raise UsageError(f"{where}: {exc.message}", hint=exc.hint) from None
    if cfg.model.model.startswith("scripted:"):
        cfg.model.model = _scripted_model(cfg.model.model, base, where)
    return cfg


def _scripted_model(model: str, base: Path, where: str) -> str:
    """A relative script path is relative to the batch file; the run stores it absolute, for resume."""
    from orchestrator.llm.scripted import load_script

    spec = model[len("scripted:"):]
    beside = base / spec
    if not Path(spec).is_absolute() and beside.is_file():
        spec = str(beside.resolve())
    try:
        load_script(spec)
    except UsageError as exc:
        raise UsageError(f"{where}: {exc.message}") from None
    return f"scripted:{spec}"


# -- the manifest -----------------------------------------------------------------------------------


class Manifest:
    """`<runs-dir>/batches/<hash>.json`: line key → run id, written atomically after every change."""

    def __init__(self, runs_dir: Path, batch_file: Path) -> None:
        resolved = str(batch_file.resolve())
        self.id = hashlib.sha256(resolved.encode()).hexdigest()[:16]
        self.path = runs_dir / "batches" / f"{self.id}.json"
        self.lock = threading.Lock()
        self.doc: dict[str, Any] = {"file": resolved, "runs": {}}
        if self.path.is_file():
            try:
                self.doc = json.loads(self.path.read_text())
            except (OSError, json.JSONDecodeError) as exc:
                raise UsageError(f"the batch manifest {self.path} is unreadable ({exc})") from None

    def run_of(self, key: str) -> str | None:
        return self.doc["runs"].get(key, {}).get("id")

    def record(self, key: str, line: int, run_id: str) -> None:
        with self.lock:
            self.doc["runs"][key] = {"id": run_id, "line": line}
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(self.doc, indent=2, sort_keys=True))
            os.replace(tmp, self.path)


# -- running ----------------------------------------------------------------------------------------


class RowDisplay:
    """The Display of one run's Agent: keeps that run's row up to date (read by the live table)."""

    def __init__(self, row: Row) -> None:
        self.row = row

    def event(self, event: ev.Event, state: Any) -> None:
        t = state.totals
        self.row.step = state.step
        self.row.prompt_tokens, self.row.completion_tokens = t.prompt_tokens, t.completion_tokens
        self.row.cost_usd = t.cost_usd if t.cost_known else None
        if isinstance(event, ev.StatusChanged):
            self.row.status = event.status
        elif isinstance(event, ev.ToolStarted):
            self.row.status = f"running: {event.name}"
        elif isinstance(event, ev.ToolFinished):
            self.row.status = "running"
        elif isinstance(event, ev.Notice) and getattr(event, "kind", None) == "model_retry":
            self.row.status = f"running: {event.text.split(':', 1)[0]}"  # "retry 2/6 in 8 s"

    def close(self) -> None:
        pass


class Batch:
    def __init__(self, batch_file: Path, runs_dir: Path, jobs: int = 4,
                 on_end: Callable[[Row], None] | None = None, api_base: str | None = None) -> None:
        # Absolute: the checkpoints' git is run from elsewhere, and a relative path would break it.
        self.file, self.runs_dir, self.jobs = batch_file, runs_dir.resolve(), max(1, jobs)
        self.todo = parse_file(batch_file, api_base)  # raises UsageError before anything starts
        self.manifest = Manifest(runs_dir, batch_file)
        self.rows = [Row(j.line, j.task) for j in self.todo]
        self.on_end = on_end or (lambda row: None)
        self.sessions: dict[int, Any] = {}  # row index → live Session
        self.stopping = threading.Event()
        self.interrupted = False
        self._sigints = 0
        self.stopped_by: str | None = None  # "Ctrl-C" or "SIGTERM"

    # The plan: what each line needs

    def plan(self) -> list[tuple[int, RunDir | None]]:
        """(row index, existing run to resume or None for a new one) for each line that has work to do;
        rows of lines that need none are filled in as skipped or left."""
        from orchestrator.store.liveness import RunIsLive

        work: list[tuple[int, RunDir | None]] = []
        for i, job in enumerate(self.todo):
            run_id = self.manifest.run_of(job.key)
            run = RunDir(self.runs_dir / run_id) if run_id else None
            if run is None or not run.meta_path.is_file():
                work.append((i, None))
                continue
            meta = run.read_meta()
            status = meta.get("status", "running")
            row = self.rows[i]
            row.id = run.id
            if status in RESUMABLE or status == Status.RUNNING:
                try:
                    run.hold()  # this batch drives it from now on; the lock goes when its session ends
                except RunIsLive:
                    self._fill(row, run, "skipped")
                    row.status = "running"
                    row.error = "running in another process"
                    continue
                work.append((i, run))
            else:
                self._fill(row, run, "left")
                if row.ok:
                    row.action = "skipped"
        return work

    def run(self) -> list[Row]:
        work = self.plan()
        if work:
            from orchestrator.llm.client import litellm_module

            litellm_module()  # imported once, here, not in N threads at once
            from orchestrator.sandbox.image import ensure_image

            self.preflight(work)
            ensure_image()  # built once, before the workers, which then find it
        pending: queue.Queue = queue.Queue()
        for item in work:
            pending.put(item)
        workers = [threading.Thread(target=self._worker, args=(pending,), daemon=True, name=f"cairn-batch-{n}")
                   for n in range(min(self.jobs, len(work)))]
        main = threading.current_thread() is threading.main_thread()
        previous = {sig: signal.signal(sig, self._on_stop_signal) for sig in STOP_SIGNALS} if main else {}
        quiet = progress_to(None)  # "starting the sandbox" of N runs at once would name none of them: rows say it
        try:
            for w in workers:
                w.start()
            for w in workers:
                while w.is_alive():
                    w.join(0.2)  # a timeout, so that Ctrl-C is handled promptly
        finally:
            progress_to(quiet)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return self.rows

    def preflight(self, work: list[tuple[int, RunDir | None]]) -> None:
        """Each model, key and endpoint the work needs, before any run is made or sandbox started
        (llm/preflight.py); a bad one is a usage error that names its line."""
        from orchestrator.critic import preflight_critic
        from orchestrator.llm.preflight import preflight
        from orchestrator.runner import load_config

        checked: set[tuple[str | None, ...]] = set()
        for index, run in work:
            cfg = load_config(run) if run is not None else self.todo[index].cfg
            key = (cfg.model.model, cfg.model.api_base, cfg.critic.model, cfg.critic.api_base)
            if key in checked:
                continue
            try:
                preflight(cfg.model, key_elsewhere=cfg.mcp.api_key_in_file)
                preflight_critic(cfg)  # --critic-model, in a line's settings
            except UsageError as exc:
                raise UsageError(f"line {self.todo[index].line}: {exc.message}", hint=exc.hint) from None
            checked.add(key)

    def _worker(self, pending: queue.Queue) -> None:
        while not self.stopping.is_set():
            try:
                index, run = pending.get_nowait()
            except queue.Empty:
                return
            self._one(index, run)

    def _one(self, index: int, run: RunDir | None) -> None:
        from orchestrator.runner import Session, create_run, load_config, mark_failed

        job, row = self.todo[index], self.rows[index]
        started = time.monotonic()
        try:
            if run is None:
                run = create_run(self.runs_dir, job.task, job.cfg)
                self.manifest.record(job.key, job.line, run.id)
                row.action, cfg = "started", job.cfg
            else:
                row.action, cfg = "resumed", load_config(run)
            row.id, row.status = run.id, "starting"
            with Session(run, cfg, RowDisplay(row), resumed=row.action == "resumed") as session:
                self.sessions[index] = session
                if self.stopping.is_set():
                    session.agent.stop_requested, session.agent.stopped_by = True, self.stopped_by
                session.go()
                if session.agent.error is not None:
                    row.error = session.agent.error.message
        except Exception as exc:  # noqa: BLE001 - one run failing must not stop the others
            row.error = exc.message if isinstance(exc, CairnError) else f"{type(exc).__name__}: {exc}"
            if run is not None:
                try:
                    mark_failed(run, row.error)
                except Exception:  # noqa: BLE001 - the state dir itself may be the problem
                    pass
            if not isinstance(exc, (CairnError, SandboxError)):
                import traceback

                traceback.print_exc(file=sys.stderr)
        finally:
            if run is not None:
                run.release()  # a session releases it as it ends; a run whose session never began, here
            self.sessions.pop(index, None)
            row.seconds = round(time.monotonic() - started, 2)
        if run is not None:
            self._fill(row, run, row.action)
        self.on_end(row)

    def _fill(self, row: Row, run: RunDir, action: str) -> None:
        """The row from the run's own record (run.json), as `cairn ls` reads it."""
        meta = run.read_meta()
        usage = meta.get("usage") or {}
        row.action, row.id = action, run.id
        row.status = meta.get("status", "running")
        row.step = meta.get("steps", row.step)
        row.prompt_tokens = usage.get("prompt_tokens", row.prompt_tokens)
        row.completion_tokens = usage.get("completion_tokens", row.completion_tokens)
        row.cost_usd = usage.get("cost_usd", row.cost_usd) if usage else row.cost_usd
        row.result = meta.get("result")
        row.check = meta.get("check")
        if row.status not in (Status.DONE, Status.RUNNING) and not row.error:  # every end but done says why
            row.error = _end_reason(run, row.status, row.result)

    def _on_stop_signal(self, signum: int, frame: Any) -> None:
        """Ctrl-C or SIGTERM: every run stops after its current action; the second one stops at once."""
        name = self.stopped_by = "Ctrl-C" if signum == signal.SIGINT else "SIGTERM"
        self._sigints += 1
        self.interrupted = True
        self.stopping.set()
        if self._sigints == 1:
            for session in list(self.sessions.values()):
                session.agent.stop_requested = True  # the loop checks it after the current action
                session.agent.stopped_by = name
                session.agent.model.cancel()  # a model request is not worth finishing: it stops now
            sys.stderr.write(f"cairn: {name}: stopping every run after its current action "
                             f"({name} again to stop at once)\n")
            return
        for session in list(self.sessions.values()):  # at once: the runs are left crashed (resumable)
            try:
                session.sandbox.stop()
            except Exception:  # noqa: BLE001
                pass
        raise KeyboardInterrupt


def _end_reason(run: RunDir, status: str, result: str | None) -> str | None:
    """The one-line reason `cairn show` gives for the run's end (inspect/timeline.end_error)."""
    from orchestrator.inspect.timeline import end_error

    for event in reversed(run.events.read()[0]):
        if isinstance(event, ev.StatusChanged):
            error = end_error(status, result, {"reason": event.reason, "index": None, "type": event.type,
                                               "step": event.step})
            return error["reason"] if error else None
    return None


# -- what a person sees -----------------------------------------------------------------------------


def summary_doc(batch: Batch) -> dict[str, Any]:
    rows = [r.doc() for r in batch.rows]
    costs = [r["cost_usd"] for r in rows]
    return {
        "file": str(batch.file.resolve()),
        "batch": batch.manifest.id,
        "runs": rows,
        "totals": {
            "runs": len(rows),
            "done": sum(r.ok for r in batch.rows),  # done, and its check passed where it has one
            "checks_passed": sum(bool(r["check"] and r["check"]["passed"]) for r in rows),
            "checks_failed": sum(bool(r["check"] and r["check"]["passed"] is False) for r in rows),
            "steps": sum(r["steps"] for r in rows),
            "tokens": sum(r["tokens"] for r in rows),
            "cost_usd": None if any(c is None for c in costs) else round(sum(costs), 6),
        },
        "interrupted": batch.interrupted,
        "exit_code": exit_code(batch),
    }


def exit_code(batch: Batch) -> int:
    """0 when every run is done (and its check passed, where it has one), 130 when Ctrl-C or SIGTERM
    stopped the batch, else 1."""
    if batch.interrupted:
        return 130
    return 0 if all(r.ok for r in batch.rows) else 1


def _money(cost: float | None) -> str:
    return f"${cost:.4f}" if cost is not None else "-"


def _one_line(text: str | None, width: int) -> str:
    """A task, a status or an error on one line, cleaned of control sequences for the terminal."""
    return " ".join(clean(text).split())[:width]


def table(rows: list[Row], title: str | None = None):  # noqa: ANN201 - rich.table.Table
    from rich.table import Table

    t = Table(title=title, title_justify="left", expand=False)
    on_ray = any(r.ray for r in rows)
    for name, justify in (("#", "right"), ("id", "left"), ("task", "left"), *((("node", "left"),) if on_ray else ()),
                          ("status", "left"), ("check", "left"), ("steps", "right"), ("tokens", "right"),
                          ("cost", "right"), ("note", "left")):
        t.add_column(name, justify=justify, no_wrap=True, overflow="ellipsis",
                     min_width=22 if name == "id" else None, max_width={"task": 40, "note": 40}.get(name))
    for r in rows:
        note = r.action if r.action in ("skipped", "resumed", "left") else ""
        if r.error:
            note = (note + ": " if note else "") + _one_line(r.error, 60)
        t.add_row(str(r.line), r.id or "-", _one_line(r.task, 40), *((r.node or "-",) if on_ray else ()),
                  _one_line(r.status, 40), _check_word(r), str(r.step),
                  f"{r.prompt_tokens + r.completion_tokens:,}", _money(r.cost_usd), note)
    return t


def _check_word(row: Row) -> str:
    from orchestrator.inspect.listing import check_word

    return check_word(row.check) or "-"


def render_summary(rows: list[Row]) -> str:
    """The summary as plain text, one line a run (like `cairn ls`), whatever the width of the output."""
    on_ray = any(r.ray for r in rows)
    node = lambda text: f"{text:<9} " if on_ray else ""  # noqa: E731 - the NODE column of a batch on Ray
    lines = [f"{'LINE':>4}  {'ID':<23} {node('NODE')}{'STATUS':<11} {'CHECK':<6} {'STEPS':>5} {'TOKENS':>9} {'COST':>9}  "
             f"{'ACTION':<8} TASK"]
    for r in rows:
        lines.append(f"{r.line:>4}  {r.id or '-':<23} {node(r.node or '-')}{_one_line(r.status, 40):<11} "
                     f"{_check_word(r):<6} {r.step:>5} {r.prompt_tokens + r.completion_tokens:>9,} "
                     f"{_money(r.cost_usd):>9}  {r.action:<8} {_one_line(r.task, 60)}")
        if r.error or (r.id and not r.ok and r.status != "pending"):
            why = _one_line(r.error, 200) if r.error else ("its check failed" if r.status == "done" else r.status)
            lines.append(f"{'':>6}{'error' if r.error else 'not done'}: {why} · cairn show {r.id}"
                         if r.id else f"{'':>6}error: {why}")
        lines += [f"{'':>6}note: {_one_line(n, 300)}" for n in r.notes]
    return "\n".join(lines)


def run_batch(batch_file: Path, runs_dir: Path, jobs: int | None, json_output: bool, api_base: str | None = None,
              make: Callable[..., "Batch"] | None = None) -> int:
    """The `cairn batch` command: returns its exit code. `make` builds the batch, like Batch(batch_file,
    runs_dir, jobs, on_end=..., api_base=...): batch_ray.ray_batch gives one that runs on Ray."""
    from rich.console import Console
    from rich.live import Live

    err = Console(stderr=True, soft_wrap=True)  # piped, a line stays whole
    live_table = not json_output and err.is_terminal

    def ended(row: Row) -> None:
        if not json_output and not live_table:
            check = f", check {_check_word(row)}" if row.check else ""
            node = f" on node {row.node}" if row.node else ""
            err.print(f"line {row.line}: run {row.id}{node} {row.status}{check}" + (f" ({_one_line(row.error, 300)})" if row.error else ""),
                      highlight=False, markup=False)

    batch = (make or Batch)(batch_file, runs_dir, jobs or 4, on_end=ended, api_base=api_base)
    title = f"batch {batch_file.name} · " + getattr(batch, "where", f"{batch.jobs} at a time")
    if live_table:
        with Live(get_renderable=lambda: table(batch.rows, title),
                  console=err, refresh_per_second=4, transient=True):
            batch.run()
    else:
        batch.run()
    doc = summary_doc(batch)
    if json_output:
        sys.stdout.write(json_text(doc) + "\n")
    else:
        t = doc["totals"]
        sys.stdout.write(render_summary(batch.rows) + "\n")
        checks = (f" · checks: {t['checks_passed']} passed, {t['checks_failed']} failed"
                  if t["checks_passed"] or t["checks_failed"] else "")
        cost = f" · {_money(t['cost_usd'])}" if t["cost_usd"] is not None else ""  # unknown: said by no figure
        sys.stdout.write(f"{t['done']}/{t['runs']} done{checks} · {t['steps']} steps · {t['tokens']:,} tokens{cost}"
                         + (" · interrupted: run the batch again to resume" if batch.interrupted else "") + "\n")
    return doc["exit_code"]

