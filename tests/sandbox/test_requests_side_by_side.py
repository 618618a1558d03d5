"""Requests in flight together, on the host's side: the Docker toolbox client hands each thread its own
answer, in whatever order they come, and the gate lets read-only ops go together and any other alone
(orchestrator/sandbox/docker/toolbox_client.py, orchestrator/sandbox/calls.py). No engine: the client
speaks to a toolbox played over a socket pair, in the engine's framing, signing its answers as the toolbox
does (sandbox_image/toolbox/channel.py)."""

from __future__ import annotations

import json
import socket
import threading
import time


from orchestrator.sandbox.calls import OpGate
from orchestrator.sandbox.docker.toolbox_client import HEADER, ToolboxClient, ToolboxDied
from orchestrator.sandbox_image.toolbox.channel import INTERRUPT, opened, signed


def framed(message: dict, key: bytes | None = None, request: bytes = b"") -> bytes:
    payload = signed(key, request, message) if key is not None else json.dumps(message).encode() + b"\n"
    return HEADER.pack(1, len(payload)) + payload


def test_answers_that_come_in_another_order_reach_the_threads_that_asked():
    ours, theirs = socket.socketpair()
    client = ToolboxClient(None, "container", [])  # type: ignore[arg-type] - no engine is asked
    client._sock = ours
    got: dict[str, dict] = {}

    def ask(path: str) -> None:
        got[path] = client.request("read", {"path": path}, timeout=10)

    threads = [threading.Thread(target=ask, args=(path,)) for path in ("a", "b", "c")]
    for thread in threads:
        thread.start()
    reader = theirs.makefile("rb")
    lines = [reader.readline() for _ in range(3)]
    for line in reversed(lines):  # the last asked is answered first
        request = json.loads(line)
        theirs.sendall(framed({"id": request["id"], "ok": True, "result": {"path": request["args"]["path"]}},
                              client.channel.key, line))
        time.sleep(0.05)
    for thread in threads:
        thread.join(10)
    assert {path: answer["result"]["path"] for path, answer in got.items()} == {"a": "a", "b": "b", "c": "c"}
    theirs.close()
    ours.close()


def test_with_requests_in_flight_an_answer_signed_for_another_one_is_refused_and_none_is_believed():
    """The id an answer claims only picks the request whose MAC is checked: a real answer to request 1
    passed off as request 2's, or an unsigned one, means the channel was tampered with."""
    ours, theirs = socket.socketpair()
    client = ToolboxClient(None, "container", [])  # type: ignore[arg-type] - no engine is asked
    client._sock = ours
    failed: list[str] = []

    def ask(path: str) -> None:
        try:
            client.request("read", {"path": path}, timeout=10)
        except ToolboxDied as exc:
            failed.append(exc.message)

    threads = [threading.Thread(target=ask, args=(path,)) for path in ("a", "b")]
    for thread in threads:
        thread.start()
    reader = theirs.makefile("rb")
    first, second = reader.readline(), reader.readline()
    other = json.loads(second)["id"]
    theirs.sendall(framed({"id": other, "ok": True, "result": {"path": "forged"}}, client.channel.key, first))
    for thread in threads:
        thread.join(10)
    assert len(failed) == 2 and all("tampered" in why for why in failed), failed
    theirs.close()
    ours.close()


def test_an_interrupt_names_each_request_in_flight_signed_under_the_key():
    ours, theirs = socket.socketpair()
    client = ToolboxClient(None, "container", [])  # type: ignore[arg-type] - no engine is asked
    client._sock = ours
    thread = threading.Thread(target=lambda: client.request("shell", {"command": "sleep 9"}, timeout=10))
    thread.start()
    reader = theirs.makefile("rb")
    line = reader.readline()
    assert client.interrupt()
    interrupt = reader.readline()
    body = opened(client.channel.key, INTERRUPT.encode(), interrupt)
    assert body is not None and json.loads(body) == {"op": "interrupt", "id": json.loads(line)["id"]}
    assert opened(bytes(32), INTERRUPT.encode(), interrupt) is None, "only the key makes it"
    theirs.sendall(framed({"id": json.loads(line)["id"], "ok": True, "result": {}}, client.channel.key, line))
    thread.join(10)
    assert not thread.is_alive()
    theirs.close()
    ours.close()


def test_read_only_ops_go_together_and_any_other_goes_alone():
    gate = OpGate()
    inside: list[str] = []
    most = {"together": 0, "with a write": 0}
    lock = threading.Lock()

    def op(name: str) -> None:
        with gate.enter(name):
            with lock:
                inside.append(name)
                most["together"] = max(most["together"], len(inside))
                if "write" in inside and len(inside) > 1:
                    most["with a write"] += 1
            time.sleep(0.1)
            with lock:
                inside.remove(name)

    threads = [threading.Thread(target=op, args=(name,)) for name in ("read", "fetch", "list", "write", "read")]
    for thread in threads:
        thread.start()
        time.sleep(0.01)
    for thread in threads:
        thread.join(10)
    assert most["together"] == 3 and most["with a write"] == 0
