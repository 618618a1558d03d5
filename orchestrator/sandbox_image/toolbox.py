#!/usr/bin/env python3
"""The toolbox: the half of cairn that lives inside the sandbox.

One long-lived process, started once by the host with `docker exec`, that answers JSON-line requests on
stdin with JSON-line responses on stdout (sandbox_image/PROTOCOL.md). Standard library only, Python 3.9+;
it needs no python3 in the image (the host can carry one in) and runs commands in bash, or in `sh` where
an image has no bash (busybox, alpine).
"""

from __future__ import annotations

import argparse
import array
import base64
import fcntl
import hashlib
import html.parser
import inspect
import json
import os
import pty
import re
import select
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request
import warnings

VERSION = 1
WORKDIR = "/workspace"  # the default work directory
CAIRN_DIR = "/cairn"  # cairn's own files (saved outputs, fetched pages), outside any project tree
RESET = "cwd and variables were reset"
WATCH_SECONDS = 0.25  # how often a running command is checked for a fork bomb
FETCH_MAX_BYTES = 20 * 1024 * 1024
PREVIEW_CHARS = 2000
LIST_MAX_ENTRIES = 2000
LIST_SKIP = {".git", "node_modules", "__pycache__", ".venv", "venv", ".mypy_cache", ".pytest_cache"}
# The journal of tool calls (see PROTOCOL.md, "The journal"), in cairn's own files (/cairn), which the host
# mounts from <run>/cairn/ and reads on resume (orchestrator/store/journal.py has the same name).
JOURNAL_NAME = "journal.jsonl"
UMASK = os.umask(0o022)
os.umask(UMASK)


class ToolError(Exception):
    """A failed request the model can act on: becomes {"ok": false, "error": <one line>}."""


class HostGone(BaseException):
    """The host went away while a command ran, and the command was killed. Carries its output so far.

    A BaseException, so that no handler of failed ops takes it for one: it ends the toolbox."""

    def __init__(self, capture: "Capture") -> None:
        super().__init__("the host went away")
        self.capture = capture


class Workspace:
    """Path resolution: a relative path is relative to the work directory, an absolute one is taken as it is.

    `name` is the work directory as the model knows it (/workspace, /app); `root` is where it really is,
    the same path inside a container, another directory on the host in tests (`--root`), so a path
    under `name` is read under `root`. With `lockdown` every path must resolve, inside the container, to
    the work directory or cairn's directory (its saved outputs) or below them.
    """

    def __init__(self, root: str, name: str = WORKDIR, cairn: str = CAIRN_DIR, lockdown: bool = False) -> None:
        self.root = os.path.realpath(root)
        self.name = name.rstrip("/") or "/"
        self.cairn = os.path.realpath(cairn)
        self.lockdown = lockdown

    def resolve(self, path: object) -> str:
        if not isinstance(path, str) or not path.strip():
            raise ToolError("path must be a non-empty string")
        if "\0" in path:
            raise ToolError(f"{path!r}: a path cannot contain a NUL byte")
        if path == self.name or path.startswith(self.name + "/"):
            joined = os.path.join(self.root, path[len(self.name):].lstrip("/"))
        else:  # an absolute path stays what it is; join() keeps it
            joined = os.path.join(self.root, path)
        # realpath follows symlinks here, inside the container, so a link cannot lead the check astray.
        real = os.path.realpath(joined)
        if self.lockdown and not (_under(real, self.root) or _under(real, self.cairn)):
            raise ToolError(f"{path}: outside {self.name} (it resolves to {real}); under --lockdown use paths "
                            f"inside {self.name} (and {CAIRN_DIR}, cairn's saved outputs)")
        return real

    def rel(self, real: str) -> str:
        """A path as results give it: relative to the work directory when under it, else absolute."""
        return os.path.relpath(real, self.root) if _under(real, self.root) else real


def _under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


# The running command's output as it comes (its first LIVE_BYTES), in cairn's files: the host's live view
# shows a long command's output from it while the command runs. Emptied as each command starts.
LIVE_OUTPUT = "live/shell.out"
LIVE_BYTES = 1024 * 1024


def _open_live(path: str):
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return open(path, "wb", buffering=0)
    except OSError:
        return None


