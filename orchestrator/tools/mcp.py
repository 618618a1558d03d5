"""MCP servers as tools of a run, through the official `mcp` SDK.

    hub = McpHub(cfg.mcp.servers, start_timeout=60, call_timeout=300)
    hub.start(sandbox)                 # stdio servers start in the sandbox, http/sse are reached from the host
    hub.tools()                        # OpenAI function specs: server order, then tool name
    hub.call("get_current_time", {"timezone": "UTC"})   # -> (text, is_error)
    hub.close()

Where the servers run:
- stdio servers run INSIDE the run's sandbox: their process is started in the container with a docker
  exec (stdin attached, no TTY), and the host's `ClientSession` speaks to it over that exec's socket
  (`exec_stdio_client`, modelled on the SDK's `stdio_client`; the frames are split by the toolbox
  client's `Demux`). They see /workspace and the sandbox's network setting, never the host.
- http (streamable HTTP) and sse servers are reached from the host, like the model's API.

The SDK is async (anyio): all sessions live in one event loop, on one background thread the hub owns;
the hub's methods are plain sync calls for the loop.

Tool names: the tools of all servers join the run's fixed tool list once, at its start, in server
order and then by tool name. A tool keeps its own name unless another server (or a built-in tool) has
the same one; then it becomes `<server>__<tool>`. Names are cut to `^[a-zA-Z0-9_-]{1,64}$`.
`allowed_tools` of a server keeps only the tools it names.

Packages (the uvx rule): the sandbox has no network, so a server that tiny-agents would fetch at start
is installed into a derived image instead, built once and cached by a hash:
- `uvx [--from SPEC] [--with REQ]… PKG[@VERSION] ARGS…` (and `uv tool run …`) and
  `pipx run [--spec SPEC] PKG[==VERSION] ARGS…`: cairn builds `cairn-tools:<hash>` FROM the sandbox image,
  with `RUN python3 -m venv /opt/cairn-tools/<PKG> && pip install SPEC`, and runs
  `/opt/cairn-tools/<PKG>/bin/<PKG>` (or the command named after `--from`) with ARGS instead.
  `@latest` means no pin. Options that need a network at run time (`--refresh`, `--index-url`…) are
  honoured at build time where pip has an equivalent, and ignored otherwise.
- `npx …` needs Node.js, which cairn's image does not have: such a server runs unchanged, so it works
  only with an --image that has node and, for a package not yet in the image, --network bridge.
- any other command runs as it is.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import re
import shlex
import socket
import tempfile
import threading
from collections import Counter
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import anyio

from orchestrator.config import McpServerConfig
from orchestrator.errors import SandboxError, UsageError
from orchestrator.sandbox.toolbox_client import Demux, open_exec

TOOLS_ROOT = "/opt/cairn-tools"
TOOLS_REPOSITORY = "cairn-tools"
NAME_LIMIT = 64
_BAD_NAME_CHARS = re.compile(r"[^a-zA-Z0-9_-]+")
STDERR_TAIL_LINES = 5
CLOSE_SECONDS = 5.0

# -- packages: the uvx rule ----------------------------------------------------------------------


@dataclass(frozen=True)
class Package:
    name: str  # the distribution, as written (also the folder under /opt/cairn-tools)
    requirements: tuple[str, ...]  # what pip installs: the package spec, then --with ones
    entry: str  # the console script to run
    launcher: str  # "uvx", "pipx run"
    args: tuple[str, ...] = ()  # the server's own arguments

    @property
    def argv(self) -> list[str]:
        return [f"{TOOLS_ROOT}/{self.folder}/bin/{self.entry}", *self.args]

    @property
    def folder(self) -> str:
        return _BAD_NAME_CHARS.sub("_", self.name.lower())


_UVX_FLAGS = {"-q", "--quiet", "-v", "--verbose", "--refresh", "--isolated", "--offline", "-n", "--no-cache",
              "--no-progress", "--native-tls", "--no-config", "--no-python-downloads", "--prerelease=allow"}
_UVX_VALUED = {"--python", "-p", "--index-url", "--default-index", "--index", "--extra-index-url",
               "--cache-dir", "--directory", "--with-requirements", "--python-preference", "--env-file"}
_PIP_INDEX = {"--index-url": "--index-url", "--default-index": "--index-url", "--index": "--extra-index-url",
              "--extra-index-url": "--extra-index-url"}


def package_of(command: str, args: list[str]) -> Package | None:
    """The package a stdio server's command would fetch at start (uvx, uv tool run, pipx run), or None."""
    base = Path(command).name
    if base == "uvx":
        return _parse_uvx(list(args), "uvx")
    if base == "uv" and args[:2] == ["tool", "run"]:
        return _parse_uvx(list(args[2:]), "uv tool run")
    if base == "pipx" and args[:1] == ["run"]:
        return _parse_pipx(list(args[1:]))
    return None


