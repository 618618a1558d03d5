"""Starting `cairn serve` for a test (a real server process on a free port) and talking to it."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Server:
    url: str  # as printed: with ?token=
    base: str  # http://127.0.0.1:PORT
    token: str
    port: int
    proc: subprocess.Popen
    output: list[str]

    @property
    def cookie(self) -> str:
        return f"cairn_serve_{self.port}={self.token}"

    def request(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None,
                cookie: bool = True) -> tuple[int, dict[str, str], bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        sent = {"Host": f"127.0.0.1:{self.port}", **({"Cookie": self.cookie} if cookie else {}), **(headers or {})}
        data = json.dumps(body).encode() if body is not None and not isinstance(body, bytes) else body
        try:
            connection.request(method, path, body=data, headers=sent)
            response = connection.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        finally:
            connection.close()

    def post(self, path: str, body: Any, origin: str | None = "self", **more: str) -> tuple[int, bytes]:
        headers = {"Content-Type": "application/json", **more}
        if origin is not None:
            headers["Origin"] = self.base if origin == "self" else origin
        status, _headers, data = self.request("POST", path, body, headers)
        return status, data


def start_server(runs_dir: Path, *more: str, env: dict[str, str] | None = None) -> Server:
    runs_dir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "serve", "--port", "0", "--runs-dir",
                             str(runs_dir), *more], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            stdin=subprocess.DEVNULL, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
    output: list[str] = []
    found: list[str] = []
    ready = threading.Event()

    def read() -> None:
        for line in proc.stdout:
            output.append(line)
            match = re.search(r"(http://\S+\?token=\S+)", line)
            if match and not found:
                found.append(match.group(1))
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    ready.wait(60)
    if not found:
        proc.kill()
        raise AssertionError("cairn serve printed no URL:\n" + "".join(output))
    url = found[0]
    parts = urlsplit(url)
    return Server(url=url, base=f"{parts.scheme}://{parts.netloc}", token=url.split("token=", 1)[1],
                  port=parts.port, proc=proc, output=output)


def stop_server(server: Server) -> int:
    server.proc.send_signal(signal.SIGINT)  # Ctrl-C
    try:
        return server.proc.wait(15)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait()
        raise AssertionError("cairn serve did not stop on Ctrl-C")


def served(runs_dir: Path, *more: str) -> Iterator[Server]:
    server = start_server(runs_dir, *more)
    try:
        yield server
    finally:
        stop_server(server)


def cairn(command: str, *args: str, runs_dir: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", command, "--runs-dir", str(runs_dir), *args],
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def start_run(runs_dir: Path, task: str, script: Path, turns: list[dict[str, Any]], *options: str) -> subprocess.Popen:
    """`cairn run` in the background, as a person's terminal would run it."""
    script.write_text(json.dumps({"turns": turns}))
    return subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "run", "--model", f"scripted:{script}",
                             "--runs-dir", str(runs_dir), *options, "--", task],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


def wait_for(predicate: Any, timeout: float = 120, what: str = "the condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")
