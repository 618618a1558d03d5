"""Which runs hold a container, for `cairn ls`: one question to the engine for all runs, without
docker-py (whose import alone costs more than the rest of `ls`), and none at all when no engine listens."""

from __future__ import annotations

import http.client
import json
import os
import socket
import urllib.parse

from orchestrator.store.run_dir import RunDir

ENGINE_TIMEOUT = 2.0  # seconds: ls stays quick when an engine hangs
DEFAULT_SOCKET = "/var/run/docker.sock"

States = dict[tuple[str, "str | None"], str]


def held_by(run: RunDir, held: States | None) -> str | None:
    """"running" or "stopped" when the run holds a container, else None (also when no engine answered).
    A container made for another directory of the same run id (a copy's original) is not this run's."""
    held = held or {}
    if not any(key[0] == run.id for key in held):  # most runs hold none: no need to resolve the path
        return None
    return held.get((run.id, str(run.root.resolve()))) or held.get((run.id, None))


def container_states() -> States | None:
    """"running" or "stopped" for each container cairn made, by (run id, the run directory it was made
    for, None when not recorded). None when no engine answers, or the engine is not a local socket
    (`DOCKER_HOST=tcp://`, `ssh://`, which ls does not reach)."""
    host = os.environ.get("DOCKER_HOST") or f"unix://{DEFAULT_SOCKET}"
    if not host.startswith("unix://"):
        return None
    filters = urllib.parse.quote(json.dumps({"label": ["cairn.managed=1"]}))
    connection = _UnixConnection(host[len("unix://"):])
    try:
        connection.request("GET", f"/containers/json?all=1&filters={filters}")
        response = connection.getresponse()
        if response.status != 200:
            return None
        containers = json.loads(response.read())
    except (OSError, ValueError, http.client.HTTPException):
        return None
    finally:
        connection.close()
    states = {}
    for container in containers:
        labels = container.get("Labels") or {}
        if labels.get("cairn.run"):
            state = "running" if container.get("State") == "running" else "stopped"
            states[(labels["cairn.run"], labels.get("cairn.run_dir"))] = state
    return states


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=ENGINE_TIMEOUT)
        self.socket_path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(ENGINE_TIMEOUT)
        self.sock.connect(self.socket_path)
