"""A run's files for the page: the list of its workspace, and one file read without ever leaving the run.

The agent owns the workspace: any name in it may be a symbolic link to anywhere on this machine, and it
may change one while the page reads. So a file is opened one path component at a time, each relative
to the folder opened before it and with O_NOFOLLOW, never by a path the kernel resolves on its own:
a component that is a link is looked at (its target, read with readlink) and followed only when the
target, taken as a path inside the same root, stays in it; a link to an absolute path or out through
`..` is refused. What is opened last must be a regular file. The roots are the run's workspace and its
own cairn folder (`/cairn` in the sandbox: saved outputs, the critic's notes).
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from pathlib import Path
from typing import Any

from orchestrator.store.run_dir import RunDir

NOISE = {".git", "node_modules", ".venv", "__pycache__", ".pytest_cache", ".mypy_cache"}
MAX_LIST = 5000  # entries listed at most; a tree of generated files is not a file browser's job
MAX_READ = 2 * 1024 * 1024  # bytes of one file shown at most
MAX_LINKS = 8
IMAGES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
          ".webp": "image/webp", ".bmp": "image/bmp", ".ico": "image/x-icon"}  # never SVG: it can hold a script


class Refused(Exception):
    """A path the page may not read, with one line saying why."""


def root_of(run: RunDir, name: str) -> Path:
    if name == "workspace":
        return run.workspace
    if name == "cairn":
        return run.cairn_dir
    raise Refused(f"no such root {name[:40]!r}: workspace or cairn")


def _parts(rel: str) -> list[str]:
    if "\0" in rel:
        raise Refused("a path has no NUL byte")
    if rel.startswith("/"):
        raise Refused(f"{rel[:200]}: give a path relative to the run's folder")
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise Refused(f"{rel[:200]}: a path in the run has no '..'")
    if not parts:
        raise Refused("no file named")
    return parts


def open_inside(root: Path, rel: str) -> int:
    """A read-only descriptor of the regular file `rel` under `root`; Refused when it is not one, or
    reaching it would leave `root`."""
    parts, hops = _parts(rel), 0
    try:
        top = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        raise Refused("the run's folder is not there") from None
    fds = [top]
    try:
        i = 0
        while i < len(parts):
            here, part, last = fds[-1], parts[i], i == len(parts) - 1
            try:
                info = os.stat(part, dir_fd=here, follow_symlinks=False)
            except FileNotFoundError:
                raise Refused(f"{rel[:200]}: no such file") from None
            if stat.S_ISLNK(info.st_mode):
                hops += 1
                target = os.readlink(part, dir_fd=here)
                if target.startswith("/"):
                    raise Refused(f"{rel[:200]}: a link to {target[:200]}, outside the run: not followed")
                resolved = posixpath.normpath(posixpath.join(*parts[:i], target) if i else target)
                if resolved == ".." or resolved.startswith("../") or hops > MAX_LINKS:
                    raise Refused(f"{rel[:200]}: a link to {target[:200]}, outside the run: not followed")
                parts = [p for p in resolved.split("/") if p not in ("", ".")] + parts[i + 1:]
                for fd in fds[1:]:
                    os.close(fd)
                fds, i = [top], 0  # again from the root, along the link's target
                continue
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | (0 if last else os.O_DIRECTORY)
            try:
                fds.append(os.open(part, flags, dir_fd=here))
            except OSError as exc:  # swapped for a link since the stat, or no folder
                why = "changed while it was read" if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
                raise Refused(f"{rel[:200]}: {why}") from None
            i += 1
        if not stat.S_ISREG(os.fstat(fds[-1]).st_mode):
            raise Refused(f"{rel[:200]}: not a regular file")
        return fds.pop()
    finally:
        for fd in fds:
            os.close(fd)


def read_file(root: Path, rel: str) -> dict[str, Any]:
    """What the page shows of one file: its text (up to MAX_READ bytes), or that it is binary or an image."""
    fd = open_inside(root, rel)
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(fd).st_size
        data = f.read(MAX_READ)
    image = IMAGES.get(Path(rel).suffix.lower())
    binary = b"\0" in data[:8192]
    return {"path": rel, "size": size, "image": image, "binary": binary and not image,
            "text": None if binary or image else data.decode("utf-8", "replace"), "cut": size > len(data)}


def read_image(root: Path, rel: str) -> tuple[bytes, str]:
    image = IMAGES.get(Path(rel).suffix.lower())
    if image is None:
        raise Refused(f"{rel[:200]}: not an image the page shows (png, jpeg, gif, webp, bmp, ico)")
    fd = open_inside(root, rel)
    with os.fdopen(fd, "rb") as f:
        return f.read(16 * MAX_READ), image


def list_files(root: Path) -> dict[str, Any]:
    """The files under `root`, sorted, without following links (a link is listed as one), without the
    folders of generated files (NOISE); at most MAX_LIST."""
    rows: list[dict[str, Any]] = []
    cut = False
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        try:
            entries = sorted(os.scandir(root / rel_dir if rel_dir else root), key=lambda d: d.name)
        except OSError:
            continue
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            try:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name not in NOISE:
                        stack.append(rel)
                    continue
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if len(rows) >= MAX_LIST:
                cut = True
                break
            rows.append({"path": rel, "size": info.st_size, "link": entry.is_symlink()})
        if cut:
            break
    rows.sort(key=lambda r: r["path"])
    return {"files": rows, "cut": cut}
