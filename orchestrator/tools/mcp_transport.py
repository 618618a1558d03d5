"""The MCP stdio transport over the sandbox's exec stream: a server's process runs in the sandbox
(`Sandbox.open_exec`), and the host's `ClientSession` speaks to it over that stream (modelled on the
SDK's `stdio_client`). How the stream reaches the process (a docker exec socket) is the sandbox's.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, AsyncIterator

import anyio

from orchestrator.config import McpServerConfig
from orchestrator.ports import ExecStream, Sandbox


STDERR_TAIL_LINES = 5
# The longest JSON-RPC line read from a server in the sandbox: past it the stream ends with an error, and
# nothing more of the line is held (a server the agent replaced can write without a newline for good).
MAX_LINE = 16 * 1024 * 1024

# -- the stdio transport over the sandbox's exec stream ------------------------------------------


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
    except (ValueError, RecursionError) as exc:
        return exc if isinstance(exc, ValueError) else ValueError(f"a JSON-RPC line nested too deep ({exc})")
    return SessionMessage(message)


@dataclass
class ExecProcess:
    """What the host knows of a server process in the sandbox."""

    stream: ExecStream | None = None
    ended: bool = False

    def stderr_tail(self, lines: int = STDERR_TAIL_LINES) -> str:
        return self.stream.stderr_tail(lines) if self.stream is not None else ""

    def exit_code(self) -> int | None:
        return self.stream.exit_code() if self.stream is not None else None


@asynccontextmanager
async def exec_stdio_client(sandbox: Sandbox, argv: list[str], env: dict[str, str] | None = None,
                            cwd: str | None = None, process: ExecProcess | None = None) -> AsyncIterator[tuple]:
    """Start `argv` in the sandbox and yield the SDK's (read_stream, write_stream) pair for it.

    Like the SDK's stdio_client, but the pipes are the sandbox's exec stream: its stdout carries the
    JSON-RPC lines, its stderr is kept (a tail) to explain a failure. Closing sends EOF on the process's
    stdin; the process dies with the sandbox at the latest.
    """
    from mcp.shared.message import SessionMessage

    process = process if process is not None else ExecProcess()
    stream = process.stream = await anyio.to_thread.run_sync(lambda: sandbox.open_exec(argv, env or None, cwd))
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)

    async def reader() -> None:
        buffer = bytearray()
        try:
            async with read_writer:
                while True:
                    data = await anyio.to_thread.run_sync(stream.recv, abandon_on_cancel=True)
                    if not data:
                        break
                    searched = len(buffer)  # no newline before: each byte is looked at once
                    buffer += data
                    lines = []
                    while (end := buffer.find(b"\n", searched)) >= 0:
                        lines.append(bytes(buffer[:end]))
                        del buffer[:end + 1]
                        searched = 0
                    for line in lines:
                        if line.strip():
                            message = _parse_message(line.decode("utf-8", "replace"))
                            if isinstance(message, Exception):  # e.g. the engine's "executable file not found"
                                stream.note(b"stdout: " + line.strip()[:500])
                            await read_writer.send(message)
                    if len(buffer) > MAX_LINE:
                        too_long = f"a line longer than {MAX_LINE:,} bytes"
                        stream.note(f"stdout: {too_long}; the server's stream was closed".encode())
                        await read_writer.send(ValueError(f"the MCP server sent {too_long}"))
                        break
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass
        finally:
            process.ended = True

    async def writer() -> None:
        try:
            async with write_reader:
                async for message in write_reader:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                    await anyio.to_thread.run_sync(stream.send, data.encode("utf-8"))
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
                stream.close_stdin()  # EOF on the server's stdin: MCP's way to ask it to exit
                with anyio.move_on_after(2.0):  # it may exit on its own, ending the stream
                    while not process.ended:
                        await anyio.sleep(0.02)
                stream.close()
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


