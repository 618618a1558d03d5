"""A drive's first checkpoint, taken in a thread while the first request goes out.

The first model request does not need the workspace's checkpoint; the first call that can change the
workspace does (step 0 is the workspace as the run starts, the base of step 1's diff). On a big
workspace that checkpoint is the longest part of a start (every file hashed: tens of seconds for
100,000 files), so it is taken beside the container's start and the first request:

- the change watch (store/change_list.py) starts first, so that whatever changes from then on is in the
  change list, and what changed before is seen by the scan that follows;
- a new run (no checkpoint yet) then commits step 0; the first event of step 1 written to the run's log
  (the model's first answer, logged once it came) waits for it and logs step 0's event before itself
  (store/event_log.py's `before_step_1`), through the loop's `emit`, whose state counts every event
  of the log; so steps never go back in the log and no call can change the workspace before step 0;
- a resumed run scans its workspace (what the person changed between drives) without a commit, so that
  its first step's checkpoint starts from the change list, not from another full scan; nothing waits
  for it but that checkpoint.

What cairn does is said on screen when it takes long (SAY_AFTER seconds): that the checkpoint is being
taken, that step 1 waits for it, and how long it took.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from orchestrator import events as ev
from orchestrator.errors import first_line
from orchestrator.runs.new_run import progress
from orchestrator.store.change_list import ChangeWatch
from orchestrator.store.run_dir import RunDir

SAY_AFTER = 2.0  # seconds: a first checkpoint that takes longer is said on screen


class Checkpointing:
    """A drive's checkpoints: the change watch of the run's folders (its workspace, and cairn/, whose files
    are given back to their owner too) and the first checkpoint, started together; `close()` at the
    drive's end. The Docker sandbox gives files back from the same `watch`."""

    def __init__(self, run: RunDir) -> None:
        self.run = run
        self.watch = ChangeWatch([run.workspace, run.cairn_dir])
        run.changes = self.watch.subscribe()
        self.first = FirstCheckpoint(run, self.watch)
        if self.first.baseline:
            run.pending_first_checkpoint = self.first

    def log_through(self, emit: Callable[[ev._Event], None]) -> None:
        """Step 0 goes into the log through the loop's `emit`, before the first event of step 1."""
        if self.first.baseline:
            self.run.events.before_step_1 = lambda: self.first.record(emit)

    def close(self) -> None:
        """The watch closed, and the first checkpoint in the log if it was taken: the next drive, in this
        process or another, starts both again. A drive that ended before its first step (a stop, which
        means now; a model that failed at once) does not wait for step 0: its first scan is ended, and
        the next drive takes step 0 again."""
        self.run.pending_first_checkpoint, self.run.events.before_step_1 = None, None
        abandoned = not self.first.done.is_set()
        try:
            self.run.forget_checkpoints()  # ends the first scan, or an index refresh, still going
            self.first.thread.join()
            if self.first.taken is not None or not abandoned:
                self.first.record()  # a run that ended before its first step: step 0 goes into its log now
        finally:
            self.watch.close()
            self.run.changes = None


class FirstCheckpoint:
    """Started at once, in a thread. `baseline`: a new run's step 0 (else a resumed run's scan)."""

    def __init__(self, run: RunDir, watch: ChangeWatch) -> None:
        self.run, self.watch = run, watch
        self.started = time.monotonic()
        checkpoints = run.checkpoints()
        self.baseline = not checkpoints.exists() or checkpoints.head() is None
        self.taken: Any = None  # the step-0 checkpoint (store/checkpoints.Result)
        self.error: str | None = None
        self.given = not self.baseline  # in the log already
        self.recording = threading.Lock()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._take, name="cairn-first-checkpoint", daemon=True)
        self.thread.start()
        self.timer = threading.Timer(SAY_AFTER, self._say_slow)
        self.timer.daemon = True
        self.timer.start()

    def _take(self) -> None:
        checkpoints = self.run.checkpoints()
        try:
            unwatched = self.watch.start()  # first: what changes from now on is in the change list
            if unwatched is not None:  # correct still, but each step reads the whole workspace: say why
                progress(f"checkpoints: the workspace's changes cannot be watched ({unwatched}); "
                         "steps are full scans until they can (docs/checkpoints.md)")
            if self.baseline:
                self.taken = checkpoints.commit(0)
            else:
                checkpoints.prepare()
        except Exception as exc:  # noqa: BLE001 - a failed checkpoint is a notice, never the end of the run
            self.error = first_line(exc)
        finally:
            self.done.set()
            self.timer.cancel()
            if self.error is None and time.monotonic() - self.started >= SAY_AFTER:
                progress(f"{self._what()} taken in {time.monotonic() - self.started:.1f} s")
        try:
            checkpoints.refresh_index()  # beside the steps: for the full scans to come
        except Exception:  # noqa: BLE001 - only a cache: a full scan without it reads more
            pass

    def _what(self) -> str:
        return "the workspace's first checkpoint" if self.baseline else "the scan of the workspace"

    def _say_slow(self) -> None:
        if self.done.is_set():
            return
        progress("taking the workspace's first checkpoint (every file hashed once) while the model is asked"
                 if self.baseline else "scanning the workspace for what changed since the run's last drive")

    def wait(self) -> None:
        """Wait until it is taken, saying so when that is long."""
        if not self.done.is_set():
            progress(f"step 1 waits for {self._what()} ({time.monotonic() - self.started:.0f} s so far)")
        self.done.wait()

    def record(self, emit: Callable[[ev._Event], None] | None = None) -> None:
        """A new run's step 0 into the log, once it is taken: before the first event of step 1, or at the
        drive's end when the run ended before its first step (straight into the log: no loop counts it
        any more). A checkpoint that failed is a notice, as for any step, and said on screen (the loop's
        display shows what it logs)."""
        shown, emit = emit is not None, emit or self.run.events.append
        with self.recording:
            if self.given:
                return
            self.wait()
            if self.taken is not None:
                emit(ev.Checkpoint(step=0, commit=self.taken.commit, skipped=self.taken.skipped))
            else:
                emit(ev.Notice(step=0, text=f"checkpoint of step 0 failed: {self.error}"))
                if not shown:
                    progress(f"checkpoint of step 0 failed: {self.error}")
            self.given = True