def _parse_uvx(args: list[str], launcher: str) -> Package:
    source: str | None = None
    extra: list[str] = []
    index: list[str] = []
    while args and args[0].startswith("-"):
        option = args.pop(0)
        key, _, inline = option.partition("=")
        if option in _UVX_FLAGS or key in _UVX_FLAGS:
            continue
        if key in ("--from", "--with") or key in _UVX_VALUED:
            value = inline or (args.pop(0) if args else "")
            if not value:
                raise UsageError(f"`{launcher} {option}` needs a value")
            if key == "--from":
                source = value
            elif key == "--with":
                extra += [v for v in value.split(",") if v]
            elif key in _PIP_INDEX:
                index += [_PIP_INDEX[key], value]
            continue
        raise UsageError(f"cairn cannot turn `{launcher} {option}` into an install in the sandbox image; "
                         f"run the server another way, or write its command out")
    if not args:
        raise UsageError(f"`{launcher}` names no package to run")
    command = args.pop(0)
    if source:
        requirement, name = _requirement(source)
        entry = command
    else:
        requirement, name = _requirement(command)
        entry = name
    return Package(name=name, requirements=(requirement, *extra, *index), entry=entry, launcher=launcher,
                   args=tuple(args))


def _parse_pipx(args: list[str]) -> Package:
    spec: str | None = None
    while args and args[0].startswith("-"):
        option = args.pop(0)
        key, _, inline = option.partition("=")
        if key == "--spec":
            spec = inline or (args.pop(0) if args else "")
        elif key in ("--python", "--pip-args", "--index-url"):
            _ = inline or (args.pop(0) if args else "")
        elif key in ("--no-cache", "--verbose", "-v", "--quiet", "-q", "--system-site-packages"):
            continue
        else:
            raise UsageError(f"cairn cannot turn `pipx run {option}` into an install in the sandbox image")
    if not args:
        raise UsageError("`pipx run` names no package to run")
    command = args.pop(0)
    requirement, name = _requirement(spec or command)
    entry = command if spec else name
    return Package(name=name, requirements=(requirement,), entry=entry, launcher="pipx run", args=tuple(args))


_REQ = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?(.*)$")


def _requirement(text: str) -> tuple[str, str]:
    """(pip requirement, distribution name) of `PKG`, `PKG@1.2`, `PKG@latest`, `PKG[x]==1.2`, `PKG>=1`."""
    match = _REQ.match(text.strip())
    if not match:
        raise UsageError(f"{text!r} is not a package name cairn understands")
    name, extras, rest = match.group(1), match.group(2) or "", match.group(3).strip()
    if rest.startswith("@"):
        version = rest[1:].strip()
        rest = "" if version in ("", "latest") else f"=={version}"
    return f"{name}{extras}{rest}", name


