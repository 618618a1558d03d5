"""Reading what a run's sandbox wrote (its workspace/ and cairn/, the sandbox's /cairn): the one way the
host opens, reads and lists those folders.

The agent owns them, as root in its container, and it is still running while the host reads: any name
in them may be a symbolic link to anywhere on this machine (`/proc/self/environ`, a key), a FIFO that
blocks whoever opens it, a device, a file of any size, and it may change one into another between a
check and a use. So here:
- a path is opened one component at a time, each relative to the folder opened before it, with
  O_NOFOLLOW: a component that is a link is refused (or, for the web page's file view, followed only
  while its target stays inside the root: `links="inside"`), never resolved by the kernel on its own;
- what is opened last must be a regular file, as its descriptor says (`fstat`: nothing can be swapped
  in between), and it is opened with O_NONBLOCK, so a FIFO or a device never blocks the open;
- a read takes at most the bytes the caller names;
- a folder is listed by descriptor (`walk`): each folder is opened relative to its parent's descriptor
  with O_NOFOLLOW before it is listed, so a folder swapped for a link meanwhile is not entered.

The root itself (the run's workspace/ or cairn/, or the folder of `--workspace DIR`) is cairn's or the
person's, and is taken as it is. tests/store/test_run_files.py finds any other read of run content in
the package.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

MAX_LINKS = 8  # links followed in one path, with links="inside"
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class Refused(Exception):
    """A path under a run's folder the host does not read, with one line saying why."""


class Missing(Refused):
    """A path that is not there (or its root is not)."""


def open_file(root: Path, rel: str, links: str = "refuse") -> int:
    """A read-only descriptor of the regular file `rel` under `root`; Refused when it is missing, is not a
    regular file, or reaching it would follow a link (`links="refuse"`) or leave `root` (`"inside"`)."""
    parts, hops = _parts(rel), 0
    try:
        top = os.open(root, _DIR)
    except OSError:
        raise Missing(f"{root} is not there") from None
    fds = [top]
    try:
        i = 0
        while i < len(parts):
            here, part, last = fds[-1], parts[i], i == len(parts) - 1
            try:
                info = os.stat(part, dir_fd=here, follow_symlinks=False)
            except FileNotFoundError:
                raise Missing(f"{rel[:200]}: no such file") from None
            except OSError as exc:
                raise Refused(f"{rel[:200]}: {exc.strerror}") from None
            if stat.S_ISLNK(info.st_mode):
                target = os.readlink(part, dir_fd=here)
                if links != "inside":
                    raise Refused(f"{rel[:200]}: a symbolic link (to {target[:200]}): not followed")
                hops += 1
                resolved = posixpath.normpath(posixpath.join(*parts[:i], target) if i else target)
                if target.startswith("/") or resolved == ".." or resolved.startswith("../") or hops > MAX_LINKS:
                    raise Refused(f"{rel[:200]}: a link to {target[:200]}, outside the run: not followed")
                parts = [p for p in resolved.split("/") if p not in ("", ".")] + parts[i + 1:]
                for fd in fds[1:]:
                    os.close(fd)
                fds, i = [top], 0  # again from the root, along the link's target
                continue
            try:
                fds.append(os.open(part, _FILE if last else _DIR | os.O_NOFOLLOW, dir_fd=here))
            except OSError as exc:  # swapped for a link since the stat, or not a folder
                why = "changed while it was read" if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
                raise Refused(f"{rel[:200]}: {why}") from None
            i += 1
        mode = os.fstat(fds[-1]).st_mode
        if not stat.S_ISREG(mode):
            raise Refused(f"{rel[:200]}: {_kind(mode)}, not a regular file")
        return fds.pop()
    finally:
        for fd in fds:
            os.close(fd)


def read_bytes(root: Path, rel: str, max_bytes: int, links: str = "refuse") -> bytes:
    """At most `max_bytes` of the regular file `rel` under `root` (open_file's rules); Refused otherwise."""
    fd = open_file(root, rel, links)
    try:
        return _read(fd, max_bytes)
    finally:
        os.close(fd)


def read_text(root: Path, rel: str, max_bytes: int) -> str | None:
    """The text of `rel` under `root` (at most `max_bytes`, undecodable bytes replaced), or None when it
    is missing or is not a regular file reached without a link."""
    try:
        return read_bytes(root, rel, max_bytes).decode("utf-8", "replace")
    except Refused:
        return None


