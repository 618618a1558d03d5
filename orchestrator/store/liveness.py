"""Whether a run is live, and the lock that makes it so.

A run is live from the moment it is made until the process that drives it is gone: that process holds an
exclusive `flock` on `state/lock` (taken in `RunDir.create` before run.json exists, or by `resume` before it
touches the run), and the kernel lets go of it when the process ends, however it ends. `ls`, `watch`,
`gc`, `rm`, `stop`, batches and the API ask the lock, never the clock. `state/pid` (who holds it) stays as
information, and decides only for a run made by an older cairn, which has no lock file.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import IO, Any, Protocol

from orchestrator.errors import UsageError


class RunDir(Protocol):
    """What of a run (store/runs.RunDir, which takes its lock from here) liveness reads: its id and state/."""

    id: str
    state: Path

LOCK_FILE = "lock"
# A probe holds a shared lock for an instant: a taker that meets one tries again for this long before it
# believes another process drives the run (which holds its lock for the run's whole life).
TAKE_PATIENCE_S = 0.5


class RunIsLive(UsageError):
    """Another process drives this run: nothing may act on it meanwhile."""


class RunLock:
    """The exclusive lock on one run, held through an open file; released by `release()` or by the
    process's end. The lock file itself is never removed: a path unlinked under a waiting taker would let
    two processes lock two different files."""

    def __init__(self, handle: IO[bytes]) -> None:
        self._handle: IO[bytes] | None = handle

    @classmethod
    def take(cls, state: Path, patience: float = TAKE_PATIENCE_S) -> "RunLock | None":
        """The run's lock, or None when another process holds it."""
        handle = open(state / LOCK_FILE, "a+b")  # noqa: SIM115 - kept open as long as the lock is held
        deadline = time.monotonic() + patience
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return cls(handle)
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    handle.close()
                    return None
                time.sleep(0.01)
            except BaseException:
                handle.close()
                raise

    @property
    def held(self) -> bool:
        return self._handle is not None

    def release(self) -> None:
        if self._handle is not None:
            self._handle.close()  # closing the only descriptor lets go of the flock
            self._handle = None


def lock_is_held(state: Path) -> bool | None:
    """True when some process holds the run's lock (this one too, through another descriptor); None when
    the run has no lock file (made by an older cairn)."""
    try:
        handle = open(state / LOCK_FILE, "rb")  # noqa: SIM115
    except FileNotFoundError:
        return None
    except OSError:
        return False
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)  # never conflicts with another probe
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


def run_is_live(run: RunDir) -> bool:
    """True while a process holds the run's lock: from `cairn run` making it until that process is gone."""
    held = lock_is_held(run.state)
    return held if held is not None else _pid_file_is_live(run)


def live_error(run: RunDir) -> RunIsLive:
    """The one-line refusal for acting on a run another process drives."""
    return RunIsLive(f"run {run.id} is running in another process", hint=f"cairn watch {run.id} follows it; "
                     f"cairn stop {run.id} stops it")


def write_pid_file(run: RunDir) -> None:
    """Who drives the run, for a person (and an older cairn) to read."""
    pid_file = run.state / "pid"
    tmp = pid_file.with_name("pid.tmp")
    tmp.write_text(json.dumps(process_identity(os.getpid())))
    os.replace(tmp, pid_file)


def process_identity(pid: int) -> dict[str, Any]:
    """What tells this process from a later one that got the same pid: host, boot and start time."""
    return {"pid": pid, "host": socket.gethostname(), "boot": _read("/proc/sys/kernel/random/boot_id"),
            "start": _start_time(pid)}


def _pid_file_is_live(run: RunDir) -> bool:
    """For a run without a lock file: true while the process named in `state/pid` runs. A pid file a
    SIGKILL left behind is stale: its pid is gone, or now names another process (another start time or
    boot), or it was written on another host (an imported run)."""
    try:
        text = (run.state / "pid").read_text()
    except OSError:
        return False
    try:
        recorded = json.loads(text)
        if isinstance(recorded, int):  # the older format: the pid alone
            recorded = {"pid": recorded}
        pid = int(recorded["pid"])
        os.kill(pid, 0)
    except PermissionError:  # the process exists under another user
        pass
    except (OSError, ValueError, TypeError, KeyError):
        return False
    now = process_identity(pid)
    return all(recorded.get(key) is None or recorded[key] == now[key] for key in ("host", "boot", "start"))


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux); None where /proc is not there."""
    stat = _read(f"/proc/{pid}/stat")
    if stat is None:
        return None
    try:
        return int(stat.rsplit(")", 1)[1].split()[19])  # field 22; the name in (...) may hold spaces
    except (IndexError, ValueError):
        return None
