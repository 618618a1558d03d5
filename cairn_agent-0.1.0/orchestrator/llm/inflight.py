"""A model request in flight: run in a worker thread, watched from the calling thread.

A thread blocked in a socket read or a DNS lookup cannot be cut short reliably; a thread waiting on a
queue can. So the request runs in a worker that passes each piece of the answer through a queue, and
the calling thread waits on that queue, in short slices. It notices silence (no piece within the idle
timeout: a backstop to httpx's read timeout, which some providers' code does not pass on and which a
hung DNS lookup escapes), Ctrl-C and a cancel from another thread at once, and walks away from the
worker, which drops whatever still comes and ends with its connection.
"""

from __future__ import annotations

import contextlib
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from orchestrator.llm.retry import NoAnswer

SLICE = 0.2  # seconds between looks at a cancel from another thread

_PIECE, _ERROR, _END = "piece", "error", "end"


def watched(open_answer: Callable[[], Iterable[Any]], idle: float, cancelled: threading.Event) -> Iterator[Any]:
    """The pieces `open_answer()` yields, produced in a worker thread.

    Raises NoAnswer when no piece came for `idle` seconds, whatever `open_answer` raised, and
    KeyboardInterrupt when `cancelled` is set (clearing it: one cancel stops one request).
    """
    pieces: queue.Queue = queue.Queue()
    abandoned = threading.Event()
    worker = threading.Thread(target=_produce, args=(open_answer, pieces, abandoned), daemon=True,
                              name="cairn-model-request")
    last = time.monotonic()
    began = False
    worker.start()
    try:
        while True:
            if time.monotonic() - last > idle:
                raise NoAnswer(idle, began)
            if cancelled.is_set():
                cancelled.clear()
                raise KeyboardInterrupt
            try:
                kind, value = pieces.get(timeout=min(SLICE, idle))
            except queue.Empty:
                continue
            if kind == _END:
                return
            if kind == _ERROR:
                raise value
            began, last = True, time.monotonic()
            yield value
    finally:
        abandoned.set()


def _produce(open_answer: Callable[[], Iterable[Any]], pieces: queue.Queue, abandoned: threading.Event) -> None:
    answer: Iterable[Any] | None = None
    try:
        answer = open_answer()
        for piece in answer:
            if abandoned.is_set():
                break
            pieces.put((_PIECE, piece))
        pieces.put((_END, None))
    except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread, which raises it
        pieces.put((_ERROR, exc))
    finally:
        if abandoned.is_set():
            with contextlib.suppress(Exception):  # the connection is dropped either way
                getattr(answer, "close", lambda: None)()


def pause(seconds: float, cancelled: threading.Event) -> None:
    """Sleep between retries; a cancel (or Ctrl-C) ends the sleep and the request."""
    if cancelled.wait(seconds):
        cancelled.clear()
        raise KeyboardInterrupt


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """While a request is in flight, Ctrl-C stops it at once.

    The agent's own handler lets the current action finish on a first Ctrl-C; a model request is not
    worth finishing (nothing has happened yet that a resume would lose), so here the first Ctrl-C
    raises KeyboardInterrupt. Only the main thread has signals; elsewhere this changes nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt
