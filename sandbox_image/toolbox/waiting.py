"""Whether a terminal session's program waits for input, so that an answer need not wait out its `wait`.

A session's answer comes when the program exits, when `wait` runs out, or as soon as the program waits
for input (PROTOCOL.md, "Terminal sessions"). This module sees the last, in one of two ways:

- By its system calls, where /proc shows them (Linux: runc's containers, the host). The terminal's
  foreground process group (tcgetpgrp on the master) and its processes (the session leader's
  descendants, from /proc/<pid>/task/<tid>/children) are looked at thread by thread: a thread blocked in
  a read of the terminal, or in a select, poll or epoll whose read set holds it, reads the terminal; one
  waiting for a child (wait4), a lock (futex) or a pipe is neutral; anything else, running included, is
  busy. A process whose stdin is not the terminal (a job started with `&`) does not count unless it reads
  the terminal. The program waits for input when no counted process is busy and one reads the terminal.
  wchan is not used: it reads 0 for a process we may not look at, as for one that runs.
- By the terminal's mode, where the system calls cannot be read (gVisor has no syscall file; a process
  of another user, or one that is not dumpable, refuses). Line editors (readline, bash, pdb) and
  full-screen programs turn canonical mode off while they wait and back on before they run a command. So
  raw mode, with no thread running and no read or write counted by the processes around the look, is
  waiting for input. A program that reads whole lines (`read -p`, `cat`, `input()` without readline)
  leaves canonical mode on, as does a busy one: then nothing can be told, and the answer waits its whole
  `wait` and says why.

After keys are typed there must also be evidence that the program took them (new output, or its
processes ran since just before the typing) and nothing typed may be left unread: until then the
program's state is still the one from before the keys came.
"""

from __future__ import annotations

import fcntl
import os
import platform
import struct
import termios

INPUT, BUSY, UNSEEN = "input", "busy", "unseen"
RELAY_QUIET = 0.15  # s without output before answering a program that polls the terminal with other files

_TIOCGPTN, _TIOCGPTPEER = 0x80045430, 0x5441
_POLLIN = 0x41  # POLLIN | POLLRDNORM
# System call numbers: the reads of a file, select, poll, epoll, and the neutral waits (wait4, waitid,
# futex, futex_waitv). arm64 has no plain select or poll.
_CALLS = {
    "x86_64": {"read": {0, 17, 19, 295}, "select": {23, 270}, "poll": {7, 271}, "epoll": {232, 281, 441},
               "neutral": {61, 247, 202, 449}},
    "aarch64": {"read": {63, 65, 67, 69}, "select": {72}, "poll": {73}, "epoll": {22, 441},
                "neutral": {260, 95, 98, 449}},
}.get(platform.machine())
# What a thread is doing, as far as waiting for input goes.
_RUNS, _READS_TTY, _READS_TTY_AND_MORE, _NEUTRAL, _OTHER = "runs", "tty", "tty+", "neutral", "other"

NO_SYSCALLS = ("this sandbox's kernel (gVisor) shows it only for programs that edit their own line or draw "
               "the screen (REPLs, shells, debuggers, full-screen programs), not for one that reads whole lines")
REFUSED = "one of its processes belongs to another user or hides its state, and it reads whole lines"
NO_TERMINAL = "its terminal cannot be asked"


