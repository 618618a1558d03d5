"""Giving the files a root agent made in a bind-mounted directory back to the directory's owner.

The check runs on the host, which sees the same directory: it walks the tree with lstat and stops at the
first file the agent's uid owns. Only then does `chown` run, in the container, as root (the container has
CHOWN; the host user running cairn may not be root). Symlinks are changed themselves, never followed.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import docker.errors
from docker.models.containers import Container

from orchestrator.errors import SandboxError, first_line
from orchestrator.store import run_files


def owned_by(root: Path, uid: int, skip: list[Path] = ()) -> bool:
    """True when anything under `root` (itself included, `skip` and what is under it excluded) belongs to
    `uid`, or cannot be read: a directory the agent made with mode 700 is itself a reason to give back.
    Listed by descriptor (store/run_files.py): a folder swapped for a link meanwhile is not entered."""
    skipped = {os.path.relpath(path, root) for path in skip}
    try:
        if os.lstat(root).st_uid == uid:
            return True
    except FileNotFoundError:
        return False
    for entry in run_files.walk(root, enter=lambda e: e.rel not in skipped):
        if entry.rel in skipped:
            continue
        if entry.stat.st_uid == uid:
            return True
        if entry.is_dir() and not os.access(entry.name, os.R_OK | os.X_OK, dir_fd=entry.dir_fd):
            return True
    return False


def chown_back(container: Container, destination: str, agent_uid: int, owner: tuple[int, int],
               prune: list[str] = ()) -> None:
    """In the container: give what `agent_uid` owns under `destination` to `owner` (uid, gid)."""
    pruned = " ".join(f"-path {shlex.quote(path)} -prune -o" for path in prune)
    uid, gid = owner
    script = f"find {shlex.quote(destination)} {pruned} -uid {agent_uid} -exec chown -h {uid}:{gid} {{}} +"
    try:
        code, output = container.exec_run(["sh", "-c", script], user="0:0")
    except docker.errors.APIError as exc:
        raise SandboxError(f"cannot give the files under {destination} back to {uid}:{gid}: "
                           f"{first_line(exc.explanation or exc, 200)}") from exc
    if code != 0:
        detail = output.decode(errors="replace").strip().splitlines()[-1:] or [f"exit code {code}"]
        raise SandboxError(f"cannot give the files under {destination} back to {uid}:{gid}: {detail[0][:200]}")
