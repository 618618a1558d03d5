"""Terminal sessions.

A session is a program in a pseudo-terminal of its own that outlives the request that started it (a
server, a REPL, a long job). A thread copies everything it prints into its log under /cairn/sessions/,
so a program never blocks on a full terminal while the toolbox serves other requests, and nothing it
printed is lost. The toolbox only keeps bytes; the host renders them with a terminal emulator.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import pty
import re
import select
import signal
import struct
import sys
import termios
import threading
import time
import warnings

from .channel import Host
from .errors import ToolError
from .processes import procs
from .shell import SHELL_ARGV, Shell
from .waiting import Early, Watch
from .workspace import Workspace, atomic_write, open_regular

SESSION_COLUMNS, SESSION_ROWS = 120, 40
SESSION_MAX_OPEN = 32
SESSION_SCREEN_BYTES = 4 * 1024 * 1024  # a full-screen program's drawing sent for rendering, at most
SESSION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,39}\Z")
SESSIONS_DIR = "sessions"  # under cairn's directory
REGISTRY_NAME = "sessions.json"  # what was open, so the next toolbox can say which sessions are gone
# Entering and leaving the alternate screen (xterm's 1049, and the older 47 and 1047): a full-screen program.
_ALT_SCREEN = re.compile(rb"\x1b\[\?(?:1049|1047|47)([hl])")
_ALT_CARRY = 8  # the longest sequence minus one: what of a chunk's end can begin one cut in two


class Session:
    """One program in its own pseudo-terminal; its bytes go to `log`. Changed only under Sessions.lock."""

    def __init__(self, name: str, command: str, pid: int, fd: int, log_path: str, log: int, max_bytes: int) -> None:
        self.name, self.command, self.pid, self.fd, self.log_path, self.log = name, command, pid, fd, log_path, log
        self.started = time.time()
        self.max_bytes = max_bytes
        self.size = 0  # bytes printed so far (those past max_bytes are counted, not kept)
        self.answered = 0  # what the last answer showed up to
        self.alt_since: int | None = None  # where the alternate screen was entered, while it is on
        self.answered_on_screen = False  # whether the alternate screen was on where the last answer ended
        self.carry = b""
        self.exit_code: int | None = None
        self.eof = False
        self.printed = time.monotonic()  # when it last printed
        try:
            self.watch: Watch | None = Watch(fd, pid)  # whether it waits for input (waiting.py)
        except OSError:
            self.watch = None

    def pump(self) -> bool:
        """Read what the program printed; False when there was nothing to read."""
        try:
            data = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return False
        except OSError:  # EIO: every holder of the terminal's other end has closed it
            data = b""
        if not data:
            self.eof = True
            return True
        room = self.max_bytes - self.size
        if room > 0:
            kept = data[:room]
            while kept:
                kept = kept[os.write(self.log, kept):]
        window = self.carry + data
        for match in _ALT_SCREEN.finditer(window):
            self.alt_since = self.size - len(self.carry) + match.start() if match.group(1) == b"h" else None
        self.carry = window[-_ALT_CARRY:]
        self.size += len(data)
        self.printed = time.monotonic()
        return True

    def reap(self) -> bool:
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            pid, status = self.pid, 255 << 8
        if pid == 0:
            return False
        code = os.waitstatus_to_exitcode(status)
        self.exit_code = 128 - code if code < 0 else code
        return True

    def kept(self, start: int, end: int) -> bytes:
        """Bytes [start, end) of what it printed, as far as the log keeps them."""
        end = min(end, self.max_bytes)
        return os.pread(self.log, end - start, start) if end > start else b""

    def close(self) -> None:
        for fd in (self.fd, self.log):
            try:
                os.close(fd)
            except OSError:
                pass


class Sessions:
    """The sessions of one toolbox, and the thread that keeps their logs."""

    def __init__(self, ws: Workspace, shell: Shell, host: Host) -> None:
        self.ws, self.shell, self.host = ws, shell, host
        self.lock = threading.Condition()
        self.open: dict = {}  # name -> Session
        self.ended: dict = {}  # name -> one line on how it ended, for a later call that names it
        self.directory = os.path.join(ws.cairn, SESSIONS_DIR)
        self.gone = self._previous()  # name -> registry entry of a session the last toolbox left running
        self.wake_r, self.wake_w = os.pipe()
        self.thread: threading.Thread | None = None

    # The registry of open sessions, so the next toolbox (after a crash, a resume, a restarted sandbox)
    # can tell the agent which sessions ended with the old one.

    def _previous(self) -> dict:
        try:
            with open_regular(os.path.join(self.directory, REGISTRY_NAME), REGISTRY_NAME) as f:
                entries = json.loads(f.read(1 << 20))
        except (OSError, ValueError, ToolError):
            return {}
        if not isinstance(entries, list):
            return {}
        return {e["name"]: e for e in entries if isinstance(e, dict) and isinstance(e.get("name"), str)}

    def _save_registry(self) -> None:
        entries = [self._entry(s) for s in self.open.values()] + list(self.gone.values())
        try:
            atomic_write(os.path.join(self.directory, REGISTRY_NAME), json.dumps(entries).encode())
        except OSError as exc:
            print(f"toolbox: cannot write the session registry: {exc}", file=sys.stderr, flush=True)

    def _entry(self, s: Session) -> dict:
        return {"name": s.name, "command": s.command, "started": round(s.started, 3), "log_path": self.ws.rel(s.log_path)}

    # The thread

    def _drain(self) -> None:
        while True:
            with self.lock:
                watched = list(self.open.values())
            try:
                ready = select.select([self.wake_r] + [s.fd for s in watched if not s.eof], [], [], 0.2)[0]
            except OSError:  # a session was closed while we waited; look again
                continue
            if self.wake_r in ready:
                os.read(self.wake_r, 4096)
            with self.lock:
                changed = False
                for s in watched:
                    if self.open.get(s.name) is not s:  # stopped meanwhile (its name may be in use again)
                        continue
                    if not s.eof and s.fd in ready:
                        changed |= s.pump()
                    if s.exit_code is None:
                        changed |= s.reap()
                if changed:
                    self.lock.notify_all()

    def _wake(self) -> None:
        os.write(self.wake_w, b"x")

    # The operations

    def start(self, command: str, name: str | None, wait: float, columns: int, rows: int,
              inline_bytes: int, max_file_bytes: int, early: bool = True) -> dict:
        if not isinstance(command, str) or not command.strip():
            raise ToolError("command must be a non-empty string")
        check_wait(wait)
        with self.lock:
            if name is None:
                name = self._free_name(command)
            elif not isinstance(name, str) or not SESSION_NAME.match(name):
                raise ToolError(f"session name {name!r}: use 1-40 letters, digits, '_', '.' or '-', starting "
                                "with a letter or digit")
            elif name in self.open:
                raise ToolError(f"a session named {name} is open ({self._state(self.open[name])}); stop it with "
                                "shell_stop first, or give another name")
            if len(self.open) >= SESSION_MAX_OPEN:
                raise ToolError(f"{SESSION_MAX_OPEN} sessions are open, the most there can be; stop one first")
            os.makedirs(self.directory, exist_ok=True)
            log_path = self._log_path(name)
            # The log first: a session whose output could not be kept is never started.
            log = os.open(log_path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_APPEND, 0o644)
            try:
                pid, fd = self._spawn(command, columns, rows)
            except OSError:
                os.close(log)
                raise
            session = Session(name, command, pid, fd, log_path, log, max_file_bytes)
            self.open[name] = session
            self.gone.pop(name, None)
            self.ended.pop(name, None)
            self._save_registry()
            if self.thread is None:
                self.thread = threading.Thread(target=self._drain, name="sessions", daemon=True)
                self.thread.start()
        self._wake()
        return self._answer(session, wait, inline_bytes, self._early(session, early=early))

    def send(self, name: str, data: str, wait: float, inline_bytes: int, early: bool = True) -> dict:
        if not isinstance(data, str):
            raise ToolError("keys must be a string")
        check_wait(wait)
        session = self._find(name)
        if data:
            if session.exit_code is not None:
                raise ToolError(f"session {name} has exited ({self._state(session)}); read it with empty keys, "
                                "or start it again")
            watch = self._early(session, early, typed=True)  # before the keys: a quick program answers at once
            self._type(session, data.encode("utf-8", "surrogateescape"))
            return self._answer(session, wait, inline_bytes, watch)
        return self._answer(session, wait, inline_bytes, self._early(session, early))

    def stop(self, name: str, inline_bytes: int) -> dict:
        session = self._find(name)
        killed = self._kill(session)
        with self.lock:  # the thread reaps the leader and reads the last output
            deadline = time.monotonic() + 2.0
            while (session.exit_code is None or not session.eof) and time.monotonic() < deadline:
                self.lock.wait(0.05)
        answer = self._answer(session, 0, inline_bytes, None)
        answer["note"] = f"stopped: killed {killed} processes" if killed else "it had already exited"
        with self.lock:
            self.ended[session.name] = f"was stopped; what it printed is in {self.ws.rel(session.log_path)}"
        return answer

    def listing(self) -> dict:
        now = time.time()
        with self.lock:
            found = [{**self._entry(s), "running": s.exit_code is None, "exit_code": s.exit_code,
                      "seconds": round(now - s.started, 1), "unread": s.size - s.answered, "state":
                      "running" if s.exit_code is None else "exited"} for s in self.open.values()]
            found += [{**entry, "state": "gone"} for entry in self.gone.values()]
        return {"sessions": found}

    def close_all(self) -> None:
        """Kill every session (a sandbox on this machine stops; in a container they die with it)."""
        for session in list(self.open.values()):
            self._kill(session)
            session.close()
        self.open.clear()

    # How

    def _find(self, name: object) -> Session:
        if not isinstance(name, str) or not name:
            raise ToolError("session must be the name of a session")
        with self.lock:
            if name in self.open:
                return self.open[name]
            if name in self.gone:
                entry = self.gone.pop(name)
                self._save_registry()
                raise ToolError(f"session {name} is gone: it was running when the run stopped or the sandbox "
                                f"restarted, and its processes ended with the old sandbox; what it printed is "
                                f"in {entry.get('log_path')}. Start it again with shell_start")
            if name in self.ended:
                raise ToolError(f"session {name} {self.ended[name]}")
            names = ", ".join(self.open) or "none"
        raise ToolError(f"no session named {name} (open sessions: {names})")

    def _free_name(self, command: str) -> str:
        first = command.split()[0] if command.split() else "session"
        base = re.sub(r"[^A-Za-z0-9_.-]", "", first.rsplit("/", 1)[-1])[:20].lstrip("._-") or "session"
        name, n = base, 1
        while name in self.open or name in self.gone:
            n += 1
            name = f"{base}-{n}"
        return name

    def _log_path(self, name: str) -> str:
        path, n = os.path.join(self.directory, f"{name}.log"), 1
        while os.path.lexists(path):  # an earlier session of that name keeps its log
            n += 1
            path = os.path.join(self.directory, f"{name}.{n}.log")
        return path

    def _spawn(self, command: str, columns: int, rows: int) -> tuple:
        env = dict(self.shell.env, TERM="xterm")
        argv = SHELL_ARGV + ["-c", command]
        size = struct.pack("HHHH", rows, columns, 0, 0)
        with warnings.catch_warnings():  # forking beside the log thread: the child only execs
            warnings.simplefilter("ignore", DeprecationWarning)
            pid, fd = pty.fork()
        if pid == 0:  # the child: its terminal is fds 0-2, it leads a session of its own
            try:
                fcntl.ioctl(0, termios.TIOCSWINSZ, size)
                os.chdir(self.ws.root)
                # At the toolbox's own oom_score_adj, not a command's 1000: a session is what the agent keeps
                # running (a server, a REPL), and must not be the OOM killer's first pick (shell.py).
                os.execvpe(argv[0], argv, env)
            except BaseException as exc:  # noqa: B036 - nothing may return into the toolbox's code
                os.write(2, f"cairn: cannot start {argv[0]}: {exc}\r\n".encode())
            os._exit(127)
        os.set_inheritable(fd, False)
        os.set_blocking(fd, False)
        return pid, fd

    def _type(self, session: Session, data: bytes) -> None:
        deadline = time.monotonic() + 5.0
        while data:
            try:
                data = data[os.write(session.fd, data):]
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ToolError(f"session {session.name} does not read its input: {len(data)} bytes of the "
                                    "keys were not typed") from None
                select.select([], [session.fd], [], 0.05)
            except OSError as exc:
                raise ToolError(f"session {session.name}: cannot type into its terminal ({exc.strerror})") from None

    def _kill(self, session: Session) -> int:
        """Every process of the session (its own session id, so its jobs too): SIGTERM, then SIGKILL."""
        killed: set = set()
        for sig, pause in ((signal.SIGHUP, 0.0), (signal.SIGTERM, 0.5), (signal.SIGKILL, 0.5)):
            targets = [pid for pid, _, sid in procs() if sid == session.pid]
            if not targets:
                break
            for pid in targets:
                try:
                    os.kill(pid, sig)
                    killed.add(pid)
                except (ProcessLookupError, PermissionError):
                    pass
            end = time.monotonic() + pause
            while time.monotonic() < end and any(sid == session.pid for _, _, sid in procs()):
                time.sleep(0.02)
        return len(killed)

    def _early(self, session: Session, early: bool = True, typed: bool = False) -> Early | None:
        """What ends an answer early (None: `early` false, the whole wait, as the host asked)."""
        if not early:
            return None
        with self.lock:
            size = session.size
        return Early(session.watch, size, typed)

    def _answer(self, session: Session, wait: float, inline_bytes: int, early: Early | None) -> dict:
        """Wait up to `wait` seconds, less when the program exits or waits for input (waiting.py), then what
        it showed since the last answer."""
        began = time.monotonic()
        deadline, waits = began + float(wait), False
        with self.lock:
            while session.exit_code is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                quiet = time.monotonic() - max(session.printed, began)
                self.lock.wait(min(left, early.pause(quiet) if early else 0.25))  # output wakes it at once
                if self.host.left_now() or self.host.interrupted():
                    break  # nobody waits for the answer any more (it is journaled all the same), or not now
                if early is None or session.exit_code is not None or deadline <= time.monotonic():
                    continue
                size, quiet = session.size, time.monotonic() - session.printed
                self.lock.release()  # the look reads /proc: the log thread goes on meanwhile
                try:
                    waits = early.ready(size, quiet)
                finally:
                    self.lock.acquire()
                if waits:
                    break
            if session.exit_code is not None:  # its last words: until the terminal closes, briefly
                end = time.monotonic() + 0.5
                while not session.eof and time.monotonic() < end:
                    self.lock.wait(0.05)
            while session.pump():  # what is still in the terminal
                if session.eof:
                    break
            answer = self._render_input(session, inline_bytes)
            answer["waits_for_input"] = waits and session.exit_code is None
            # Why the whole wait was waited although the program may have waited for input.
            answer["unseen"] = early.unseen if early and not waits and session.exit_code is None and wait > 0 else None
            if self.host.interrupted():
                answer["note"] = "interrupted: the person stopped the run; the program goes on in its session"
            session.answered, session.answered_on_screen = session.size, session.alt_since is not None
            if session.exit_code is not None:  # told: the session is over
                self.open.pop(session.name, None)
                session.close()
                self.ended[session.name] = (f"has exited (code {session.exit_code}); what it printed is in "
                                            f"{self.ws.rel(session.log_path)}")
                self._save_registry()
        return answer

    def _render_input(self, session: Session, inline_bytes: int) -> dict:
        """The bytes the host renders: a full-screen program's whole drawing since it took the screen, else
        what came since the last answer (its head and tail when it is longer than `inline_bytes`)."""
        start, end = (session.alt_since, session.size) if session.alt_since is not None else (session.answered, session.size)
        head, tail = b"", b""
        if session.alt_since is not None:
            start = max(start, end - SESSION_SCREEN_BYTES)
            head = session.kept(start, end)
        elif end - start > inline_bytes:
            half = inline_bytes // 2
            head, tail = session.kept(start, start + half), session.kept(end - half, end)
        else:
            head = session.kept(start, end)
        lost = max(0, end - max(start, session.max_bytes))  # printed past the log's cap: counted only
        return {"session": session.name, "command": session.command, "log_path": self.ws.rel(session.log_path),
                "running": session.exit_code is None, "exit_code": session.exit_code,
                "seconds": round(time.time() - session.started, 1), "screen": session.alt_since is not None,
                "columns": SESSION_COLUMNS, "rows": SESSION_ROWS, "start": start, "end": end,
                "from_screen": session.answered_on_screen,
                "head": base64.b64encode(head).decode(), "tail": base64.b64encode(tail).decode(),
                "not_kept": lost, "note": None}

    def _state(self, session: Session) -> str:
        return "running" if session.exit_code is None else f"exited with code {session.exit_code}, not yet read"


def check_wait(wait: object) -> None:
    if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 <= wait <= 3600:
        raise ToolError(f"wait must be a number of seconds from 0 to 3600, not {wait!r}")
