"""The host half of the toolbox protocol (sandbox_image/PROTOCOL.md).

The toolbox is started once with one `docker exec`; its stdin and stdout, carried over the exec's
socket, are the protocol's two directions. Without a TTY the engine multiplexes the exec's stdout and
stderr on that socket in frames: an 8-byte header (stream: 1 stdout, 2 stderr; 3 padding bytes; the
payload length, big-endian) then the payload. Stdout frames carry the JSON lines; stderr frames are
the toolbox's diagnostics, kept to explain its death.
"""

from __future__ import annotations

import json
import select
import socket
import struct
import threading
import time

import docker

from orchestrator.errors import SandboxError

HEADER = struct.Struct(">BxxxL")
STDERR = 2
KEEP_STDERR = 8192  # bytes of the toolbox's stderr kept for error messages


class Demux:
    """Sorts the bytes of a non-TTY exec's socket into stdout payload and a tail of stderr.

    Shared by the toolbox client and the MCP stdio transport (orchestrator/tools/mcp_transport.py): both speak to
    one process in the container over one exec socket.
    """

    def __init__(self, keep_stderr: int = KEEP_STDERR) -> None:
        self.keep_stderr = keep_stderr
        self.stderr = bytearray()  # the last `keep_stderr` bytes the process wrote on stderr
        self._frames = bytearray()  # received, not yet split into frames

    def feed(self, data: bytes) -> bytes:
        """Add bytes read from the socket; return the stdout payload of the frames they complete."""
        frames = self._frames
        frames += data
        stdout = bytearray()
        start = 0
        while len(frames) - start >= HEADER.size:
            stream, size = HEADER.unpack_from(frames, start)
            if len(frames) - start - HEADER.size < size:
                break
            payload = frames[start + HEADER.size: start + HEADER.size + size]
            start += HEADER.size + size
            if stream == STDERR:
                self.stderr += payload
                del self.stderr[:-self.keep_stderr]
            else:
                stdout += payload
        del frames[:start]
        return bytes(stdout)

    def stderr_lines(self, count: int = 1, width: int = 300) -> list[str]:
        """The last `count` non-blank lines of stderr, each cut to `width` characters."""
        lines = [line for line in bytes(self.stderr).decode("utf-8", "replace").splitlines() if line.strip()]
        return [line[:width] for line in lines[-count:]]


def open_exec(api: docker.APIClient, container_id: str, argv: list[str], *,
              environment: dict[str, str] | None = None,
              workdir: str | None = None) -> tuple[str, object, socket.socket, bytes]:
    """Start `argv` in the container with stdin attached and no TTY; return (exec id, the response
    object that must be kept alive, the raw socket to read and write, the first bytes of the stream
    that were already read off that socket: feed them to the Demux before anything received)."""
    exec_id = api.exec_create(container_id, argv, stdin=True, stdout=True, stderr=True, tty=False,
                              environment=environment, workdir=workdir)["Id"]
    stream = api.exec_start(exec_id, socket=True)
    # docker-py hands out a SocketIO over a unix socket (or the socket itself); we want the socket.
    sock = getattr(stream, "_sock", stream)
    early = _read_ahead(stream, sock)
    sock.settimeout(None)  # deadlines are kept by the callers
    return exec_id, stream, sock, early


def _read_ahead(stream: object, sock: socket.socket) -> bytes:
    """The bytes the HTTP client read past the response's headers into its buffer.

    The process may write before docker-py has parsed the engine's answer (a loaded machine, an
    ssh:// engine whose channel delivers both at once). Those bytes then sit in the response's read
    buffer, where a select() on the socket never sees them: CI lost the toolbox's ready line that way.
    """
    buffered = getattr(getattr(getattr(getattr(stream, "_response", None), "raw", None), "_fp", None), "fp", None)
    if isinstance(getattr(buffered, "_rbuffer", None), bytes):  # paramiko's ChannelFile (ssh://)
        early, buffered._rbuffer = buffered._rbuffer, b""
        return early
    if not hasattr(buffered, "peek"):
        return b""
    sock.setblocking(False)  # peek() then gives what is buffered without waiting for more
    try:
        early = buffered.peek(1 << 16)
        return buffered.read(len(early)) if early else b""
    except OSError:  # a TLS socket wants more before it can say (its bytes stay readable there)
        return b""
    finally:
        sock.setblocking(True)


class ToolboxDied(SandboxError):
    """The toolbox is gone or stuck: its stream ended, a write failed, or no answer came in time."""


