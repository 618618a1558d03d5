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
from orchestrator.ports import Model, Progress, Sandbox, Store

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
WATCH_SECONDS = 0.2  # how often a drive looks for a `cairn stop`: a stop lands within about this


class Stoppable(Protocol):
    """What the handlers use of the agent they stop (loop.Loop, which installs them)."""

    stop_requested: bool
    stopped_by: str | None
    state: Progress
    sandbox: Sandbox
    model: Model
    waiting_for_model: bool

    def emit(self, event: ev.Event) -> None: ...


def stop_now(agent: Stoppable, by: str) -> None:
    """A person's stop (Ctrl-C, `cairn stop`, the page's Stop): the op that runs now is cut short and a
    model request in flight ends, so the run ends `interrupted` within a moment, its call recorded as
    interrupted. Safe from another thread and from a signal handler: it only sets and asks."""
    agent.stop_requested, agent.stopped_by = True, by
    agent.sandbox.interrupt()
    cancel = getattr(agent.model, "cancel", None)  # the Model port's clients that can (llm/client.py)
    if cancel is not None and agent.waiting_for_model:  # else no request to end: nothing is left pending
        cancel()


@contextmanager
def model_request(agent: Stoppable) -> Iterator[None]:
    """While a model request is in flight: a stop then ends it (see stop_now)."""
    agent.waiting_for_model = True
    try:
        yield
    finally:
        agent.waiting_for_model = False


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
        stop_now(agent, name)

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
                stop_now(agent, "cairn stop")
                return

    watcher = threading.Thread(target=watch, name="cairn-stop-watch", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()
