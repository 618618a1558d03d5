"""Requests in flight together, on the host's side: the Docker toolbox client hands each thread its own
answer, in whatever order they come, and the gate lets read-only ops go together and any other alone
(orchestrator/sandbox/docker/toolbox_client.py, orchestrator/sandbox/calls.py). No engine: the client
speaks to a toolbox played over a socket pair, in the engine's framing."""

from __future__ import annotations

import json
import socket
import threading
import time

from orchestrator.sandbox.calls import OpGate
from orchestrator.sandbox.docker.toolbox_client import HEADER, ToolboxClient


def framed(message: dict) -> bytes:
    payload = json.dumps(message).encode() + b"\n"
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
    requests = [json.loads(reader.readline()) for _ in range(3)]
    for request in reversed(requests):  # the last asked is answered first
        theirs.sendall(framed({"id": request["id"], "ok": True, "result": {"path": request["args"]["path"]}}))
        time.sleep(0.05)
    for thread in threads:
        thread.join(10)
    assert {path: answer["result"]["path"] for path, answer in got.items()} == {"a": "a", "b": "b", "c": "c"}
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
