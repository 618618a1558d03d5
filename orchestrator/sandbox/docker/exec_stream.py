"""A process in the container with its stdin attached, over a `docker exec` socket: the Docker side of
`ports.ExecStream`, which the MCP stdio transport (tools/mcp_transport.py) speaks JSON-RPC over.

Without a TTY the engine multiplexes the process's stdout and stderr on the socket in frames; the
toolbox client's `Demux` sorts them, so that `recv` gives stdout alone and stderr is kept, a tail of it.
"""

from __future__ import annotations

import socket
from typing import Any

from orchestrator.sandbox.docker.toolbox_client import Demux, open_exec

STDERR_TAIL_LINES = 5


class DockerExecStream:
    def __init__(self, api: Any, container_id: str, argv: list[str], env: dict[str, str] | None = None,
                 workdir: str | None = None) -> None:
        self.api = api
        self.exec_id, self._response, self._sock, early = open_exec(api, container_id, argv,
                                                                    environment=env or None, workdir=workdir)
        self.demux = Demux()
        self._early = self.demux.feed(early)  # stdout that came before the socket was handed out

    def recv(self) -> bytes:
        """The next stdout bytes; b"" once the stream ended. Stderr frames are kept in the demux."""
        if self._early:
            early, self._early = self._early, b""
            return early
        return self._recv()

    def _recv(self) -> bytes:
        while True:
            try:
                data = self._sock.recv(1 << 20)
            except OSError:
                return b""
            if not data:
                return b""
            stdout = self.demux.feed(data)
            if stdout:
                return stdout

    def send(self, data: bytes) -> None:
        self._sock.sendall(data)

    def close_stdin(self) -> None:
        """EOF on the process's stdin (MCP's way to ask a server to exit)."""
        try:
            self._sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def close(self) -> None:
        for closing in (lambda: self._sock.shutdown(socket.SHUT_RDWR), self._sock.close, self._response.close):
            try:
                closing()
            except OSError:
                pass

    def note(self, line: bytes) -> None:
        self.demux.stderr += line.rstrip(b"\n") + b"\n"

    def stderr_tail(self, lines: int = STDERR_TAIL_LINES) -> str:
        return " | ".join(self.demux.stderr_lines(lines, 200))

    def exit_code(self) -> int | None:
        try:
            return self.api.exec_inspect(self.exec_id).get("ExitCode")
        except Exception:  # noqa: BLE001 - only a detail of a message; the engine may have lost the exec
            return None