class Watch:
    """What can be seen of one session's program (its leader `leader`, the terminal's master `fd`)."""

    def __init__(self, fd: int, leader: int) -> None:
        self.fd, self.leader = fd, leader
        self.pts = struct.unpack("I", fcntl.ioctl(fd, _TIOCGPTN, b"\0" * 4))[0]
        self.ttys = {f"/dev/pts/{self.pts}", "/dev/tty"}
        # Where the leader has no syscall file (gVisor), none of its processes will: the mode, for good.
        self.syscalls = _CALLS is not None and os.path.exists(f"/proc/{leader}/syscall")
        self.known: dict = {}  # pid -> whether it is of this session, where /proc is listed (see _candidates)

    def look(self) -> tuple:
        """(verdict, relay, why): INPUT, BUSY or UNSEEN; whether the terminal is polled beside other files
        (ssh, a relay: their far side may be busy); why it cannot be seen, for UNSEEN."""
        if not self.syscalls:
            return self._by_mode(NO_SYSCALLS)
        try:
            group = os.tcgetpgrp(self.fd)
        except OSError:
            return self._by_mode(NO_SYSCALLS)
        counted = []
        try:
            for pid in self._processes(group):
                kind = self._process(pid)
                if kind in (_READS_TTY, _READS_TTY_AND_MORE) or self._stdin_is_tty(pid):
                    counted.append(kind)
        except PermissionError:
            return self._by_mode(REFUSED)
        except (FileNotFoundError, ProcessLookupError, ValueError, IndexError):
            return BUSY, False, None  # a process or thread went while we looked: look again
        if any(kind in (_RUNS, _OTHER) for kind in counted) or not counted:
            return BUSY, False, None
        reads = [kind for kind in counted if kind in (_READS_TTY, _READS_TTY_AND_MORE)]
        return (INPUT, _READS_TTY_AND_MORE in reads, None) if reads else (BUSY, False, None)

    def activity(self) -> int:
        """A count that moves whenever the program in the terminal's foreground runs (every process of the
        session, where the foreground cannot be asked): context switches and read calls. A job in the
        background must not pass for the program taking the keys typed to it."""
        try:
            group: int | None = os.tcgetpgrp(self.fd)
        except OSError:
            group = None
        total = 0
        for pid in self._processes(group):
            for name, keys in (("status", ("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")),
                               ("io", ("syscr:",))):
                try:
                    fields = _read(f"/proc/{pid}/{name}").split()
                except OSError:
                    continue
                total += sum(int(fields[fields.index(key) + 1]) for key in keys if key in fields)
        return total

    def unread(self) -> int:
        """Bytes typed that the program has not read yet (in canonical mode: whole lines only)."""
        try:
            peer = fcntl.ioctl(self.fd, _TIOCGPTPEER, os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError:  # no TIOCGPTPEER (gVisor): the replica by its name
            try:
                peer = os.open(f"/dev/pts/{self.pts}", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC | os.O_NONBLOCK)
            except OSError:
                return 0
        try:
            return struct.unpack("i", fcntl.ioctl(peer, termios.FIONREAD, b"\0" * 4))[0]
        except OSError:
            return 0
        finally:
            os.close(peer)

    # -- by the system calls ----------------------------------------------------------------------

    def _processes(self, group: int | None) -> list:
        """The live processes of the session (of process group `group`, when given)."""
        found = []
        for pid in self._candidates():
            try:
                fields = _stat(f"/proc/{pid}/stat")
            except OSError:
                continue
            if fields[0] != "Z" and int(fields[3]) == self.leader and (group is None or int(fields[2]) == group):
                found.append(pid)
        return found

    def _candidates(self) -> list:
        """The leader and its descendants, from the children files (a few reads, however many processes
        there are). Where there are none (gVisor), the processes of the session, from a listing of /proc
        whose new entries alone are looked at (a system call costs more there)."""
        found, todo = [], [self.leader]
        while todo:
            pid = todo.pop()
            found.append(pid)
            try:
                for tid in os.listdir(f"/proc/{pid}/task"):
                    with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                        todo += [int(child) for child in f.read().split()]
            except FileNotFoundError:
                if pid == self.leader and os.path.exists(f"/proc/{pid}"):  # no children files at all
                    return self._listed()
            except OSError:
                continue
        return found

    def _listed(self) -> list:
        pids = {int(name) for name in os.listdir("/proc") if name.isdigit()}
        for pid in pids - self.known.keys():
            try:
                self.known[pid] = int(_stat(f"/proc/{pid}/stat")[3]) == self.leader
            except (OSError, IndexError, ValueError):
                continue
        for pid in self.known.keys() - pids:
            del self.known[pid]
        return [pid for pid, ours in self.known.items() if ours]

    def _process(self, pid: int) -> str:
        kinds = {self._thread(pid, tid) for tid in os.listdir(f"/proc/{pid}/task")}
        for kind in (_RUNS, _READS_TTY_AND_MORE, _READS_TTY, _OTHER):  # a REPL's helper threads may sleep
            if kind in kinds:
                return kind
        return _NEUTRAL

    def _thread(self, pid: int, tid: str) -> str:
        state = _stat(f"/proc/{pid}/task/{tid}/stat")[0]
        if state in "RD":
            return _RUNS
        if state in "tTZXx":  # stopped (Ctrl-Z without job control): nobody reads
            return _NEUTRAL
        call = _read(f"/proc/{pid}/task/{tid}/syscall").split()  # PermissionError: another user's
        if not call or not call[0].isdigit():
            return _RUNS  # "running", or blocked outside a system call (a page fault): -1
        number, args = int(call[0]), [int(a, 16) for a in call[1:7]]
        if number in _CALLS["neutral"]:
            return _NEUTRAL
        if number in _CALLS["read"]:
            target = _link(pid, args[0])
            return _READS_TTY if target in self.ttys else _NEUTRAL if target.startswith("pipe:") else _OTHER
        if number in _CALLS["select"] | _CALLS["poll"] | _CALLS["epoll"]:
            targets = {_link(pid, fd) for fd in _polled(pid, number, args)}
            if targets & self.ttys:
                return _READS_TTY_AND_MORE if targets - self.ttys else _READS_TTY
        return _OTHER  # a sleep, a socket, a timer

    def _stdin_is_tty(self, pid: int) -> bool:
        return _link(pid, 0) in self.ttys

    # -- by the terminal's mode -------------------------------------------------------------------

    def _by_mode(self, why: str) -> tuple:
        """Raw mode, and nothing ran from before one look at the mode to after another."""
        if self._canonical():
            return UNSEEN, False, why
        pids = self._processes(None)
        before = self._fingerprint(pids)
        if before is None or self._canonical():
            return BUSY, False, None
        return (INPUT, False, None) if self._fingerprint(pids) == before else (BUSY, False, None)

    def _canonical(self) -> bool:
        try:
            return bool(termios.tcgetattr(self.fd)[3] & termios.ICANON)
        except termios.error:
            return True

    def _fingerprint(self, pids: list) -> list | None:
        """What each counted process has done (reads and writes, else context switches); None when one
        runs, or none is left. (Its main thread's state: each look costs more where this is used.)"""
        seen = []
        for pid in pids:
            try:
                if not self._stdin_is_tty(pid):
                    continue
                if _stat(f"/proc/{pid}/stat")[0] in "RD":
                    return None
                try:
                    io = _read(f"/proc/{pid}/io").split()
                    seen.append((pid, io[io.index("syscr:") + 1], io[io.index("syscw:") + 1]))
                except PermissionError:  # not ours to read: how often it slept, which anyone may read
                    seen.append((pid, [line for line in _read(f"/proc/{pid}/status").splitlines() if "ctxt" in line]))
            except (OSError, ValueError, IndexError):
                continue
        return seen or None


class Early:
    """One answer's early end: it may come once the program waits for input and, when keys were typed
    for this answer, has taken them. Made before the keys are typed (`typed`), so that what the program
    does with them is seen even when it is quicker than the first look."""

    def __init__(self, watch: Watch | None, size: int, typed: bool) -> None:
        self.watch, self.size = watch, size
        self.activity = watch.activity() if watch is not None and typed else None
        self.taken = not typed
        self.unseen: str | None = None if watch is not None else NO_TERMINAL

    def pause(self, quiet: float) -> float:
        """How long to sleep before the next look: 1 ms right after typing or output, backing off to 0.1 s."""
        return min(0.1, max(0.001, quiet / 4))

    def ready(self, size: int, quiet: float) -> bool:
        """Whether the answer can come now; `size`: what the session printed so far, `quiet`: seconds
        since it last printed."""
        if self.watch is None:
            return False
        if not self.taken:
            self.taken = size != self.size or self.watch.activity() != self.activity
            if not self.taken:
                return False
        verdict, relay, why = self.watch.look()
        self.unseen = why if verdict == UNSEEN else None
        if verdict != INPUT or (relay and quiet < RELAY_QUIET):
            return False
        return self.watch.unread() == 0


def _polled(pid: int, number: int, args: list) -> list:
    """The descriptors a blocked select, poll or epoll waits on for reading."""
    if number in _CALLS["epoll"]:
        fds = []
        for line in _read(f"/proc/{pid}/fdinfo/{args[0]}").splitlines():
            if line.startswith("tfd:"):  # "tfd:        0 events:       19 data: ..."
                fields = line.split()
                if int(fields[3], 16) & 1:  # EPOLLIN
                    fds.append(int(fields[1]))
        return fds
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as memory:
        if number in _CALLS["poll"]:
            memory.seek(args[0])
            raw = memory.read(8 * min(args[1], 4096))
            return [fd for fd, events, _ in struct.iter_unpack("ihh", raw) if events & _POLLIN and fd >= 0]
        if not args[1]:  # no read set
            return []
        memory.seek(args[1])
        bits = int.from_bytes(memory.read((min(args[0], 1 << 16) + 63) // 64 * 8), "little")
        return [fd for fd in range(args[0]) if bits >> fd & 1]


def _link(pid: int, fd: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/fd/{fd}")
    except PermissionError:
        raise
    except OSError:
        return ""


def _read(path: str) -> str:
    with open(path, "rb") as f:
        return f.read(8192).decode("ascii", "replace")


def _stat(path: str) -> list:
    """A stat file's fields after the command's name: [state, ppid, pgrp, sid, ...]."""
    text = _read(path)
    return text[text.rfind(")") + 2:].split()
