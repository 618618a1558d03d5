"""Requests in the order they come: the read-only ones side by side, every other one alone.

A read-only op (read, list, fetch) changes nothing another op sees, so each runs on a thread of its own
and several can be in flight at once: the host sends them together when the agent's calls may run side
by side (a sub-agent's file_read beside another's web_fetch). Its answer goes out when it is ready,
perhaps before an earlier request's: the host matches answers by id. Any other op waits for the
read-only ones in flight and runs alone on this thread, as every op did before; the host sends nothing
while it runs (PROTOCOL.md, "Framing"), so a long command still sees the host's end of file on stdin.
"""

from __future__ import annotations

import json
import threading
from typing import Callable, Iterable

TOGETHER = frozenset({"read", "list", "fetch"})


def serve(handle: Callable[[bytes], dict], lines: Iterable[bytes], send: Callable[[dict], None]) -> None:
    """Answer each request line with `handle`, through `send`, until the host's end of file; then wait for
    the read-only ops still running (their answers are journaled, whoever reads them)."""
    sending = threading.Lock()
    running: list = []

    def answer(line: bytes) -> None:
        response = handle(line)
        with sending:
            try:
                send(response)
            except (BrokenPipeError, OSError):  # the host is gone: the journal holds the answer
                pass

    for line in lines:
        if not line.strip():
            continue
        running = [thread for thread in running if thread.is_alive()]
        if _op(line) in TOGETHER:
            thread = threading.Thread(target=answer, args=(line,), name="toolbox-read", daemon=True)
            thread.start()
            running.append(thread)
            continue
        for thread in running:  # a request that changes things never runs beside one that reads
            thread.join()
        response = handle(line)
        with sending:
            send(response)
    for thread in running:
        thread.join()


def _op(line: bytes) -> object:
    try:
        request = json.loads(line)
    except ValueError:
        return None
    return request.get("op") if isinstance(request, dict) else None