def tools_image(base: str, packages: list[Package], progress: Callable[[str], None] | None = None) -> str:
    """The image that is `base` plus a venv per package under /opt/cairn-tools: built once, then reused
    (its tag is a hash of the base image's id, the packages and the host's CA certificates)."""
    from orchestrator.sandbox import image as images
    from orchestrator.sandbox.engine import connect

    say = progress or (lambda _line: None)
    client = connect()
    try:
        base_attrs = client.api.inspect_image(base)
    except Exception as exc:  # noqa: BLE001 - ImageNotFound or an engine error: both are a clear SandboxError
        raise SandboxError(f"cannot read the sandbox image {base} to add the MCP servers' packages to it: {exc}")
    wanted = sorted({(p.folder, p.requirements, p.entry) for p in packages})
    cas = sorted(images.HOST_CA_DIR.glob("*.crt")) if images.HOST_CA_DIR.is_dir() else []
    digest = hashlib.sha256(json.dumps([base_attrs["Id"], wanted]).encode())
    for path in cas:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    tag = f"{TOOLS_REPOSITORY}:{digest.hexdigest()[:12]}"
    user = (base_attrs.get("Config") or {}).get("User") or "root"
    lines = [f"FROM {base}", "USER root"]
    if cas:  # the base may be a user's own image, without the proxy's CA: pip must trust it to fetch
        lines += ["COPY extra-ca/ /usr/local/share/ca-certificates/",
                  "RUN update-ca-certificates >/dev/null 2>&1 || true"]
    for folder, requirements, entry in wanted:
        venv = f"{TOOLS_ROOT}/{folder}"
        pip_args = " ".join(shlex.quote(r) for r in requirements)
        lines.append(
            f"RUN set -eux; export PIP_CERT=${{PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}}; "
            f"python3 -m venv {venv}; {venv}/bin/pip install --no-cache-dir --disable-pip-version-check "
            f"{pip_args}; test -x {venv}/bin/{shlex.quote(entry)} || "
            f"{{ echo 'the package installs no command named {entry}; its commands are:'; ls {venv}/bin; exit 1; }}")
    lines += [f"USER {user}", f"LABEL org.cairn.tools={shlex.quote(json.dumps([list(w[1]) for w in wanted]))}"]
    with images._build_lock():
        if images._image_exists(client, tag):
            return tag
        say(f"building {tag}: {', '.join(r for w in wanted for r in w[1][:1])} on {base}")
        with tempfile.TemporaryDirectory(prefix="cairn-tools-") as context:
            (Path(context) / "Dockerfile").write_text("\n".join(lines) + "\n")
            (Path(context) / "extra-ca").mkdir()
            for path in cas:
                (Path(context) / "extra-ca" / path.name).write_bytes(path.read_bytes())
            try:
                images._docker_build(client, Path(context), tag, {}, say)
            except SandboxError as exc:
                raise SandboxError(f"installing the MCP servers' packages failed: {exc.message}", hint=exc.hint) from exc
    return tag


def image_for(base: str, servers: list[McpServerConfig], progress: Callable[[str], None] | None = None) -> str:
    """`base`, or the derived image with the packages the stdio servers fetch with uvx or pipx."""
    packages = [p for s in servers if s.type == "stdio" and (p := package_of(s.command or "", s.args))]
    return tools_image(base, packages, progress) if packages else base


def server_argv(server: McpServerConfig) -> list[str]:
    package = package_of(server.command or "", server.args)
    return package.argv if package else [server.command or "", *server.args]


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


# -- the hub -------------------------------------------------------------------------------------


@dataclass
class _Server:
    cfg: McpServerConfig
    session: Any = None
    tools: list[Any] = field(default_factory=list)  # the SDK's Tool objects, after allowed_tools
    stop: asyncio.Event | None = None
    task: concurrent.futures.Future | None = None
    process: ExecProcess | None = None
    container_id: str | None = None
    failure: str | None = None  # why the session ended on its own
    ready: concurrent.futures.Future | None = None  # done when the session is up and its tools listed

    def describe(self) -> str:
        if self.cfg.type == "stdio":
            return f"{self.cfg.name!r} ({shlex.join([self.cfg.command or '', *self.cfg.args])})"
        return f"{self.cfg.name!r} ({self.cfg.url})"


