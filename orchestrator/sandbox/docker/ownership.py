"""Giving the files a root agent made in a bind-mounted directory back to the directory's owner.

The check runs on the host, which sees the same directory. With the directory's change list
(store/change_list.py), only the paths that changed since the last time are looked at (`owned_among`),
and `chown` runs on those the agent's uid owns, named one by one (`chown_paths`). Without one, or when it
is incomplete, the whole tree is walked with lstat, stopping at the first file the agent's uid owns
(`owned_by`), and then `find` gives back everything it owns (`chown_back`). Either way `chown` runs in
the container, as root (the container has CHOWN; the host user running cairn may not be root), and only
when there is something to give back. Symlinks are changed themselves, never followed.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import docker.errors
from docker.models.containers import Container

from orchestrator.errors import SandboxError, first_line


def owned_by(root: Path, uid: int, skip: list[Path] = ()) -> bool:
    """True when anything under `root` (itself included, `skip` and what is under it excluded) belongs to
    `uid`, or cannot be read: a directory the agent made with mode 700 is itself a reason to give back."""
    skipped = {os.fspath(path) for path in skip}
    stack = [os.fspath(root)]
    try:
        if os.lstat(root).st_uid == uid:
            return True
        while stack:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    if entry.path in skipped:
                        continue
                    if entry.stat(follow_symlinks=False).st_uid == uid:
                        return True
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
    except FileNotFoundError:  # removed while walked: whatever remains is seen next time
        return False
    except PermissionError:
        return True
    return False


def owned_among(root: Path, changed: dict[str, int], uid: int, skip: list[str] = ()) -> list[str]:
    """Of the `changed` paths (relative to `root`), those that belong to `uid` now; `skip`: relative paths
    of other mounts, left out with what is under them."""
    prefixes = [path.rstrip("/") + "/" for path in skip]
    owned = []
    for rel in sorted(changed):
        if any((rel + "/").startswith(prefix) for prefix in prefixes):
            continue
        try:
            if os.lstat(os.path.join(root, rel)).st_uid == uid:
                owned.append(rel)
        except OSError:
            continue  # gone meanwhile
    return owned


ARGV_BYTES = 100_000  # of paths in one `chown` (well under the kernel's limit on a command line)


def chown_paths(container: Container, destination: str, paths: list[str], owner: tuple[int, int]) -> None:
    """In the container: give these paths (relative to `destination`) to `owner` (uid, gid), one `chown -h`
    for every ARGV_BYTES of names (no shell: a name is an argument, whatever it holds). A path that went
    away meanwhile is no error."""
    uid, gid = owner
    batch: list[str] = []
    size = 0
    for rel in paths + [None]:
        if rel is not None:
            full = f"{destination.rstrip('/')}/{rel}"
            batch.append(full)
            size += len(full) + 1
        if batch and (rel is None or size >= ARGV_BYTES):
            try:
                code, output = container.exec_run(["chown", "-h", f"{uid}:{gid}", "--", *batch], user="0:0")
            except docker.errors.APIError as exc:
                raise SandboxError(f"cannot give the files under {destination} back to {uid}:{gid}: "
                                   f"{first_line(exc.explanation or exc, 200)}") from exc
            # A path removed since it was seen is no error: the next change list names what is left.
            errors = [line for line in output.decode(errors="replace").splitlines()
                      if line.strip() and "No such file or directory" not in line]
            if code != 0 and errors:
                raise SandboxError(f"cannot give the files under {destination} back to {uid}:{gid}: {errors[-1][:200]}")
            batch, size = [], 0


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
