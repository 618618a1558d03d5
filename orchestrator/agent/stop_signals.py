"""Ctrl-C and SIGTERM (`kill`, `docker stop`, systemd, a job scheduler) stop a run between actions: the
first asks the agent to stop after the current action, the same again stops it at once."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from types import FrameType
from typing import Iterator, Protocol

from orchestrator import events as ev
from orchestrator.ports import Progress

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stoppable(Protocol):
    """What the handlers use of the agent they stop (loop.Loop, which installs them)."""

    stop_requested: bool
    stopped_by: str | None
    state: Progress

    def emit(self, event: ev.Event) -> None: ...


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
        agent.stop_requested, agent.stopped_by = True, name
        agent.emit(ev.Notice(step=agent.state.step, text=f"{name}: stopping after the current action"))

    previous = {sig: signal.signal(sig, on_signal) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
