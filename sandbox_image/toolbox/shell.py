"""The agent's shell: one persistent bash (cwd, variables and venvs persist between commands), and the
fresh shell of a check, in which nothing of the agent's exists."""

from __future__ import annotations

import fcntl
import os
import select
import signal
import subprocess
import time

from .capture import Capture
from .channel import Host
from .errors import HostGone, ToolError
from .processes import RAISED, Limits, kill_session, last_pid, lower_raised, own_oom_score_adj, procs

RESET = "cwd and variables were reset"
INTERRUPTED = "interrupted"  # what _wait returns when the host cut the command short
WATCH_SECONDS = 0.25  # how often a running command is checked for a fork bomb


def shell_argv() -> list:
    """bash when the image has it; else the POSIX `sh` (busybox's ash on alpine), which does all the Shell
    below asks of it (job control with set -m, eval, fd redirections)."""
    for directory in os.environ.get("PATH", "/usr/bin:/bin").split(":") + ["/bin", "/usr/bin"]:
        if directory and os.access(os.path.join(directory, "bash"), os.X_OK):
            return [os.path.join(directory, "bash"), "--noprofile", "--norc"]
    return ["sh"]


SHELL_ARGV = shell_argv()


class Shell:
    """A persistent bash (or `sh` where the image has no bash). Commands run in it, not in a child shell, so
    cwd, variables and venvs persist.

    bash's stdout and stderr are one pipe (so output is merged in the order written); after each command
    bash writes the exit status on a separate control pipe (fd 3), which commands cannot see.
    """

    def __init__(self, root: str, host: Host, env: dict | None = None, watch_limits: bool = True,
                 whole_machine: bool = True) -> None:
        """`env`: the shell's environment (default: the toolbox's own) with TERM, PAGER and GIT_PAGER set for
        a reader that is not a terminal. `watch_limits`: watch the cgroup's process limit, which is the
        container's (a toolbox on the host, in tests, has none of its own to watch). `whole_machine`: the
        machine is the sandbox, so what a command leaves running is any process newer than the toolbox
        (on the host, in tests: only the processes of the shell's session)."""
        self.root, self.host = root, host
        self.limits = Limits()
        if not watch_limits:
            self.limits.pids_max = None
        self.whole_machine, self.first_pid = whole_machine, os.getpid()
        self.oom_base = own_oom_score_adj()  # what the shell goes back to between commands
        self.env = dict(os.environ if env is None else env, TERM="dumb", PAGER="cat", GIT_PAGER="cat")
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
            fcntl.fcntl(out_r, 1031, 1024 * 1024)  # F_SETPIPE_SZ
        except OSError:
            pass
        self.out, self.ctl = out_r, ctl_r
        # set -m gives every command line its own process group, so a timeout can kill it as a whole (busybox
        # sh without a terminal says it cannot, and carries on: the session still tells a command's processes).
        self._send(f"set -m 2>/dev/null\nexec 3>&{ctl_w} {ctl_w}>&- 4</dev/null\n")
        self.oom_seen = self.limits.oom_kills()

    def restart(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.proc.stdin.close()
        os.close(self.out)
        os.close(self.ctl)
        self.start()

    def close(self) -> None:
        """Kill the shell and what it left running, and let go of its pipes (a toolbox that ends on the host;
        in a container they all die with it)."""
        self._kill(lambda pid, pgid, sid: sid == self.proc.pid)  # background jobs first, then bash
        self.proc.kill()
        self.proc.wait()
        self.proc.stdin.close()
        os.close(self.out)
        os.close(self.ctl)

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
        before = last_pid()
        quoted = "'" + command.replace("'", "'\\''") + "'"
        # fd 4 is /dev/null, kept open because reopening it per command is measurably slower. bash's
        # oom_score_adj is raised for the command and lowered after it (see lower_leftovers): with `>|` and
        # `|| :`, so an agent's `set -C` or `set -e` cannot make that fail or end the shell.
        adj = "/proc/self/oom_score_adj"
        sent = self._send(f"{{ echo {RAISED.decode()} >|{adj}; }} 2>/dev/null || :; {{ eval {quoted}\n}} <&4 3>&- 4<&-; "
                          f"echo $? >&3; {{ echo {self.oom_base} >|{adj}; }} 2>/dev/null || :\n")
        status = self._wait(capture, started + timeout, before, notes) if sent else "died"
        interrupted = status == INTERRUPTED
        timed_out = status is None
        if interrupted:
            self._cut_short(before, capture, notes)
            restarted = True
        else:
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
        exit_code = 124 if timed_out else 130 if interrupted else status
        if exit_code == 137 and not notes:  # a SIGKILL that was not ours
            notes.append(self._sigkill_note())
        return dict(exit_code=exit_code, timed_out=timed_out, interrupted=interrupted, shell_restarted=restarted,
                    duration_ms=round((time.monotonic() - started) * 1000, 3), note="; ".join(notes) or None)

    def _cut_short(self, before: int, capture: Capture, notes: list) -> None:
        """The host interrupted the command: nothing more of its line may run (`make; make install`), so
        bash goes with the processes it started, and a fresh one takes its place (the run stops now, and
        its next drive starts a new shell anyway)."""
        self.proc.kill()
        killed = self._kill_new(before)
        self._read_output(capture)
        notes.append(f"interrupted: the person stopped the run; killed {killed} processes it started "
                     f"(it may have partly run); {RESET}")
        self.restart()

    def _wait(self, capture: Capture, deadline: float, before: int, notes: list):
        """Collect output until bash reports the exit status (an int), the deadline passes (None), the host
        interrupts the command (INTERRUPTED), or bash dies ("died")."""
        status = b""
        next_watch = time.monotonic() + WATCH_SECONDS
        while True:
            now = time.monotonic()
            if now >= deadline:
                return None
            ready, _, _ = select.select([self.out, self.ctl, self.host.fd], [], [], min(deadline, next_watch) - now)
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
            if self.host.left(ready):
                # cairn died or was killed: nobody will read this result, so the command must not go on
                # changing the workspace behind the run's back. It is killed here, and the journal
                # says so (server.Toolbox.handle) before the toolbox exits.
                self.proc.kill()  # bash first: it would run the rest of the command line
                self._kill_new(before)
                self._read_output(capture)
                raise HostGone(capture)
            if self.host.interrupted():
                return INTERRUPTED
            if time.monotonic() >= next_watch:
                next_watch = time.monotonic() + WATCH_SECONDS
                if self.limits.near_pids_limit():
                    killed = self._kill_new(before)
                    notes.append(self._limit_note(killed))

    # The out-of-memory killer picks the process with the highest oom_score_adj first, then the biggest. A
    # command runs at 1000 (RAISED), so while it runs it is the first to go, before the toolbox (which
    # cannot go below 0 without CAP_SYS_RESOURCE, which sandboxes do not grant). What it leaves running (a
    # server for the tests, a `nohup` job, a daemon that left the shell's session) must not stay first in
    # line for the rest of the run and through a task's tests: once the command ends (Toolbox.op_shell),
    # every process still at 1000 but bash (which lowers itself) goes back to the toolbox's own value.

    def lower_leftovers(self) -> None:
        if self.whole_machine:
            lower_raised(self.oom_base, lambda pid, sid: pid > self.first_pid and pid != self.proc.pid)
        else:
            lower_raised(self.oom_base, lambda pid, sid: sid == self.proc.pid and pid != self.proc.pid)

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
            seen = procs()
            keep_groups = {pgid for pid, pgid, _ in seen if pid in own or spare(pid)}
            targets = [(pid, pgid) for pid, pgid, sid in seen if pid not in own and wanted(pid, pgid, sid)]
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


def run_fresh(command: str, root: str, env: dict, timeout: float, capture: Capture, host: Host) -> dict:
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
    timed_out = ended = interrupted = False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            ready, _, _ = select.select([out_r, host.fd], [], [], min(left, WATCH_SECONDS))
            if out_r in ready:
                data = os.read(out_r, 1024 * 1024)
                if data:
                    capture.feed(data)
                    continue
                ended = True  # no writer is left: the shell and everything it started are done
                break
            if host.left(ready):
                kill_session(proc.pid)
                raise HostGone(capture)
            if host.interrupted():
                interrupted = True
                break
            if proc.poll() is not None:
                break  # the shell exited; what still holds its output open is left over, and killed below
    finally:
        if ended:  # the shell gets to finish exiting on its own: only what it left behind is killed
            try:
                proc.wait(timeout=max(0.0, min(2.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                pass
        kill_session(proc.pid)
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
    code = 124 if timed_out else 130 if interrupted else (128 - proc.returncode if proc.returncode < 0 else proc.returncode)
    note = (f"timed out after {timeout:g}s: its processes were killed" if timed_out else
            "interrupted: the person stopped the run; its processes were killed" if interrupted else None)
    return dict(exit_code=code, timed_out=timed_out, interrupted=interrupted, shell_restarted=False,
                duration_ms=round((time.monotonic() - started) * 1000, 3), note=note)
