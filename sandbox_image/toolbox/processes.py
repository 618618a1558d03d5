"""The container's processes as /proc shows them, and its limits as its cgroup (v1 or v2) shows them."""

from __future__ import annotations

import os
import re
import signal
import time


def procs() -> list:
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


def cgroup_file(*candidates: str) -> str | None:
    return next((p for p in candidates if os.path.exists(p)), None)


def read_int(path: str | None) -> int | None:
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


def last_pid() -> int:
    """The newest pid of this pid namespace: what a command starts afterwards has a higher one."""
    return read_int("/proc/sys/kernel/ns_last_pid") or 0


def read_counter(path: str | None, key: bytes) -> int:
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
        self.pids_max = read_int(cgroup_file("/sys/fs/cgroup/pids/pids.max", "/sys/fs/cgroup/pids.max"))
        self.pids_current = cgroup_file("/sys/fs/cgroup/pids/pids.current", "/sys/fs/cgroup/pids.current")
        self.pids_events = cgroup_file("/sys/fs/cgroup/pids/pids.events", "/sys/fs/cgroup/pids.events")
        self.memory_max = read_int(
            cgroup_file("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory.max"))
        self.oom_events = cgroup_file("/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events")
        self.refused_seen = read_counter(self.pids_events, b"max")

    def near_pids_limit(self) -> bool:
        """Whether a fork was refused for the limit since the last look, or the count is near the limit.

        Both, because a fork bomb's count swings: it can hit the limit between two looks at the count.
        """
        if not self.pids_max:
            return False
        refused = read_counter(self.pids_events, b"max")
        if refused > self.refused_seen:
            self.refused_seen = refused
            return True
        current = read_int(self.pids_current) if self.pids_current else len(procs())
        return current is not None and current >= 0.8 * self.pids_max

    def oom_kills(self) -> int:
        return read_counter(self.oom_events, b"oom_kill")


RAISED = b"1000"  # the oom_score_adj a command runs at: the OOM killer takes it before anything else


def own_oom_score_adj() -> int:
    """This process's oom_score_adj (0 where /proc does not say)."""
    try:
        with open("/proc/self/oom_score_adj", "rb") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return 0


def lower_raised(to: int, wanted) -> int:
    """Set every process that `wanted(pid, sid)` picks and that is still at RAISED back to `to`; how many.
    Lowering to 0 (or to a value at or above what the process had when its value was last set by a
    privileged writer) needs no capability: a non-root toolbox can do it for its own user's processes."""
    lowered = 0
    for pid, _pgid, sid in procs():
        if not wanted(pid, sid):
            continue
        try:
            fd = os.open(f"/proc/{pid}/oom_score_adj", os.O_RDWR)
        except OSError:  # gone, or another user's
            continue
        try:
            if os.read(fd, 16).strip() == RAISED:
                os.lseek(fd, 0, os.SEEK_SET)
                os.write(fd, str(to).encode())
                lowered += 1
        except OSError:
            pass
        finally:
            os.close(fd)
    return lowered


def kill_session(sid: int) -> None:
    """SIGKILL every process of session `sid` (a command and what it left running), until none is left."""
    for _ in range(50):
        targets = [pid for pid, _pgid, psid in procs() if psid == sid]
        if not targets:
            return
        for pid in targets:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.01)
