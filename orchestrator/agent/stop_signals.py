"""Ctrl-C and SIGTERM (`kill`, `docker stop`, systemd, a job scheduler) stop a run now: the first cuts the
running command (or model request) short and the run ends `interrupted`, its call recorded as
interrupted; the same again, while it stops, ends cairn at once."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from types import FrameType
from typing import Iterator, Protocol

from orchestrator import events as ev
from orchestrator.ports import Progress, Store

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
WATCH_SECONDS = 0.2  # how often a drive looks for a `cairn stop`: a stop lands within about this


class Stoppable(Protocol):
    """What the handlers use of the agent they stop (loop.Loop, which installs them)."""

    stop_requested: bool
    stopped_by: str | None
    state: Progress

    def emit(self, event: ev.Event) -> None: ...

    def stop_now(self, by: str) -> None: ...


@contextmanager
def stop_signals(agent: Stoppable) -> Iterator[None]:
    """The agent's handlers for the two signals while the block runs; the ones before are put back after.
    signal.signal works in the main thread only: a batch runs agents in worker threads and stops them
    itself on Ctrl-C or SIGTERM by setting `stop_requested` (orchestrator/batch/threads.py)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_signal(signum: int, frame: FrameType | None) -> None:
        name = "Ctrl-C" if signum == signal.SIGINT else "SIGTERM"
        if agent.stop_requested:
            raise KeyboardInterrupt  # a second one stops at once
        agent.emit(ev.Notice(step=agent.state.step, text=f"{name}: stopping now (the running command is cut "
                                                         "short; the same again ends cairn at once)"))
        agent.stop_now(name)

    previous = {sig: signal.signal(sig, on_signal) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def stop_requests(agent: Stoppable, store: Store) -> Iterator[None]:
    """While the block runs, a thread watches for `cairn stop` (the page's Stop runs it too): asked to stop
    now, it stops the agent now, as a first Ctrl-C does; a stop after the step is the loop's to take."""
    done = threading.Event()

    def watch() -> None:
        while not done.wait(WATCH_SECONDS):
            if store.stop_request() == "now":
                agent.stop_now("cairn stop")
                return

    watcher = threading.Thread(target=watch, name="cairn-stop-watch", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()
