"""Whether a run is live: the pid file a session writes (`state/pid`) names a process that still runs, on
this host, since this boot, started when the pid file says. `ls`, `gc` and `resume` ask."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

from orchestrator.store.runs import RunDir


def process_identity(pid: int) -> dict[str, Any]:
    """What tells this process from a later one that got the same pid: host, boot and start time."""
    return {"pid": pid, "host": socket.gethostname(), "boot": _read("/proc/sys/kernel/random/boot_id"),
            "start": _start_time(pid)}


def run_is_live(run: RunDir) -> bool:
    """True while the process named in `state/pid` runs. A pid file a SIGKILL left behind is stale: its
    pid is gone, or now names another process (another start time or boot), or it was written on another
    host (an imported run)."""
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