class ToolboxClient:
    """One toolbox process in one container, and the JSON-line conversation with it. Several threads may
    each have a request in flight (read-only ops go together: sandbox/calls.py's OpGate says which may
    be sent); whichever of them is reading the stream hands the others their answers, by id."""

    def __init__(self, api: docker.APIClient, container_id: str, argv: list[str]) -> None:
        self.api, self.container_id, self.argv = api, container_id, argv
        self.exec_id: str | None = None
        self.ready: dict = {}
        self._sock: socket.socket | None = None
        self._demux = Demux()
        self._stdout = bytearray()  # stdout payload, not yet split into lines
        self._next_id = 0
        self._dead: str | None = None
        self._sending = threading.Lock()  # requests, and an interrupt, come from several threads
        self._arrived = threading.Condition()  # guards what follows
        self._answers: dict[int, dict] = {}  # answers read for requests that wait for them
        self._waiting: set[int] = set()
        self._reading = False  # a thread is reading the stream

    def start(self, timeout: float) -> dict:
        """Start the toolbox and wait for its ready line; return the ready result (pid, uid, version)."""
        # self._stream holds the HTTP response, which would close the socket if collected.
        self.exec_id, self._stream, self._sock, early = open_exec(self.api, self.container_id, self.argv)
        self._stdout += self._demux.feed(early)
        message = self._read_message(time.monotonic() + timeout, "the ready line")
        if message.get("id") != 0 or not message.get("ok"):
            raise ToolboxDied(f"the toolbox's first line is not its ready line: {message!r:.200}")
        self.ready = message["result"]
        return self.ready

    def request(self, op: str, args: dict, timeout: float, call: str | None = None,
                recorded: list[str] | None = None) -> dict:
        """Send one request and return its response ({"id", "ok", "result" | "error"}).

        `call`: the key of the tool call this request carries out; the toolbox then journals its start
        and its outcome (PROTOCOL.md, "The journal"). `recorded`: keys of calls whose outcomes the run
        has logged; the toolbox drops their records.

        Raises ToolboxDied if the toolbox is gone, or gives no answer within `timeout` seconds (then it is
        considered stuck: this client is done, and the caller starts a new toolbox).
        """
        with self._sending:
            if self._dead:
                raise ToolboxDied(self._dead)
            self._next_id += 1
            rid = self._next_id
            request = {"id": rid, "op": op, "args": args, **({"call": call} if call else {}),
                       **({"recorded": recorded} if recorded else {})}
            line = json.dumps(request, ensure_ascii=False) + "\n"
            with self._arrived:
                self._waiting.add(rid)
            try:
                self._sock.sendall(line.encode("utf-8", "surrogateescape"))
            except OSError as exc:  # EPIPE, ECONNRESET: the exec is over
                self._die(f"cannot write to the toolbox ({exc.strerror or exc})")
        try:
            return self._answer(rid, time.monotonic() + timeout, f"the answer to {op}")
        finally:
            with self._arrived:
                self._waiting.discard(rid)
                self._answers.pop(rid, None)

    def _answer(self, rid: int, deadline: float, waiting_for: str) -> dict:
        """The answer to request `rid`: read from the stream by this thread, or by another that is reading."""
        while True:
            with self._arrived:
                while True:
                    if rid in self._answers:
                        return self._answers.pop(rid)
                    if self._dead:
                        raise ToolboxDied(self._dead)
                    if not self._reading:
                        self._reading = True
                        break
                    left = deadline - time.monotonic()
                    if left <= 0:
                        self._dead = f"{waiting_for} did not come from the toolbox in time"
                        raise ToolboxDied(self._dead)
                    self._arrived.wait(left)
            try:
                message = self._read_message(deadline, waiting_for)
            finally:
                with self._arrived:
                    self._reading = False
                    self._arrived.notify_all()
            # An answer with no id (a request the toolbox could not read) is the reader's own.
            found = message.get("id")
            if found in (rid, None):
                return message
            with self._arrived:
                if found in self._waiting:  # else: the answer to a request nobody waits for any more
                    self._answers[found] = message
                    self._arrived.notify_all()

    def interrupt(self) -> bool:
        """Ask the toolbox to cut the requests that wait for their answers short (PROTOCOL.md, "Framing": an
        interrupt line); the one that can be (a command, a session's wait) answers at once. Safe from any
        thread; False when no request waits."""
        with self._arrived:
            waiting = sorted(self._waiting)
        if not waiting or self._dead:
            return False
        lines = b"".join(json.dumps({"op": "interrupt", "id": rid}).encode() + b"\n" for rid in waiting)
        with self._sending:
            try:
                self._sock.sendall(lines)
            except OSError:
                return False  # the requests' own reads will find the stream broken
        return True

    def alive(self) -> bool:
        """Whether the toolbox is still there, without waiting: a closed stream shows as readable. While
        another thread reads the stream, it is there as far as anyone can tell now."""
        with self._arrived:
            if self._dead:
                return False
            if self._reading:
                return True
            self._reading = True
        try:
            while select.select([self._sock], [], [], 0)[0]:
                self._receive()
        except ToolboxDied:
            return False
        finally:
            with self._arrived:
                self._reading = False
                self._arrived.notify_all()
        return True

    @property
    def diagnostics(self) -> str:
        """The last line the toolbox wrote on stderr, if any."""
        lines = self._demux.stderr_lines(1)
        return lines[-1] if lines else ""

    def close(self) -> None:
        """Close the stream; the toolbox sees EOF on stdin and exits."""
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:  # already disconnected
                pass
            self._sock.close()
            self._stream.close()
        self._dead = self._dead or "the toolbox connection was closed"

    # The byte stream

    def _read_message(self, deadline: float, waiting_for: str) -> dict:
        while True:
            end = self._stdout.find(b"\n")
            if end >= 0:
                line = bytes(self._stdout[:end])
                del self._stdout[: end + 1]
                if line.strip():
                    return json.loads(line)
                continue
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._sock], [], [], left)[0]:
                self._die(f"{waiting_for} did not come from the toolbox in time")
            self._receive()

    def _receive(self) -> None:
        """Read what the socket has, and sort complete frames into stdout and stderr."""
        try:
            data = self._sock.recv(1 << 20)
        except OSError as exc:
            self._die(f"the toolbox stream broke ({exc.strerror or exc})")
        if not data:
            self._die("the toolbox exited")
        self._stdout += self._demux.feed(data)

    def _die(self, reason: str) -> None:
        """Mark the toolbox dead and raise ToolboxDied, with its exit code and last words when known."""
        details = []
        if self.exec_id:
            try:
                code = self.api.exec_inspect(self.exec_id).get("ExitCode")
            except (docker.errors.DockerException, OSError):
                code = None  # the engine may be what went away; the reason says enough then
            if code is not None:
                details.append(f"exit code {code}")
        if self.diagnostics:
            details.append(self.diagnostics)
        self._dead = reason + (f" ({'; '.join(details)})" if details else "")
        raise ToolboxDied(self._dead)