class Capture:
    """The output of one command, capped at the source.

    Up to `inline_bytes` stays in memory. Past that, everything goes to a file (until `max_file_bytes`,
    then it is only counted) and memory keeps just a head and a tail for the preview.
    """

    def __init__(self, open_file, inline_bytes: int, max_file_bytes: int, live=None) -> None:
        self.open_file = open_file  # called once, when the output first outgrows inline_bytes
        self.live, self.live_left = live, LIVE_BYTES  # the output as it comes, for the person watching
        self.inline_bytes, self.max_file_bytes = inline_bytes, max_file_bytes
        self.half = inline_bytes // 2
        self.head, self.tail = bytearray(), b""
        self.total = self.newlines = self.stored = 0
        self.last = b""
        self.file = None
        self.path = None

    def feed(self, data: bytes) -> None:
        if self.live is not None and self.live_left > 0:
            try:
                self.live.write(data[:self.live_left])
            except OSError:
                self.live = None  # a full disk must not fail the command
            self.live_left -= len(data)
        self.total += len(data)
        self.newlines += data.count(b"\n")
        self.last = data[-1:]
        if self.file is None:
            if len(self.head) + len(data) <= self.inline_bytes:
                self.head += data
                return
            self.file, self.path = self.open_file()
            data, self.head = bytes(self.head) + data, bytearray()
        self._store(data)
        if len(self.head) < self.half:
            taken = self.half - len(self.head)
            self.head += data[:taken]
            data = data[taken:]
        if data:
            self.tail = data[-self.half:] if len(data) >= self.half else (self.tail + data)[-self.half:]

    def _store(self, data: bytes) -> None:
        room = self.max_file_bytes - self.stored
        if room > 0:
            self.file.write(data[:room])
            self.stored += min(room, len(data))

    def finish(self, workspace: Workspace) -> dict:
        lines = self.newlines + (1 if self.total and self.last != b"\n" else 0)
        result = {"output_bytes": self.total, "output_lines": lines, "truncated": False, "output_path": None}
        if self.file is None:
            return dict(result, output=self.head.decode("utf-8", "replace"))
        if self.total > self.stored:
            dropped = self.total - self.stored
            self.file.write(b"\n[cairn: %d more bytes of output were counted but not kept]\n" % dropped)
        self.file.close()
        rel = workspace.rel(self.path)
        omitted = self.total - len(self.head) - len(self.tail)
        marker = f"\n[... {omitted} bytes omitted; the output is saved in {rel} ...]\n"
        output = self.head.decode("utf-8", "replace") + marker + self.tail.decode("utf-8", "replace")
        return dict(result, output=output, truncated=True, output_path=rel)


def _procs() -> list:
    """(pid, pgid, sid) of every live process we can see; zombies are already dead, so they are left out."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # it exited while we looked
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if fields[0] != b"Z":
            found.append((int(name), int(fields[2]), int(fields[3])))
    return found


def _cgroup_file(*candidates: str) -> str | None:
    return next((p for p in candidates if os.path.exists(p)), None)


def _read_int(path: str | None) -> int | None:
    """An integer file such as pids.current; None if missing or "max". Raw os calls: this runs per command."""
    if path is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        text = os.read(fd, 64).strip()
    finally:
        os.close(fd)
    return int(text) if text.isdigit() else None


def _last_pid() -> int:
    """The newest pid of this pid namespace: what a command starts afterwards has a higher one."""
    return _read_int("/proc/sys/kernel/ns_last_pid") or 0


def _read_counter(path: str | None, key: bytes) -> int:
    """The number after `key` in a cgroup events file such as pids.events ("max 3"); 0 if there is none."""
    if path is None:
        return 0
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return 0
    try:
        text = os.read(fd, 4096)
    finally:
        os.close(fd)
    match = re.search(rb"^" + key + rb" (\d+)", text, re.M)
    return int(match.group(1)) if match else 0


class Limits:
    """The container's pids and memory limits, as its cgroup (v1 or v2) shows them."""

    def __init__(self) -> None:
        self.pids_max = _read_int(_cgroup_file("/sys/fs/cgroup/pids/pids.max", "/sys/fs/cgroup/pids.max"))
        self.pids_current = _cgroup_file("/sys/fs/cgroup/pids/pids.current", "/sys/fs/cgroup/pids.current")
        self.pids_events = _cgroup_file("/sys/fs/cgroup/pids/pids.events", "/sys/fs/cgroup/pids.events")
        self.memory_max = _read_int(
            _cgroup_file("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory.max"))
        self.oom_events = _cgroup_file("/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events")
        self.refused_seen = _read_counter(self.pids_events, b"max")

    def near_pids_limit(self) -> bool:
        """Whether a fork was refused for the limit since the last look, or the count is near the limit.

        Both, because a fork bomb's count swings: it can hit the limit between two looks at the count.
        """
        if not self.pids_max:
            return False
        refused = _read_counter(self.pids_events, b"max")
        if refused > self.refused_seen:
            self.refused_seen = refused
            return True
        current = _read_int(self.pids_current) if self.pids_current else len(_procs())
        return current is not None and current >= 0.8 * self.pids_max

    def oom_kills(self) -> int:
        return _read_counter(self.oom_events, b"oom_kill")


def _shell_argv() -> list:
    """bash when the image has it; else the POSIX `sh` (busybox's ash on alpine), which does all the Shell
    below asks of it (job control with set -m, eval, fd redirections)."""
    for directory in os.environ.get("PATH", "/usr/bin:/bin").split(":") + ["/bin", "/usr/bin"]:
        if directory and os.access(os.path.join(directory, "bash"), os.X_OK):
            return [os.path.join(directory, "bash"), "--noprofile", "--norc"]
    return ["sh"]