class McpHub:
    """The run's MCP servers and their tools, with sync methods for the loop."""

    def __init__(self, servers: list[McpServerConfig], *, start_timeout: float = 120.0,
                 call_timeout: float = 300.0, reserved: set[str] | None = None) -> None:
        self.servers = [_Server(cfg) for cfg in servers]
        self.start_timeout, self.call_timeout = start_timeout, call_timeout
        self.reserved = set(reserved or ())  # names already taken (the built-in tools)
        self.routes: dict[str, tuple[_Server, str]] = {}  # public name -> (server, the server's tool name)
        self.known: set[str] = set()  # names the model may call: routes, and stored names that vanished
        self.warnings: list[str] = []
        self._specs: list[dict[str, Any]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._sandbox: Any = None

    # The sync face

    def start(self, sandbox: Any) -> None:
        """Start every server and list its tools. SandboxError naming the server (and its stderr) if one
        does not start; then none is left running."""
        self._sandbox = sandbox
        self._start_loop()
        try:
            for server in self.servers:  # all at once: a slow server does not hold up the others
                self._launch(server)
            for server in self.servers:
                self._wait_ready(server)
        except BaseException:
            self.close()
            raise
        self._name_tools()

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
            try:
                self._restart(server)
                restarted = f"\n[the MCP server {server.cfg.name} was started again first: {server.failure or 'its sandbox was restarted'}]"
            except SandboxError as exc:
                return f"error: the MCP server {server.cfg.name} is down and did not start again: {exc.message}", True
        try:
            result = self._run(self._call(server, tool, args), self.call_timeout + 15)
        except TimeoutError:
            return f"error: {name} gave no answer within {self.call_timeout:g} s", True
        except Exception as exc:  # noqa: BLE001 - any failure of the server is a result the model sees
            detail = _explain(exc)
            if server.process is not None and server.process.stderr_tail():
                detail += f" (its stderr ended with: {server.process.stderr_tail()})"
            return f"error: the MCP server {server.cfg.name} failed on {tool}: {detail}{restarted}", True
        return format_result(result) + restarted, bool(_field(result, "is_error", "isError"))

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
        code = None
        if server.process is not None and server.process.exec_id and self._sandbox is not None:
            try:
                code = self._sandbox.client.api.exec_inspect(server.process.exec_id).get("ExitCode")
            except Exception:  # noqa: BLE001 - only a detail of the message
                code = None
        where = " in the sandbox" if server.cfg.type == "stdio" else ""
        message = f"the MCP server {server.describe()} did not start{where}: {reason}"
        if code is not None:
            message += f" (exit code {code})"
        if tail:
            message += f"; its stderr ended with: {tail}"
        hint = None
        if server.cfg.type == "stdio" and Path(server.cfg.command or "").name in ("npx", "node"):
            hint = "cairn's sandbox image has no Node.js: use an --image with node (and --network bridge for npx)"
        elif code in (126, 127):
            hint = "the command is not in the sandbox image; uvx and pipx servers are installed by cairn, others must be in the image"
        return SandboxError(message, hint=hint)

    async def _serve(self, server: _Server, ready: concurrent.futures.Future) -> None:
        """The server's whole life, in one task: the SDK's context managers enter and exit here."""
        from mcp import ClientSession

        server.stop = asyncio.Event()
        try:
            async with AsyncExitStack() as stack:
                if server.cfg.type == "stdio":
                    sandbox = self._sandbox
                    server.process = ExecProcess()
                    server.container_id = sandbox.container.id
                    env = {"HOME": "/home/cairn", **server.cfg.env}
                    read, write = await stack.enter_async_context(exec_stdio_client(
                        sandbox.client.api, sandbox.container.id, server_argv(server.cfg), env,
                        server.cfg.cwd or "/workspace", server.process))
                else:
                    read, write = await stack.enter_async_context(http_client(server.cfg))
                session = await stack.enter_async_context(ClientSession(read, write))
                with anyio.fail_after(self.start_timeout):
                    await session.initialize()
                    tools = await _list_tools(session)
                allowed = server.cfg.allowed_tools
                if allowed is not None:
                    names = {t.name for t in tools}
                    missing = [n for n in allowed if n not in names]
                    if missing:
                        self.warnings.append(f"MCP server {server.cfg.name}: allowed_tools names "
                                             f"{', '.join(missing)}, which it does not offer")
                    tools = [t for t in tools if t.name in allowed]
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
        container = getattr(self._sandbox, "container", None)
        return (server.process is not None and server.process.ended) or \
            (container is not None and container.id != server.container_id)

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
                clash = counts[tool.name] > 1 or _clean(tool.name) in self.reserved
                public = _clean(f"{server.cfg.name}__{tool.name}" if clash else tool.name)
                public = _unique(public, taken)
                self.routes[public] = (server, tool.name)
                specs.append(_spec(public, tool))
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
    while cursor := _field(result, "next_cursor", "nextCursor"):
        try:
            from mcp.types import PaginatedRequestParams

            result = await session.list_tools(params=PaginatedRequestParams(cursor=cursor))
        except (ImportError, TypeError):  # mcp 1.x
            result = await session.list_tools(cursor=cursor)
        tools += list(result.tools)
    return tools


def _spec(name: str, tool: Any) -> dict[str, Any]:
    schema = dict(_field(tool, "input_schema", "inputSchema") or {})
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    description = getattr(tool, "description", None) or getattr(tool, "title", None) or f"The MCP tool {tool.name}."
    return json.loads(json.dumps(
        {"type": "function", "function": {"name": name, "description": description, "parameters": schema}},
        sort_keys=True))


def _clean(name: str) -> str:
    return (_BAD_NAME_CHARS.sub("_", name).strip("_") or "tool")[:NAME_LIMIT]


def _unique(name: str, taken: set[str]) -> str:
    candidate, n = name, 2
    while candidate in taken:
        suffix = f"_{n}"
        candidate, n = name[: NAME_LIMIT - len(suffix)] + suffix, n + 1
    taken.add(candidate)
    return candidate


def format_result(result: Any) -> str:
    """A CallToolResult as text, as tiny-agents formats it; binary parts are described, not inlined."""
    parts = []
    for item in getattr(result, "content", None) or []:
        kind = getattr(item, "type", None)
        if kind == "text":
            parts.append(item.text)
        elif kind in ("image", "audio"):
            parts.append(f"[{kind} {_field(item, 'mime_type', 'mimeType') or ''}, about {len(item.data) * 3 // 4} bytes; "
                         "not shown]")
        elif kind == "resource":
            resource = item.resource
            text = getattr(resource, "text", None)
            parts.append(text if isinstance(text, str) else f"[binary resource {resource.uri}, not shown]")
        elif kind == "resource_link":
            parts.append(f"[resource {getattr(item, 'uri', '')}]")
    structured = _field(result, "structured_content", "structuredContent")
    if not parts and structured is not None:
        parts.append(json.dumps(structured, ensure_ascii=False, sort_keys=True))
    return "\n".join(parts) if parts else "[no content]"


def _field(obj: Any, snake: str, camel: str) -> Any:
    """A field of an SDK object: mcp 2.x names them in snake_case, 1.x in camelCase."""
    value = getattr(obj, snake, None)
    return value if value is not None else getattr(obj, camel, None)


def _explain(exc: BaseException) -> str:
    """One line for an exception, unwrapping the exception groups of anyio's task groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return "timed out"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__