def read_at(root: Path, rel: str, offset: int, max_bytes: int) -> bytes:
    """At most `max_bytes` of `rel` from `offset` on (a file that grows: a live output); b"" when it is
    not a regular file reached without a link."""
    try:
        fd = open_file(root, rel)
    except Refused:
        return b""
    try:
        return os.pread(fd, max_bytes, offset)
    except OSError:
        return b""
    finally:
        os.close(fd)


def size_and_tail(root: Path, rel: str, max_bytes: int) -> tuple[int, bytes]:
    """The size of `rel` and its last `max_bytes` (Refused as open_file)."""
    fd = open_file(root, rel)
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - max_bytes)
        return size, os.pread(fd, size - start, start)
    finally:
        os.close(fd)


@dataclass
class Entry:
    """One name found by `walk`: `rel` under the root, `name` in its folder, that folder's descriptor
    (open only while the walk is in that folder) and the name's own lstat."""

    rel: str
    name: str
    dir_fd: int
    stat: os.stat_result

    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.stat.st_mode)

    def is_link(self) -> bool:
        return stat.S_ISLNK(self.stat.st_mode)

    def is_file(self) -> bool:
        return stat.S_ISREG(self.stat.st_mode)


def walk(root: Path, enter: Callable[[Entry], bool] | None = None, sort: bool = False) -> Iterator[Entry]:
    """Every name under `root`, a folder before what it holds, listed by descriptor: a folder is entered
    (when `enter` says so, default always) only if it can be opened relative to its parent's descriptor
    without following a link. What vanishes or cannot be read meanwhile is left out. `sort`: by name
    within each folder, and folders in that order."""
    try:
        top = os.open(root, _DIR)
    except OSError:
        return
    stack = [("", top)]
    try:
        while stack:
            rel_dir, fd = stack.pop()
            try:
                try:
                    with os.scandir(fd) as listing:
                        names = [item.name for item in listing]
                except OSError:
                    continue
                below = []
                for name in sorted(names) if sort else names:
                    try:
                        info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    except OSError:
                        continue
                    entry = Entry(f"{rel_dir}/{name}" if rel_dir else name, name, fd, info)
                    yield entry
                    if entry.is_dir() and (enter is None or enter(entry)):
                        try:
                            below.append((entry.rel, os.open(name, _DIR | os.O_NOFOLLOW, dir_fd=fd)))
                        except OSError:  # a link or gone by now: not entered
                            continue
                stack.extend(reversed(below))
            finally:
                os.close(fd)
    finally:
        for _, fd in stack:
            os.close(fd)


def copy_tree(source: Path, target: Path, links: bool = False,
              skip: Callable[[Entry], bool] | None = None) -> list[str]:
    """Copy the folders and regular files under `source` into `target` (made as needed), listed and read by
    descriptor; symbolic links are copied as links with `links`, else left out, and FIFOs, sockets and
    devices are always left out, as is a folder `skip` names (with what it holds). Returns what was left
    out, as "PATH (a symbolic link)" lines."""
    left_out = []
    target.mkdir(parents=True, exist_ok=True)
    skipped: set[str] = set()  # walk asks whether to enter a folder after this loop has seen it
    for entry in walk(source, lambda folder: folder.rel not in skipped):
        there = target / entry.rel
        if entry.is_dir() and skip is not None and skip(entry):
            skipped.add(entry.rel)
        elif entry.is_dir():
            there.mkdir(exist_ok=True)
        elif entry.is_file():
            _copy_file(entry, there)
        elif entry.is_link() and links:
            os.symlink(os.readlink(entry.name, dir_fd=entry.dir_fd), there)
        else:
            left_out.append(f"{entry.rel} ({'a symbolic link' if entry.is_link() else _kind(entry.stat.st_mode)})")
    return left_out


def _copy_file(entry: Entry, there: Path) -> None:
    try:
        fd = os.open(entry.name, _FILE, dir_fd=entry.dir_fd)
    except OSError:  # gone, or swapped for a link, since it was listed
        return
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return
        with open(there, "wb") as out:
            while chunk := os.read(fd, 1 << 20):
                out.write(chunk)
        os.chmod(there, stat.S_IMODE(info.st_mode))
        os.utime(there, ns=(info.st_atime_ns, info.st_mtime_ns))
    finally:
        os.close(fd)


def _read(fd: int, max_bytes: int) -> bytes:
    chunks, left = [], max_bytes
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


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


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a file"
