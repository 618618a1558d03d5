"""The toolbox's request loop: the ops of PROTOCOL.md, one method each.

One long-lived process, started once by the host, that answers JSON-line requests on stdin with
JSON-line responses on stdout. Each op's arguments are checked against its method's signature before it
runs; a request that carries a `call` key is journaled (journal.py) before it runs and before its
answer is sent, so a resume knows what became of it.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import time
import traceback

from . import files, web
from .capture import LIVE_OUTPUT, Capture, open_live
from .channel import Host
from .dispatch import serve
from .errors import HostGone, ToolError
from .journal import JOURNAL_NAME, Journal
from .sessions import SESSION_COLUMNS, SESSION_ROWS, Sessions
from .shell import Shell, container_env, run_fresh
from .workspace import CAIRN_DIR, WORKDIR, Workspace

VERSION = 1


class Toolbox:
    """The operations of PROTOCOL.md, one method each (`op_<name>`), on one workspace."""

    def __init__(self, ws: Workspace, journal: str | None = None, host: Host | None = None,
                 env: dict | None = None, watch_limits: bool = True) -> None:
        """`journal`: where the journal of tool calls goes (default: JOURNAL_NAME in cairn's files).
        `host`: the channel the host's requests come on (default: stdin). `env`: the environment of the
        agent's shell and of a check's fresh shell (default: the container's own). `watch_limits`: watch
        the container's process limit (a toolbox on the host, in tests, has none to watch)."""
        self.ws = ws
        self.host = host or Host()
        # A sandbox is the toolbox's machine; on the host (tests: --root maps the work directory, or the
        # local sandbox) processes that are not the shell's own are someone else's.
        self.shell = Shell(ws.root, self.host, env, watch_limits,
                           whole_machine=watch_limits and os.path.realpath(ws.name) == ws.root)
        self.fresh_env = container_env() if env is None else dict(env)  # see shell.run_fresh
        self.journal = Journal(journal or os.path.join(ws.cairn, JOURNAL_NAME))
        self.request_id = 0
        self._sessions: Sessions | None = None

    @property
    def sessions(self) -> Sessions:
        """Made at first use: most runs never start a terminal session."""
        if self._sessions is None:
            self._sessions = Sessions(self.ws, self.shell, self.host)
        return self._sessions

    def close(self) -> None:
        """End every session and the shell with what it left running (a toolbox on the host ends; in a
        container they would die with it)."""
        if self._sessions is not None:
            self._sessions.close_all()
        self.shell.close()

    def handle(self, line: bytes) -> dict:
        """The response to one request line. A request with a `call` key is journaled: its start before
        it runs, its response before it is sent; raises HostGone (after journaling it) when the host went
        away while its command ran. A request's `recorded` keys name calls whose records may go. Read-only
        ops may be handled on several threads at once (dispatch.py)."""
        try:
            request = json.loads(line)
        except ValueError as exc:
            return {"id": None, "ok": False, "error": f"bad request: {exc}"}
        call = request.get("call") if isinstance(request, dict) else None
        if not isinstance(call, str) or not call:
            if isinstance(request, dict) and request.get("recorded"):
                self.journal.forget(request["recorded"])
            return self.answer(request)
        self.journal.started(call, request)  # and the records of the calls the host says it recorded go
        began = time.monotonic()
        try:
            response = self.answer(request)
        except HostGone as gone:
            self.journal.killed(call, time.monotonic() - began, gone.capture.finish(self.ws))
            raise
        self.journal.finished(call, response)
        return response

    def answer(self, request: object) -> dict:
        try:
            rid, op, args = request.get("id"), request["op"], request.get("args") or {}
            method = getattr(self, f"op_{op}", None) if isinstance(op, str) else None
            if method is None:
                raise ToolError(f"unknown op {op!r}")
            _signature(method).bind(**args)
        except (ValueError, KeyError, AttributeError) as exc:
            return {"id": None, "ok": False, "error": f"bad request: {exc}"}
        except TypeError as exc:
            return {"id": rid, "ok": False, "error": f"bad arguments for {op}: {exc}"}
        except ToolError as exc:
            return {"id": rid, "ok": False, "error": str(exc)}
        self.request_id = self.host.current = rid
        try:
            return {"id": rid, "ok": True, "result": method(**args)}
        except ToolError as exc:
            return {"id": rid, "ok": False, "error": str(exc)}
        except OSError as exc:  # no such file, permission denied, disk full: the model can act on these
            where = exc.filename
            if isinstance(where, str) and where.startswith("/"):
                where = self.ws.rel(where)
            return {"id": rid, "ok": False, "error": f"{where}: {exc.strerror}" if where else str(exc)}
        except Exception as exc:  # a bug in the toolbox must not end the session; the traceback goes to stderr
            traceback.print_exc()
            return {"id": rid, "ok": False, "error": f"internal error in the toolbox: {type(exc).__name__}: {exc}"}

    # -- the ops: their signatures are the protocol's arguments ------------------------------------

    def op_ping(self) -> dict:
        return {"pid": os.getpid(), "uid": os.getuid()}

    def op_shell(self, command: str, timeout: float = 120.0, save_as: str | None = None,
                 inline_bytes: int = 256 * 1024, max_file_bytes: int = 200 * 1024 * 1024,
                 fresh: bool = False) -> dict:
        if not isinstance(command, str) or not command.strip():
            raise ToolError("command must be a non-empty string")
        if not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ToolError(f"timeout must be a positive number of seconds, not {timeout!r}")
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        default = f"{self.ws.cairn}/obs/shell-{stamp}-{self.request_id}.txt"
        chosen = self.ws.resolve(save_as) if save_as is not None else None  # a bad save_as fails before running

        def open_file():
            path = chosen or self.ws.resolve(default)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            return open(path, "wb"), path

        live = open_live(os.path.join(self.ws.cairn, LIVE_OUTPUT)) if not fresh else None
        capture = Capture(open_file, int(inline_bytes), int(max_file_bytes), live)
        try:
            if fresh:  # the check's own shell: nothing of the agent's shell exists in it
                result = run_fresh(command, self.ws.root, self.fresh_env, float(timeout), capture, self.host)
            else:
                result = self.shell.run(command, float(timeout), capture)
                self.shell.lower_leftovers()  # what it left running is not first in line for the OOM killer
        finally:
            if live is not None:
                live.close()
        return dict(result, **capture.finish(self.ws))

    def op_read(self, path: str, offset: int | None = None, limit: int | None = None,
                max_bytes: int = 256 * 1024) -> dict:
        return files.read(self.ws, path, offset, limit, max_bytes)

    def op_write(self, path: str, content: str) -> dict:
        return files.write(self.ws, path, content)

    def op_edit(self, path: str, old: str, new: str) -> dict:
        return files.edit(self.ws, path, old, new)

    def op_list(self, path: str = ".", depth: int = 2) -> dict:
        return files.listing(self.ws, path, depth)

    def op_fetch(self, url: str, save_as: str | None = None, timeout: float = 30.0) -> dict:
        return web.fetch(self.ws, url, save_as, timeout)

    def op_session_start(self, command: str, name: str | None = None, wait: float = 10.0,
                         inline_bytes: int = 256 * 1024, max_file_bytes: int = 200 * 1024 * 1024,
                         early: bool = True) -> dict:
        return self.sessions.start(command, name, wait, SESSION_COLUMNS, SESSION_ROWS, int(inline_bytes),
                                   int(max_file_bytes), early is not False)

    def op_session_send(self, name: str, keys: str = "", wait: float = 2.0, inline_bytes: int = 256 * 1024,
                        early: bool = True) -> dict:
        return self.sessions.send(name, keys, wait, int(inline_bytes), early is not False)

    def op_session_stop(self, name: str, inline_bytes: int = 256 * 1024) -> dict:
        return self.sessions.stop(name, int(inline_bytes))

    def op_sessions(self) -> dict:
        return self.sessions.listing()


_SIGNATURES: dict = {}


def _signature(method) -> inspect.Signature:
    if method.__name__ not in _SIGNATURES:
        _SIGNATURES[method.__name__] = inspect.signature(method)
    return _SIGNATURES[method.__name__]


def main(argv: list | None = None) -> None:
    parser = argparse.ArgumentParser(description="cairn's in-sandbox toolbox (JSON lines on stdin/stdout)")
    parser.add_argument("--workdir", default=WORKDIR, help="the work directory: relative paths and the shell "
                        "start there (default /workspace)")
    parser.add_argument("--cairn", default=CAIRN_DIR, help="cairn's own files: saved outputs, fetched pages "
                        "(default /cairn)")
    parser.add_argument("--lockdown", action="store_true", help="refuse paths outside the work directory "
                        "and cairn's")
    parser.add_argument("--root", help="where the work directory really is (tests on the host); default: "
                        "the work directory itself")
    parser.add_argument("--journal", help=f"the journal of tool calls (default: {JOURNAL_NAME} in cairn's files)")
    options = parser.parse_args(argv)
    root = options.root or options.workdir
    if not os.path.isdir(root):
        sys.exit(f"toolbox: work directory {root} is not a directory")
    toolbox = Toolbox(Workspace(root, options.workdir, options.cairn, options.lockdown), options.journal)
    out = sys.stdout.buffer

    def send(message: dict) -> None:
        # ensure_ascii: file names may hold undecodable bytes (surrogates) that UTF-8 cannot carry.
        out.write(json.dumps(message).encode("ascii") + b"\n")
        out.flush()

    def answered(line: bytes) -> dict:
        response = toolbox.handle(line)
        toolbox.host.answered(response.get("id"))  # an interrupt for it that comes later is dropped
        return response

    send({"id": 0, "ok": True, "result": {"ready": True, "pid": os.getpid(), "uid": os.getuid(), "version": VERSION}})
    try:
        serve(answered, toolbox.host.requests(), send)
    except (HostGone, BrokenPipeError):
        # The host is gone; what it would have been told is in the journal. os._exit: flushing stdout
        # at exit would only meet the broken pipe again.
        os._exit(0)
