"""MCP servers as tools of a run, through the official `mcp` SDK.

    hub = McpHub(cfg.mcp.servers, start_timeout=60, call_timeout=300)
    hub.start(sandbox)                 # stdio servers start in the sandbox, http/sse are reached from the host
    hub.tools()                        # OpenAI function specs: server order, then tool name
    hub.call("get_current_time", {"timezone": "UTC"})   # -> (text, is_error)
    hub.close()

Where the servers run:
- stdio servers run INSIDE the run's sandbox: their process is started there with `Sandbox.open_exec`
  (stdin attached), and the host's `ClientSession` speaks to it over that stream (`exec_stdio_client`,
  modelled on the SDK's `stdio_client`). They see the work directory and the sandbox's network
  setting, never the host.
- http (streamable HTTP) and sse servers are reached from the host, like the model's API.

The SDK is async (anyio): all sessions live in one event loop, on one background thread the hub owns;
the hub's methods are plain sync calls for the loop.

Tool names: the tools of all servers join the run's fixed tool list once, at its start, in server
order and then by tool name. A tool keeps its own name unless another server (or a built-in tool) has
the same one; then it becomes `<server>__<tool>`. Names are cut to `^[a-zA-Z0-9_-]{1,64}$`.
`allowed_tools` of a server (or tiny-agents' `tools.include`) keeps only the tools it names;
`tools.exclude` leaves out the ones it names.

A stdio server that exits (it crashed, or was killed) is reported in the result of the call it was
serving, with its exit code and the end of its stderr; the next call to one of its tools starts it again
first, and that call's result says so. A server that does not start again makes that call an error.

Packages (the uvx rule, `mcp_packages.py`): servers that tiny-agents would fetch at start (`uvx`,
`uv tool run`, `pipx run`, `npx`) are installed into a derived image `cairn-tools:<hash>`, since the sandbox
has no network (the image is built by sandbox/docker/derived.py). The stdio transport is in `mcp_transport.py`;
what a tool looks like to the model (its spec, its name, its result as text) in `mcp_tools.py`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import shlex
import threading
import time
from collections import Counter
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import anyio

from orchestrator.config import McpServerConfig
from orchestrator.errors import SandboxError, first_line
from orchestrator.ports import Sandbox
from orchestrator.tools.outcome import Observation
from orchestrator.tools.mcp_packages import server_argv
from orchestrator.tools.mcp_tools import clean_name, format_result, hints, mcp_spec, sdk_field, unique_name
from orchestrator.tools.mcp_transport import ExecProcess, exec_stdio_client, http_client
from orchestrator.tools.registry import Tool, ToolContext


CLOSE_SECONDS = 5.0

# -- the hub -------------------------------------------------------------------------------------


@dataclass
class _Server:
    cfg: McpServerConfig
    session: Any = None
    tools: list[Any] = field(default_factory=list)  # the SDK's Tool objects, after allowed_tools
    stop: asyncio.Event | None = None
    task: concurrent.futures.Future | None = None
    process: ExecProcess | None = None
    instance: str | None = None  # the sandbox's machine the process was started on
    failure: str | None = None  # why the session ended on its own
    ready: concurrent.futures.Future | None = None  # done when the session is up and its tools listed

    def describe(self) -> str:
        if self.cfg.type == "stdio":
            if not self.cfg.command:
                return repr(self.cfg.name)
            return f"{self.cfg.name!r} ({shlex.join([self.cfg.command or '', *self.cfg.args])})"
        return f"{self.cfg.name!r} ({self.cfg.url})"


class McpHub:
    """The run's MCP servers and their tools, with sync methods for the loop."""

    def __init__(self, servers: list[McpServerConfig], *, start_timeout: float = 120.0,
                 call_timeout: float = 300.0, reserved: set[str] | None = None,
                 progress: Callable[[str], None] | None = None) -> None:
        self.servers = [_Server(cfg) for cfg in servers]
        self.start_timeout, self.call_timeout = start_timeout, call_timeout
        self.reserved = set(reserved or ())  # names already taken (the built-in tools)
        self.routes: dict[str, tuple[_Server, str]] = {}  # public name -> (server, the server's tool name)
        self.known: set[str] = set()  # names the model may call: routes, and stored names that vanished
        self.annotations: dict[str, dict[str, Any]] = {}  # public name -> the tool's hints (agent/approvals.py)
        self.warnings: list[str] = []
        self._specs: list[dict[str, Any]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._sandbox: Sandbox | None = None
        self._say = progress or (lambda _line: None)

    # The sync face

    def start(self, sandbox: Sandbox) -> None:
        """Start every server and list its tools. SandboxError naming the server (and its stderr) if one
        does not start; then none is left running."""
        self._sandbox = sandbox
        self._start_loop()
        started = time.monotonic()
        self._say(f"starting {len(self.servers)} MCP server{'s' * (len(self.servers) != 1)}: "
                  + ", ".join(s.cfg.name for s in self.servers))
        try:
            for server in self.servers:  # all at once: a slow server does not hold up the others
                self._launch(server)
            for server in self.servers:
                self._wait_ready(server)
        except BaseException:
            self.close()
            raise
        self._name_tools()
        self._say(f"MCP servers ready in {time.monotonic() - started:.1f} s: {len(self._specs)} tools")

    def tools(self) -> list[dict[str, Any]]:
        """The MCP tools as OpenAI function specs, in their fixed order."""
        return [dict(spec) for spec in self._specs]

    def adopt(self, stored: list[dict[str, Any]]) -> list[str]:
        """For a resume: the run keeps its stored tool list. Returns what differs from the servers' list
        now (one line each); a stored tool that is gone is answered with an error when it is called."""
        now = {s["function"]["name"]: s for s in self._specs}
        before = {s["function"]["name"]: s for s in stored}
        changes = [f"{name} is gone" for name in before if name not in now]
        changes += [f"{name} is new (not offered: the tool list of a run is fixed)" for name in now if name not in before]
        changes += [f"{name} changed its description or arguments" for name in before
                    if name in now and json.dumps(now[name], sort_keys=True) != json.dumps(before[name], sort_keys=True)]
        self.known = set(before)
        for name in now:
            if name not in before:
                self.routes.pop(name)
        return changes

    def as_tools(self, specs: list[dict[str, Any]]) -> list[Tool]:
        """The run's MCP tools for its registry, one object each: `specs` is the run's stored list of them
        (a tool it lists that the servers no longer offer is answered with an error when called)."""

        def handler(args: dict[str, Any], ctx: ToolContext) -> Observation:
            # Offload of a big result and the error flag are the loop's, as for the built-in tools.
            text, is_error = self.call(ctx.call.name, args)
            return Observation(text, error=is_error)

        return [Tool(spec, handler, checks_arguments=False,  # the server checks them
                     annotations=self.annotations.get(spec["function"]["name"], {})) for spec in specs]

    def call(self, name: str, args: dict[str, Any]) -> tuple[str, bool]:
        """Run one tool; (its text, whether it is an error). Never raises for the server's failures."""
        route = self.routes.get(name)
        if route is None:
            if name in self.known:
                return (f"error: the tool {name} is no longer offered by its MCP server (the servers were started "
                        "again for this resumed run and do not list it)"), True
            return f"error: {name} is not an MCP tool of this run", True
        server, tool = route
        restarted = ""
        if self._needs_restart(server):
            why = self._down_reason(server)
            try:
                self._restart(server)
                restarted = f"\n[the MCP server {server.cfg.name} was started again before this call: {why}]"
            except SandboxError as exc:
                return (f"error: the MCP server {server.cfg.name} is down ({why}) and did not start again: "
                        f"{exc.message}; the next call tries again"), True
        try:
            result = self._run(self._call(server, tool, args), self.call_timeout + 15)
        except TimeoutError:
            return f"error: {name} gave no answer within {self.call_timeout:g} s", True
        except Exception as exc:  # noqa: BLE001 - any failure of the server is a result the model sees
            return f"error: the MCP server {server.cfg.name} failed on {tool}: {self._failure(server, exc)}{restarted}", True
        return format_result(result) + restarted, bool(sdk_field(result, "is_error", "isError"))

    def _failure(self, server: _Server, exc: BaseException) -> str:
        """Why a call failed: the session's error, and whether the server's process is gone (then with its
        exit code and stderr, and what happens next)."""
        detail = _explain(exc)
        process = server.process
        if server.cfg.type != "stdio" or process is None:
            return detail
        if not process.ended:  # the stream may still be closing: give it a moment to say so
            deadline = time.monotonic() + 1.0
            while not process.ended and time.monotonic() < deadline:
                time.sleep(0.02)
        tail = process.stderr_tail()
        if process.ended:
            code = self._exit_code(server)
            exited = "it exited" + (f" with exit code {code}" if code is not None else "")
            return (f"{detail}; {exited}" + (f", its stderr ended with: {tail}" if tail else "")
                    + "; it will be started again at the next call of one of its tools")
        return detail + (f" (its stderr ended with: {tail})" if tail else "")

    def _down_reason(self, server: _Server) -> str:
        """Why a server must be started again, in words that are true."""
        if server.cfg.type == "stdio" and self._restarted_sandbox(server):
            return "its sandbox was restarted"
        if server.cfg.type == "stdio" and server.process is not None and server.process.ended:
            code = self._exit_code(server)
            return "it had exited" + (f" with exit code {code}" if code is not None else "")
        return server.failure or "its session had ended"

    def _exit_code(self, server: _Server) -> int | None:
        """The exit code of a stdio server's process, once it has one."""
        return server.process.exit_code() if server.process is not None else None

    def close(self) -> None:
        """Stop the sessions (stdio servers get EOF on stdin) and the event loop; calling it twice is fine."""
        loop = self._loop
        if loop is None:
            return
        for server in self.servers:
            self._stop(server)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(CLOSE_SECONDS)
        self._loop = self._thread = None

    # Servers

    def _start_loop(self) -> None:
        if self._loop is not None:
            return
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            loop.run_forever()
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()

        self._thread = threading.Thread(target=run, name="cairn-mcp", daemon=True)
        self._thread.start()
        ready.wait()
        self._loop = loop

    def _launch(self, server: _Server) -> None:
        ready: concurrent.futures.Future = concurrent.futures.Future()
        server.failure, server.session = None, None
        server.task = asyncio.run_coroutine_threadsafe(self._serve(server, ready), self._loop)
        server.ready = ready

    def _wait_ready(self, server: _Server) -> None:
        try:
            server.ready.result(self.start_timeout + 10)
        except concurrent.futures.TimeoutError:
            raise self._start_failed(server, f"no answer within {self.start_timeout:g} s") from None
        except SandboxError:
            raise
        except BaseException as exc:  # noqa: BLE001 - the server's own failure, told with its stderr
            raise self._start_failed(server, _explain(exc)) from None

    def _start_failed(self, server: _Server, reason: str) -> SandboxError:
        tail = server.process.stderr_tail() if server.process is not None else ""
        code = self._exit_code(server)
        where = " in the sandbox" if server.cfg.type == "stdio" else ""
        message = f"the MCP server {server.describe()} did not start{where}: {reason}"
        if code is not None:
            message += f" (exit code {code})"
        if tail:
            message += f"; its stderr ended with: {tail}"
        hint = self._missing_hint(server) if server.cfg.type == "stdio" else None
        return SandboxError(message, hint=hint)

    def _missing_hint(self, server: _Server) -> str | None:
        """What is really missing for a stdio server that did not start: its command in the image (asked of
        the sandbox itself), or, when the command is there, nothing cairn can name."""
        argv = server_argv(server.cfg)
        command = argv[0]
        sandbox = self._sandbox
        if sandbox is None or sandbox.has_command(command) is not False:
            return None  # it is there (or the sandbox cannot say): nothing cairn can name
        image = sandbox.image
        if Path(command).name == "node":
            return (f"the image {image} has no Node.js: cairn installs npx servers itself (with Node.js), but "
                    "`node SCRIPT` runs as it is; use an --image with node")
        return (f"`{command}` is not in the image {image}: cairn installs the packages of uvx, pipx and npx "
                "servers itself; any other command must be in the image (--image)")

    async def _serve(self, server: _Server, ready: concurrent.futures.Future) -> None:
        """The server's whole life, in one task: the SDK's context managers enter and exit here."""
        from mcp import ClientSession

        server.stop = asyncio.Event()
        try:
            async with AsyncExitStack() as stack:
                if server.cfg.type == "stdio":
                    sandbox = self._sandbox
                    server.process = ExecProcess()
                    server.instance = sandbox.instance
                    env = {"HOME": "/home/cairn", **server.cfg.env}
                    read, write = await stack.enter_async_context(exec_stdio_client(
                        sandbox, server_argv(server.cfg), env, server.cfg.cwd or sandbox.cfg.workdir, server.process))
                else:
                    read, write = await stack.enter_async_context(http_client(server.cfg))
                session = await stack.enter_async_context(ClientSession(read, write))
                with anyio.fail_after(self.start_timeout):
                    await session.initialize()
                    tools = await _list_tools(session)
                tools = self._filter(server.cfg, tools)
                server.tools, server.session = tools, session
                ready.set_result(None)
                await server.stop.wait()
        except BaseException as exc:  # noqa: BLE001 - told to the waiting start, or to the next call
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(_explain(exc)))
            else:
                server.failure = _explain(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            server.session = None
            if server.failure is None and ready.done() and not server.stop.is_set():
                server.failure = "the server's session ended"

    def _filter(self, cfg: McpServerConfig, tools: list[Any]) -> list[Any]:
        """The tools allowed_tools (or tools.include) keeps and tools.exclude does not leave out; a name
        the server does not offer is a warning (a typo, or a server that changed)."""
        names = {t.name for t in tools}
        for key, listed in (("allowed_tools", cfg.allowed_tools), ("tools.exclude", cfg.excluded_tools)):
            missing = [n for n in listed or () if n not in names]
            if missing:
                self.warnings.append(f"MCP server {cfg.name}: {key} names {', '.join(missing)}, which it does not offer")
        if cfg.allowed_tools is not None:
            tools = [t for t in tools if t.name in cfg.allowed_tools]
        return [t for t in tools if t.name not in (cfg.excluded_tools or ())]

    def _stop(self, server: _Server) -> None:
        if server.stop is not None and self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(server.stop.set)
        if server.task is not None:
            try:
                server.task.result(CLOSE_SECONDS)
            except Exception:  # noqa: BLE001 - it is being stopped; how it ends does not matter
                pass
        server.task = None

    def _needs_restart(self, server: _Server) -> bool:
        if server.session is None:
            return True
        if server.cfg.type != "stdio":
            return False
        return (server.process is not None and server.process.ended) or self._restarted_sandbox(server)

    def _restarted_sandbox(self, server: _Server) -> bool:
        """The sandbox runs on another machine than the one the server's process was started on."""
        instance = self._sandbox.instance if self._sandbox is not None else None
        return instance is not None and instance != server.instance

    def _restart(self, server: _Server) -> None:
        """After the sandbox was restarted (or the server died): the same server, in the current sandbox.
        Its tools keep their names; a tool it no longer lists is answered with an error."""
        if server.cfg.type == "stdio" and self._sandbox is not None:
            try:  # a call heals the sandbox: a dead container is replaced by a fresh one on the workspace
                self._sandbox.call("ping")
            except Exception:  # noqa: BLE001 - the launch below says what is wrong
                pass
        reason = server.failure
        self._stop(server)
        self._launch(server)
        self._wait_ready(server)
        server.failure = reason
        listed = {t.name for t in server.tools}
        for name, (owner, tool) in list(self.routes.items()):
            if owner is server and tool not in listed:
                del self.routes[name]
            elif owner.cfg.name == server.cfg.name:
                self.routes[name] = (server, tool)

    def _name_tools(self) -> None:
        counts = Counter(t.name for s in self.servers for t in s.tools)
        taken = set(self.reserved)
        specs = []
        for server in self.servers:
            for tool in sorted(server.tools, key=lambda t: t.name):
                clash = counts[tool.name] > 1 or clean_name(tool.name) in self.reserved
                public = clean_name(f"{server.cfg.name}__{tool.name}" if clash else tool.name)
                public = unique_name(public, taken)
                self.routes[public] = (server, tool.name)
                self.annotations[public] = hints(tool)
                specs.append(mcp_spec(public, tool))
        self._specs = specs
        self.known = set(self.routes)

    # The event loop

    def _run(self, coroutine: Any, timeout: float) -> Any:
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError from None

    async def _call(self, server: _Server, tool: str, args: dict[str, Any]) -> Any:
        with anyio.fail_after(self.call_timeout):
            return await server.session.call_tool(tool, args)


async def _list_tools(session: Any) -> list[Any]:
    """tools/list, following the cursor."""
    result = await session.list_tools()
    tools = list(result.tools)
    while cursor := sdk_field(result, "next_cursor", "nextCursor"):
        try:
            from mcp.types import PaginatedRequestParams

            result = await session.list_tools(params=PaginatedRequestParams(cursor=cursor))
        except (ImportError, TypeError):  # mcp 1.x
            result = await session.list_tools(cursor=cursor)
        tools += list(result.tools)
    return tools


def _explain(exc: BaseException) -> str:
    """One line for an exception, unwrapping the exception groups of anyio's task groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return "timed out"
    text = first_line(exc) if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__