SHELL_ARGV = _shell_argv()


class Shell:
    """A persistent bash (or `sh` where the image has no bash). Commands run in it, not in a child shell, so
    cwd, variables and venvs persist.

    bash's stdout and stderr are one pipe (so output is merged in the order written); after each command
    bash writes the exit status on a separate control pipe (fd 3), which commands cannot see.
    """

    def __init__(self, root: str) -> None:
        self.root = root
        self.limits = Limits()
        self.env = dict(os.environ, TERM="dumb", PAGER="cat", GIT_PAGER="cat")
        self.start()

    def start(self) -> None:
        out_r, out_w = os.pipe()
        ctl_r, ctl_w = os.pipe()
        self.proc = subprocess.Popen(
            SHELL_ARGV, stdin=subprocess.PIPE, stdout=out_w, stderr=out_w,
            pass_fds=(ctl_w,), cwd=self.root, env=self.env, start_new_session=True)
        os.close(out_w)
        os.close(ctl_w)
        os.set_blocking(out_r, False)
        try:  # a bigger pipe means fewer wake-ups for commands that print a lot
            import fcntl
            fcntl.fcntl(out_r, 1031, 1024 * 1024)  # F_SETPIPE_SZ
        except OSError:
            pass
        self.out, self.ctl = out_r, ctl_r
        # set -m gives every command line its own process group, so a timeout can kill it as a whole (busybox
        # sh without a terminal says it cannot, and carries on: the session still tells a command's processes).
        # The raised oom_score_adj is inherited by every command: the OOM killer takes them, not the toolbox.
        self._send(f"set -m 2>/dev/null\nexec 3>&{ctl_w} {ctl_w}>&- 4</dev/null\n"
                   "{ echo 1000 >/proc/self/oom_score_adj; } 2>/dev/null\n")
        self.oom_seen = self.limits.oom_kills()

    def restart(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.proc.stdin.close()
        os.close(self.out)
        os.close(self.ctl)
        self.start()

    def _send(self, text: str) -> bool:
        try:
            self.proc.stdin.write(text.encode("utf-8", "surrogateescape"))
            self.proc.stdin.flush()
        except BrokenPipeError:
            return False
        return True

    def run(self, command: str, timeout: float, capture: Capture) -> dict:
        started = time.monotonic()
        notes, restarted = [], False
        if self.proc.poll() is not None:
            notes.append(f"the shell had exited (code {self.proc.returncode}) and was restarted: {RESET}")
            self.restart()
            restarted = True
        if self.limits.near_pids_limit():  # left behind by an earlier command
            killed = self._kill(lambda pid, pgid, sid: sid == self.proc.pid)
            notes.append(f"earlier commands ran into the process limit: killed {killed} of their processes")
        self._read_output(capture)  # late output of background jobs, as a terminal would show it
        before = _last_pid()
        quoted = "'" + command.replace("'", "'\\''") + "'"
        # fd 4 is /dev/null, kept open because reopening it per command is measurably slower.
        sent = self._send("{ eval " + quoted + "\n} <&4 3>&- 4<&-; echo $? >&3\n")
        status = self._wait(capture, started + timeout, before, notes) if sent else "died"
        timed_out = status is None
        if timed_out:
            killed = self._kill_new(before)
            notes.append(f"timed out after {timeout:g}s: killed {killed} processes it started" if killed
                         else f"timed out after {timeout:g}s")
            status = self._wait(capture, time.monotonic() + (2.0 if killed else 0.3), before, notes)
            if status is None:
                notes.append(f"the shell itself was stuck (a loop of builtins?) and was restarted: {RESET}")
                self.restart()
                restarted = True
        if status == "died":
            code = self.proc.wait()
            status = 128 - code if code < 0 else code
            notes.append(f"the shell exited (code {status}) and was restarted: {RESET}")
            self.restart()
            restarted = True
        elif self.limits.near_pids_limit():
            killed = self._kill_new(before)
            notes.append(self._limit_note(killed))
            self._read_output(capture)  # what they wrote before dying belongs to this command
        exit_code = 124 if timed_out else status
        if exit_code == 137 and not notes:  # a SIGKILL that was not ours
            notes.append(self._sigkill_note())
        return dict(exit_code=exit_code, timed_out=timed_out, shell_restarted=restarted,
                    duration_ms=round((time.monotonic() - started) * 1000, 3), note="; ".join(notes) or None)

    def _wait(self, capture: Capture, deadline: float, before: int, notes: list):
        """Collect output until bash reports the exit status (an int), the deadline passes (None), or bash dies."""
        status = b""
        next_watch = time.monotonic() + WATCH_SECONDS
        while True:
            now = time.monotonic()
            if now >= deadline:
                return None
            ready, _, _ = select.select([self.out, self.ctl, HOST], [], [], min(deadline, next_watch) - now)
            if self.out in ready:
                self._read_output(capture, once=True)
            if self.ctl in ready:  # before the host's end: a command that finished is journaled as finished
                data = os.read(self.ctl, 64)
                if not data:
                    self._read_output(capture)
                    return "died"
                status += data
                if status.endswith(b"\n"):
                    self._read_output(capture)
                    return int(status)
            if HOST in ready and host_gone():
                # cairn died or was killed: nobody will read this result, so the command must not go on
                # changing the workspace behind the run's back. It is killed here, and the journal
                # says so (Toolbox.handle) before the toolbox exits.
                self.proc.kill()  # bash first: it would run the rest of the command line
                self._kill_new(before)
                self._read_output(capture)
                raise HostGone(capture)
            if time.monotonic() >= next_watch:
                next_watch = time.monotonic() + WATCH_SECONDS
                if self.limits.near_pids_limit():
                    killed = self._kill_new(before)
                    notes.append(self._limit_note(killed))

    def _read_output(self, capture: Capture, once: bool = False) -> None:
        deadline = time.monotonic() + 1.0  # a chatty background job must not keep us here forever
        while time.monotonic() < deadline:
            try:
                data = os.read(self.out, 1024 * 1024)
            except BlockingIOError:
                return
            if not data:
                return
            capture.feed(data)
            if once:
                return

    def _kill_new(self, before: int) -> int:
        """Kill what the current command started: processes in bash's session newer than pid `before`.

        Pids count up in the container's pid namespace (wrapping at pid_max, 4M: a command that spans the
        wrap is not told apart, which is rare enough), so "newer" is a comparison, not a /proc snapshot
        taken before every command.
        """
        return self._kill(lambda pid, pgid, sid: sid == self.proc.pid and pid > before, spare=lambda pid: pid <= before)

    def _kill(self, wanted, spare=lambda pid: False) -> int:
        """SIGKILL the processes `wanted` picks, with their process groups, until none is left.

        A fork bomb forks back while it is being killed, and a child still being forked is not in /proc
        yet, so only a few empty looks in a row mean it is over.
        """
        own = {os.getpid(), self.proc.pid, 1}
        killed: set = set()
        quiet = 0
        give_up = time.monotonic() + 5
        while quiet < 3 and time.monotonic() < give_up:
            procs = _procs()
            keep_groups = {pgid for pid, pgid, _ in procs if pid in own or spare(pid)}
            targets = [(pid, pgid) for pid, pgid, sid in procs if pid not in own and wanted(pid, pgid, sid)]
            quiet = 0 if targets else quiet + 1
            for pid, pgid in targets:
                for kill, target in ((os.killpg, pgid), (os.kill, pid)):
                    if kill is os.killpg and pgid in keep_groups:
                        continue
                    try:
                        kill(target, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
                killed.add(pid)
            time.sleep(0.01)  # let the parents reap them
        return len(killed)

    def _limit_note(self, killed: int) -> str:
        return f"the command ran into the process limit ({self.limits.pids_max}): killed {killed} of its processes"

    def _sigkill_note(self) -> str:
        oom = self.limits.oom_kills()
        memory = self.limits.memory_max
        limit = f" (limit {memory // 2**20} MiB)" if memory and memory < 2**50 else ""  # v1 says 2**63 for none
        if oom > self.oom_seen:
            self.oom_seen = oom
            return f"the command was killed by the out-of-memory killer{limit}: use less memory"
        return f"the command was killed by SIGKILL (exit 137), likely out of memory{limit}"


def container_env() -> dict:
    """The container's own environment: that of its first process (docker-init, or the image's entrypoint),
    as `docker exec` would give it. Where PID 1 cannot be read (a non-root toolbox under --lockdown), the
    toolbox's own, which its `docker exec` gave it the same way. Nothing a command of the agent did can
    change either."""
    try:
        with open("/proc/1/environ", "rb") as f:
            entries = f.read().split(b"\0")
    except OSError:
        return dict(os.environ)
    env = {}
    for entry in entries:
        key, sep, value = entry.partition(b"=")
        if sep and key:
            env[os.fsdecode(key)] = os.fsdecode(value)
    return env or dict(os.environ)


def run_fresh(command: str, root: str, env: dict, timeout: float, capture: Capture) -> dict:
    """Run `command` in a new shell process of its own (`bash -c`, in its own session), not in the agent's
    long-lived shell: no function, alias, variable, cwd or option of that shell exists in it. It starts in
    `root` with `env`; when it ends (or times out), whatever it left running in its session is killed."""
    started = time.monotonic()
    out_r, out_w = os.pipe()
    try:
        proc = subprocess.Popen([*SHELL_ARGV, "-c", command], stdin=subprocess.DEVNULL, stdout=out_w, stderr=out_w,
                                cwd=root, env=env, start_new_session=True)
    except OSError as exc:
        os.close(out_r)
        raise ToolError(f"cannot start a shell for the command: {exc.strerror or exc}") from None
    finally:
        os.close(out_w)
    deadline = started + timeout
    timed_out = ended = False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            ready, _, _ = select.select([out_r, HOST], [], [], min(left, WATCH_SECONDS))
            if out_r in ready:
                data = os.read(out_r, 1024 * 1024)
                if data:
                    capture.feed(data)
                    continue
                ended = True  # no writer is left: the shell and everything it started are done
                break
            if HOST in ready and host_gone():
                _kill_session(proc.pid)
                raise HostGone(capture)
            if proc.poll() is not None:
                break  # the shell exited; what still holds its output open is left over, and killed below
    finally:
        if ended:  # the shell gets to finish exiting on its own: only what it left behind is killed
            try:
                proc.wait(timeout=max(0.0, min(2.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                pass
        _kill_session(proc.pid)
        proc.wait()
        os.set_blocking(out_r, False)
        try:
            while True:
                data = os.read(out_r, 1024 * 1024)
                if not data:
                    break
                capture.feed(data)
        except BlockingIOError:
            pass
        os.close(out_r)
    code = 124 if timed_out else (128 - proc.returncode if proc.returncode < 0 else proc.returncode)
    return dict(exit_code=code, timed_out=timed_out, shell_restarted=False,
                duration_ms=round((time.monotonic() - started) * 1000, 3),
                note=f"timed out after {timeout:g}s: its processes were killed" if timed_out else None)


def _kill_session(sid: int) -> None:
    """SIGKILL every process of session `sid` (a command and what it left running), until none is left."""
    for _ in range(50):
        targets = [pid for pid, _pgid, psid in _procs() if psid == sid]
        if not targets:
            return
        for pid in targets:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.01)


class _TextOfHtml(html.parser.HTMLParser):
    SKIP = {"script", "style", "noscript", "template", "svg", "head"}
    BLOCK = {"p", "div", "br", "li", "tr", "td", "th", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article",
             "header", "footer", "nav", "pre", "blockquote", "table", "ul", "ol", "dt", "dd", "hr", "title", "main"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list = []
        self.skipping = 0

    def handle_starttag(self, tag, attrs):
        if tag in self.SKIP:
            self.skipping += 1
        elif tag in self.BLOCK:
            self.parts.append("\n- " if tag == "li" else "\n")

    def handle_endtag(self, tag):
        if tag in self.SKIP:
            self.skipping = max(0, self.skipping - 1)
        elif tag in self.BLOCK:
            self.parts.append("\n")

    def handle_data(self, data):
        if not self.skipping:
            self.parts.append(data)

    def text(self) -> str:
        lines = (re.sub(r"[ \t\r\f\v]+", " ", line).strip() for line in "".join(self.parts).split("\n"))
        return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip() + "\n"


def html_to_text(page: str) -> str:
    parser = _TextOfHtml()
    parser.feed(page)
    parser.close()
    return parser.text()


def _atomic_write(real: str, data: bytes) -> None:
    """Write through a temporary file in the same directory and rename it: readers see old or new, never half."""
    parent, name = os.path.split(real)
    os.makedirs(parent, exist_ok=True)
    mode = os.stat(real).st_mode & 0o7777 if os.path.exists(real) else 0o666 & ~UMASK
    fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            os.fchmod(f.fileno(), mode)
        os.replace(tmp, real)
    except BaseException:
        os.unlink(tmp)
        raise


_NOT_READABLE = ((stat.S_ISDIR, "is a directory; list it instead"),
                 (stat.S_ISFIFO, "is a FIFO (named pipe), not a regular file; only regular files are read"),
                 (stat.S_ISSOCK, "is a socket, not a regular file; only regular files are read"),
                 (stat.S_ISCHR, "is a character device, not a regular file; only regular files are read"),
                 (stat.S_ISBLK, "is a block device, not a regular file; only regular files are read"))


def _open_regular(real: str, path: str):
    """The file at `real`, open for reading, if it is a regular file; else a ToolError naming what it is.
    O_NONBLOCK makes the open of a FIFO return at once instead of waiting for a writer (which would
    hang the toolbox), and the check is on the open descriptor, so the path cannot change in between."""
    fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        why = next((text for test, text in _NOT_READABLE if test(mode)), "is not a regular file")
        raise ToolError(f"{path}: {why}")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


# -- Terminal sessions ------------------------------------------------------------------------------
# A session is a program in a pseudo-terminal of its own that outlives the request that started it (a
# server, a REPL, a long job). A thread copies everything it prints into its log under /cairn/sessions/,
# so a program never blocks on a full terminal while the toolbox serves other requests, and nothing it
# printed is lost. The toolbox only keeps bytes; the host renders them with a terminal emulator.

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

    def __init__(self, ws: Workspace, shell: Shell) -> None:
        self.ws, self.shell = ws, shell
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
            with _open_regular(os.path.join(self.directory, REGISTRY_NAME), REGISTRY_NAME) as f:
                entries = json.loads(f.read(1 << 20))
        except (OSError, ValueError, ToolError):
            return {}
        if not isinstance(entries, list):
            return {}
        return {e["name"]: e for e in entries if isinstance(e, dict) and isinstance(e.get("name"), str)}

    def _save_registry(self) -> None:
        entries = [self._entry(s) for s in self.open.values()] + list(self.gone.values())
        try:
            _atomic_write(os.path.join(self.directory, REGISTRY_NAME), json.dumps(entries).encode())
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
              inline_bytes: int, max_file_bytes: int) -> dict:
        if not isinstance(command, str) or not command.strip():
            raise ToolError("command must be a non-empty string")
        _check_wait(wait)
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
        return self._answer(session, wait, inline_bytes)

    def send(self, name: str, data: str, wait: float, inline_bytes: int) -> dict:
        if not isinstance(data, str):
            raise ToolError("keys must be a string")
        _check_wait(wait)
        session = self._find(name)
        if data:
            if session.exit_code is not None:
                raise ToolError(f"session {name} has exited ({self._state(session)}); read it with empty keys, "
                                "or start it again")
            self._type(session, data.encode("utf-8", "surrogateescape"))
        return self._answer(session, wait, inline_bytes)

    def stop(self, name: str, inline_bytes: int) -> dict:
        session = self._find(name)
        killed = self._kill(session)
        with self.lock:  # the thread reaps the leader and reads the last output
            deadline = time.monotonic() + 2.0
            while (session.exit_code is None or not session.eof) and time.monotonic() < deadline:
                self.lock.wait(0.05)
        answer = self._answer(session, 0, inline_bytes)
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
                try:  # as for commands: the OOM killer takes a session before the toolbox
                    with open("/proc/self/oom_score_adj", "w") as f:
                        f.write("1000")
                except OSError:
                    pass
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
            targets = [pid for pid, _, sid in _procs() if sid == session.pid]
            if not targets:
                break
            for pid in targets:
                try:
                    os.kill(pid, sig)
                    killed.add(pid)
                except (ProcessLookupError, PermissionError):
                    pass
            end = time.monotonic() + pause
            while time.monotonic() < end and any(sid == session.pid for _, _, sid in _procs()):
                time.sleep(0.02)
        return len(killed)

    def _answer(self, session: Session, wait: float, inline_bytes: int) -> dict:
        """Wait up to `wait` seconds (less when the program exits), then what it showed since the last answer."""
        deadline = time.monotonic() + float(wait)
        with self.lock:
            while session.exit_code is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.lock.wait(min(left, 0.25))
                if select.select([HOST], [], [], 0)[0] and host_gone():
                    break  # nobody waits for the answer any more; it is journaled all the same
            if session.exit_code is not None:  # its last words: until the terminal closes, briefly
                end = time.monotonic() + 0.5
                while not session.eof and time.monotonic() < end:
                    self.lock.wait(0.05)
            while session.pump():  # what is still in the terminal
                if session.eof:
                    break
            answer = self._render_input(session, inline_bytes)
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


def _check_wait(wait: object) -> None:
    if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 <= wait <= 3600:
        raise ToolError(f"wait must be a number of seconds from 0 to 3600, not {wait!r}")


_SIGNATURES: dict = {}


def _signature(method) -> inspect.Signature:
    if method.__name__ not in _SIGNATURES:
        _SIGNATURES[method.__name__] = inspect.signature(method)
    return _SIGNATURES[method.__name__]


class Journal:
    """Each tool call's start and outcome, on disk before the command runs and before the answer is sent.

    One JSON object a line, written with one write() and fsynced: `started` (the host's call key, the
    request's id and op), then `finished` (the whole response) or `killed` (the seconds it ran and its
    output so far). The host reads it on resume, for the calls its event log has no result for.

    A call's start begins the file afresh: the host sends a call only once it has recorded the outcome
    of every earlier one, so only the latest call can still be needed, and the journal stays one call
    long (cairn's checkpoints commit it at every step). A journal that cannot be written never stops a
    call: the toolbox says why on stderr, and a crash then looks to the host as if the call never ran.
    """

    def __init__(self, path: str) -> None:
        self.path = path

    def started(self, call: str, request: dict) -> None:
        self._write({"call": call, "state": "started", "id": request.get("id"), "op": request.get("op"),
                     "time": round(time.time(), 3)}, begin=True)

    def finished(self, call: str, response: dict) -> None:
        self._write({"call": call, "state": "finished", "response": response})

    def killed(self, call: str, seconds: float, partial: dict) -> None:
        self._write({"call": call, "state": "killed", "seconds": round(seconds, 3), "partial": partial})

    def _write(self, record: dict, begin: bool = False) -> None:
        line = json.dumps(record).encode("ascii") + b"\n"  # ascii: see send() in main()
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            # O_NOFOLLOW: a symlink put in its place is an error, not a way to make us write elsewhere.
            flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | (os.O_TRUNC if begin else os.O_APPEND)
            fd = os.open(self.path, flags, 0o644)
            try:
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    line = b"\n" + line  # after a torn line (a toolbox killed mid-write), start a new one
                while line:
                    line = line[os.write(fd, line):]
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            print(f"toolbox: cannot write the journal {self.path}: {exc}", file=sys.stderr, flush=True)


class Toolbox:
    """The operations of PROTOCOL.md, one method each (`op_<name>`)."""

    def __init__(self, root: str, name: str = WORKDIR, cairn: str = CAIRN_DIR, lockdown: bool = False,
                 journal: str | None = None) -> None:
        self.ws = Workspace(root, name, cairn, lockdown)
        self.shell = Shell(self.ws.root)
        self.fresh_env = container_env()  # the environment of a `fresh` shell command (see run_fresh)
        self.journal = Journal(journal or os.path.join(self.ws.cairn, JOURNAL_NAME))
        self.request_id = 0
        self._sessions: Sessions | None = None

    @property
    def sessions(self) -> Sessions:
        """Made at first use, on the paths as they are then (a test's sandbox swaps `ws` after __init__)."""
        if self._sessions is None:
            self._sessions = Sessions(self.ws, self.shell)
        return self._sessions

    def handle(self, line: bytes) -> dict:
        """The response to one request line. A request with a `call` key is journaled: its start before
        it runs, its response before it is sent; raises HostGone (after journaling it) when the host went
        away while its command ran."""
        try:
            request = json.loads(line)
        except ValueError as exc:
            return {"id": None, "ok": False, "error": f"bad request: {exc}"}
        call = request.get("call") if isinstance(request, dict) else None
        if not isinstance(call, str) or not call:
            return self.answer(request)
        self.journal.started(call, request)
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
        self.request_id = rid
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

        live = _open_live(os.path.join(self.ws.cairn, LIVE_OUTPUT)) if not fresh else None
        capture = Capture(open_file, int(inline_bytes), int(max_file_bytes), live)
        try:
            if fresh:  # the check's own shell: nothing of the agent's shell exists in it
                result = run_fresh(command, self.ws.root, self.fresh_env, float(timeout), capture)
            else:
                result = self.shell.run(command, float(timeout), capture)
        finally:
            if live is not None:
                live.close()
        return dict(result, **capture.finish(self.ws))

    def op_read(self, path: str, offset: int | None = None, limit: int | None = None,
                max_bytes: int = 256 * 1024) -> dict:
        real = self.ws.resolve(path)
        start = 1 if offset is None else offset
        if not isinstance(start, int) or start < 1:
            raise ToolError(f"offset must be a line number from 1, not {offset!r}")
        if limit is not None and (not isinstance(limit, int) or limit < 1):
            raise ToolError(f"limit must be a positive number of lines, not {limit!r}")
        chunks, size, end, total, cut = [], 0, start - 1, 0, False
        with _open_regular(real, path) as f:
            if b"\0" in f.read(8192):
                raise ToolError(f"{path}: binary file ({os.fstat(f.fileno()).st_size} bytes); inspect it with shell tools")
            f.seek(0)
            for total, line in enumerate(f, 1):
                if total < start or cut:
                    continue
                if (limit is not None and total >= start + limit) or size + len(line) > max_bytes:
                    if not chunks:  # one line longer than max_bytes: give its beginning
                        chunks.append(line[:max_bytes])
                        end = total
                    cut = True
                    continue
                chunks.append(line)
                size += len(line)
                end = total
        if start > 1 and start > total:
            raise ToolError(f"{path}: offset {start} is past the end of the file ({total} lines)")
        content = b"".join(chunks).decode("utf-8", "replace")
        return {"path": self.ws.rel(real), "content": content, "start_line": start, "end_line": end,
                "total_lines": total, "truncated": cut}

    def op_write(self, path: str, content: str) -> dict:
        if not isinstance(content, str):
            raise ToolError("content must be a string")
        real = self.ws.resolve(path)
        if os.path.isdir(real):
            raise ToolError(f"{path}: is a directory")
        created = not os.path.exists(real)
        data = content.encode("utf-8", "surrogateescape")
        _atomic_write(real, data)
        return {"path": self.ws.rel(real), "bytes": len(data), "created": created}

    def op_edit(self, path: str, old: str, new: str) -> dict:
        if not isinstance(old, str) or not isinstance(new, str):
            raise ToolError("old and new must be strings")
        if not old:
            raise ToolError("old is empty: give the exact text to replace")
        real = self.ws.resolve(path)
        with _open_regular(real, path) as f:
            raw = f.read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolError(f"{path}: not UTF-8 text; edit it with shell tools") from None
        count = text.count(old)
        if count == 0:
            raise ToolError(f"{path}: old text not found (it must match exactly, whitespace and indentation included)")
        if count > 1:
            raise ToolError(f"{path}: old text occurs {count} times; include more surrounding lines to make it unique")
        data = text.replace(old, new, 1).encode("utf-8")
        _atomic_write(real, data)
        return {"path": self.ws.rel(real), "bytes": len(data)}

    def op_list(self, path: str = ".", depth: int = 2) -> dict:
        real = self.ws.resolve(path)
        if not os.path.isdir(real):
            raise ToolError(f"{path}: not a directory")
        entries: list = []

        def walk(directory: str, level: int) -> None:
            try:
                found = sorted(os.scandir(directory), key=lambda e: e.name)
            except PermissionError:
                return
            for entry in found:
                if len(entries) >= LIST_MAX_ENTRIES:
                    return
                kind = ("link" if entry.is_symlink() else "dir" if entry.is_dir() else
                        "file" if entry.is_file() else "other")
                size = entry.stat(follow_symlinks=False).st_size if kind == "file" else None
                entries.append({"path": self.ws.rel(entry.path), "type": kind, "size": size})
                if kind == "dir" and level < depth and entry.name not in LIST_SKIP:
                    walk(entry.path, level + 1)

        walk(real, 1)
        return {"entries": entries, "truncated": len(entries) >= LIST_MAX_ENTRIES}

    def op_fetch(self, url: str, save_as: str | None = None, timeout: float = 30.0) -> dict:
        parts = urllib.parse.urlsplit(url if isinstance(url, str) else "")
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ToolError(f"{url!r}: only http and https URLs can be fetched")
        slug = re.sub(r"[^A-Za-z0-9._-]+", "-", parts.netloc + parts.path).strip("-")[:80]
        real = self.ws.resolve(save_as or f"{self.ws.cairn}/web/{slug}-{hashlib.sha1(url.encode()).hexdigest()[:8]}.txt")
        request = urllib.request.Request(url, headers={"User-Agent": "cairn-toolbox/1", "Accept": "*/*"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                body = response.read(FETCH_MAX_BYTES)
                status, final_url, headers = response.status, response.geturl(), response.headers
        except urllib.error.HTTPError as exc:
            raise ToolError(f"{url}: HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError) as exc:
            if set(os.listdir("/sys/class/net")) <= {"lo"}:
                raise ToolError(f"cannot fetch {url}: the sandbox has no network (needs --network bridge)") from None
            raise ToolError(f"cannot fetch {url}: {getattr(exc, 'reason', exc)}") from None
        ctype = headers.get_content_type()
        charset = headers.get_content_charset() or "utf-8"
        if ctype in ("text/html", "application/xhtml+xml"):
            text = html_to_text(body.decode(charset, "replace"))
        elif ctype.startswith("text/") or ctype.endswith(("json", "xml", "javascript")):
            text = body.decode(charset, "replace")
        else:
            raise ToolError(f"{url}: {ctype} is not text ({len(body)} bytes); download it with curl in the shell")
        data = text.encode("utf-8")
        _atomic_write(real, data)
        return {"url": final_url, "status": status, "content_type": ctype, "path": self.ws.rel(real),
                "bytes": len(data), "text": text[:PREVIEW_CHARS]}


    def op_session_start(self, command: str, name: str | None = None, wait: float = 10.0,
                         inline_bytes: int = 256 * 1024, max_file_bytes: int = 200 * 1024 * 1024) -> dict:
        return self.sessions.start(command, name, wait, SESSION_COLUMNS, SESSION_ROWS, int(inline_bytes),
                                   int(max_file_bytes))

    def op_session_send(self, name: str, keys: str = "", wait: float = 2.0, inline_bytes: int = 256 * 1024) -> dict:
        return self.sessions.send(name, keys, wait, int(inline_bytes))

    def op_session_stop(self, name: str, inline_bytes: int = 256 * 1024) -> dict:
        return self.sessions.stop(name, int(inline_bytes))

    def op_sessions(self) -> dict:
        return self.sessions.listing()


HOST = 0  # stdin: requests come from the host, one at a time; between them it is silent


def host_gone() -> bool:
    """stdin is readable with nothing to read: the host closed it (end of file)."""
    waiting = array.array("i", [0])
    try:
        fcntl.ioctl(HOST, termios.FIONREAD, waiting)
    except OSError:
        return False
    return waiting[0] == 0


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
    toolbox = Toolbox(root, options.workdir, options.cairn, options.lockdown, options.journal)
    out = sys.stdout.buffer

    def send(message: dict) -> None:
        # ensure_ascii: file names may hold undecodable bytes (surrogates) that UTF-8 cannot carry.
        out.write(json.dumps(message).encode("ascii") + b"\n")
        out.flush()

    send({"id": 0, "ok": True, "result": {"ready": True, "pid": os.getpid(), "uid": os.getuid(), "version": VERSION}})
    try:
        for line in sys.stdin.buffer:
            if line.strip():
                send(toolbox.handle(line))
    except (HostGone, BrokenPipeError):
        # The host is gone; what it would have been told is in the journal. os._exit: flushing stdout
        # at exit would only meet the broken pipe again.
        os._exit(0)


if __name__ == "__main__":
    main()
