"""`cairn batch FILE.jsonl`: many runs at once, each in its own sandbox, resumable as a whole.

Runs go N at a time in worker threads of this process: the loop waits on the model and on the
sandbox, so threads are enough, and they share one litellm import (~185 MB of RSS and 3-20 s a process,
measured by bench/batch_bench.py).

Running the same file again:
- a `done` run is skipped (one whose check failed is left, below);
- an `interrupted` run (Ctrl-C) or a crashed one (`running` with no live process) is resumed;
- a run that ended otherwise (`failed`, `stopped`, `waiting`, `budget`, `looping`, or `done` with its check
  failed) is left as it is and reported: it needs a person (`cairn resume RUN ...`);
- a line that is new or changed gets a new run.

Ctrl-C (or SIGTERM) stops every run now, its running command cut short (each becomes `interrupted`, resumable by running
the batch again) and starts no new ones; a second one stops at once (runs are left crashed, also
resumable). The exit code is then 130 either way.

The file's format is in batch/jobs.py, the manifest that makes it resumable in batch/manifest.py, what a
person sees in batch/rows.py and batch/summary.py, and the same batch on a Ray cluster in batch/ray_driver.py.
"""

from __future__ import annotations

import queue
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from orchestrator.batch.jobs import parse_file
from orchestrator.batch.manifest import Manifest
from orchestrator.batch.rows import Row, RowDisplay, fill
from orchestrator.runs.new_run import progress_to
from orchestrator.errors import CairnError, UsageError
from orchestrator.status import Status
from orchestrator.store.run_dir import RunDir
from orchestrator.agent.stop_signals import stop_now

RESUMABLE = ("interrupted",)  # and `running` runs whose process is gone (crashed)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)  # both stop every run now


class Batch:
    def __init__(self, batch_file: Path, runs_dir: Path, jobs: int = 4,
                 on_end: Callable[[Row], None] | None = None, api_base: str | None = None) -> None:
        # Absolute: the checkpoints' git is run from elsewhere, and a relative path would break it.
        self.file, self.runs_dir, self.jobs = batch_file, runs_dir.resolve(), max(1, jobs)
        self.todo = parse_file(batch_file, api_base)  # raises UsageError before anything starts
        self.manifest = Manifest(runs_dir, batch_file)
        self.rows = [Row(j.line, j.task) for j in self.todo]
        self.on_end = on_end or (lambda row: None)
        self.live_runs: dict[int, Any] = {}  # row index → its LiveRun
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
                    run.hold()  # this batch drives it from now on; the lock goes when its live ends
                except RunIsLive:
                    fill(row, run, "skipped")
                    row.status = "running"
                    row.error = "running in another process"
                    continue
                work.append((i, run))
            else:
                fill(row, run, "left")
                if row.ok:
                    row.action = "skipped"
        return work

    def run(self) -> list[Row]:
        work = self.plan()
        if work:
            from orchestrator.llm.client import litellm_module

            litellm_module()  # imported once, here, not in N threads at once
            from orchestrator.sandbox.docker.image import ensure_image

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
        from orchestrator.agent.critic import preflight_critic
        from orchestrator.llm.preflight import preflight
        from orchestrator.runs.settings import load_config

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
        from orchestrator.runs.compose import mark_failed
        from orchestrator.runs.drive import drive
        from orchestrator.runs.new_run import create_run
        from orchestrator.runs.settings import load_config

        job, row = self.todo[index], self.rows[index]
        started = time.monotonic()

        def opened(live: Any) -> None:
            self.live_runs[index] = live  # for Ctrl-C, which stops every run
            if self.stopping.is_set():
                live.agent.stop_requested, live.agent.stopped_by = True, self.stopped_by
        try:
            if run is None:
                run = create_run(self.runs_dir, job.task, job.cfg)
                self.manifest.record(job.key, job.line, run.id)
                row.action, cfg = "started", job.cfg
            else:
                row.action, cfg = "resumed", load_config(run)
            row.id, row.status = run.id, "starting"
            driven = drive(run, cfg, RowDisplay(row), resumed=row.action == "resumed", opened=opened,
                           record_every_failure=True)
            if driven.error is not None:
                row.error = driven.error.message
        except Exception as exc:  # noqa: BLE001 - one run failing (here: before it could start) must not stop the others
            row.error = exc.message if isinstance(exc, CairnError) else f"{type(exc).__name__}: {exc}"
            if run is not None:  # made, but its settings could not be read
                mark_failed(run, row.error)
            if not isinstance(exc, CairnError):
                traceback.print_exc(file=sys.stderr)
        finally:
            if run is not None:
                run.release()  # drive() lets go of it as it ends; a run that never reached drive(), here
            self.live_runs.pop(index, None)
            row.seconds = round(time.monotonic() - started, 2)
        if run is not None:
            fill(row, run, row.action)
        self.on_end(row)

    def _on_stop_signal(self, signum: int, frame: Any) -> None:
        """Ctrl-C or SIGTERM: every run stops now (its running command cut short); the second one stops at once (the
        runs are left crashed, resumable)."""
        name = self.stopped_by = "Ctrl-C" if signum == signal.SIGINT else "SIGTERM"
        self._sigints += 1
        self.interrupted = True
        self.stopping.set()
        if self._sigints == 1 and self._stop_now(name):
            sys.stderr.write(f"cairn: {name}: stopping every run now "
                             f"({name} again to stop at once)\n")
            return
        self._stop_at_once()
        raise KeyboardInterrupt

    def _stop_now(self, name: str) -> bool:
        """Asks every run to stop now (its running command cut short); False where none can be asked."""
        for live in list(self.live_runs.values()):
            stop_now(live.agent, name)
        return True

    def _stop_at_once(self) -> None:
        for live in list(self.live_runs.values()):
            try:
                live.sandbox.stop()
            except Exception:  # noqa: BLE001
                pass
