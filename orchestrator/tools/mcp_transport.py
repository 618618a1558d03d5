"""The MCP stdio transport over a docker exec: a server's process runs in the sandbox, and the host's
`ClientSession` speaks to it over that exec's socket (modelled on the SDK's `stdio_client`; the frames
are split by the toolbox client's `Demux`).
"""

from __future__ import annotations

import socket
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

import anyio

from orchestrator.config import McpServerConfig
from orchestrator.sandbox.toolbox_client import Demux, open_exec


STDERR_TAIL_LINES = 5

# -- the stdio transport over a docker exec ------------------------------------------------------


def _parse_message(line: str) -> Any:
    """One JSON-RPC line as the SDK's SessionMessage, or the exception, for the session to surface."""
    from mcp.shared.message import SessionMessage

    try:
        try:
            import mcp_types  # mcp 2.x

            message = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
        except ImportError:  # mcp 1.x
            from mcp.types import JSONRPCMessage

            message = JSONRPCMessage.model_validate_json(line)
    except ValueError as exc:
        return exc
    return SessionMessage(message)


@dataclass
class ExecProcess:
    """What the host knows of a server process in the container."""

    exec_id: str | None = None
    demux: Demux = field(default_factory=Demux)
    ended: bool = False

    def stderr_tail(self, lines: int = STDERR_TAIL_LINES) -> str:
        return " | ".join(self.demux.stderr_lines(lines, 200))


@asynccontextmanager
async def exec_stdio_client(api: Any, container_id: str, argv: list[str], env: dict[str, str] | None = None,
                            cwd: str | None = None, process: ExecProcess | None = None) -> AsyncIterator[tuple]:
    """Start `argv` in the container and yield the SDK's (read_stream, write_stream) pair for it.

    Like the SDK's stdio_client, but the pipes are the exec's socket: stdout frames carry the JSON-RPC
    lines, stderr frames are kept (a tail) in `process.demux` to explain a failure. Closing sends EOF on
    the process's stdin; the process dies with the container at the latest.
    """
    from mcp.shared.message import SessionMessage

    process = process if process is not None else ExecProcess()
    exec_id, response, sock = await anyio.to_thread.run_sync(
        lambda: open_exec(api, container_id, argv, environment=env or None, workdir=cwd))
    process.exec_id = exec_id
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)

    async def reader() -> None:
        buffer = b""
        try:
            async with read_writer:
                while True:
                    try:
                        data = await anyio.to_thread.run_sync(sock.recv, 1 << 20, abandon_on_cancel=True)
                    except OSError:
                        break
                    if not data:
                        break
                    buffer += process.demux.feed(data)
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        if line.strip():
                            message = _parse_message(line.decode("utf-8", "replace"))
                            if isinstance(message, Exception):  # e.g. the engine's "executable file not found"
                                process.demux.stderr += b"stdout: " + line.strip()[:500] + b"\n"
                            await read_writer.send(message)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass
        finally:
            process.ended = True

    async def writer() -> None:
        try:
            async with write_reader:
                async for message in write_reader:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                    await anyio.to_thread.run_sync(sock.sendall, data.encode("utf-8"))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_writer.aclose()  # the session sees the end instead of waiting forever

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        tg.start_soon(writer)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                await write_stream.aclose()
                try:
                    sock.shutdown(socket.SHUT_WR)  # EOF on the server's stdin: MCP's way to ask it to exit
                except OSError:
                    pass
                with anyio.move_on_after(2.0):  # it may exit on its own, ending the stream
                    while not process.ended:
                        await anyio.sleep(0.02)
                for closing in (lambda: sock.shutdown(socket.SHUT_RDWR), sock.close, response.close):
                    try:
                        closing()
                    except OSError:
                        pass
            tg.cancel_scope.cancel()


@asynccontextmanager
async def http_client(server: McpServerConfig) -> AsyncIterator[tuple]:
    """The SDK's streamable HTTP or SSE transport, from the host."""
    if server.type == "sse":
        from mcp.client.sse import sse_client

        async with sse_client(server.url, headers=server.headers or None) as (read, write, *_):
            yield read, write
        return
    try:
        from mcp.client.streamable_http import streamable_http_client  # mcp 2.x (and late 1.x)
        from mcp.shared._httpx_utils import create_mcp_http_client
    except ImportError:
        from mcp.client.streamable_http import streamablehttp_client  # mcp 1.x

        async with streamablehttp_client(server.url, headers=server.headers or None) as (read, write, *_):
            yield read, write
        return
    async with create_mcp_http_client(headers=server.headers or None) as client:
        async with streamable_http_client(server.url, http_client=client) as (read, write, *_):
            yield read, write


