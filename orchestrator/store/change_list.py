"""Which paths changed under a run's folders, from the host kernel: the change list a step's checkpoint
(store/tree_update.py) and the files given back to their owner (sandbox/docker/ownership.py) work from,
so that a step costs what it changed, not what the workspace holds.

The workspace is a bind mount, so every write the agent makes in its container is a write on the host
kernel's file system, and inotify reports it to the host (tests/store/test_change_list.py proves it for
the real sandbox). One inotify instance watches every directory under the watched roots (symlinks never
followed); a directory made later is watched as soon as its creation is read, and then walked, so the
files made in it before its watch was added are reported too. A reader thread empties the kernel's
queue as events come; `take()` first reads whatever the kernel queued before it was called (an event is
queued before the write that made it returns), so a step's change list holds every change the step made.

Where the list can be incomplete, `take()` says so (`Changes.complete` is False), and its reader falls
back to a full scan for that step: before the watch has started (the first take of each subscriber,
whatever happened before the process), when the kernel's queue overflowed (IN_Q_OVERFLOW: events were
dropped; the watch is set up again from scratch), when a watch could not be added (fs.inotify's limits),
when a watched root went away, and where there is no inotify (not Linux). Each subscriber (the
checkpoints, the give-back) has its own list, taken at its own pace.

What inotify cannot see and the change list therefore misses: a write through a shared memory map by a
process that keeps the file open (it shows at the file's close), and the other names of a hard-linked
file (the checkpoints rescan on any file with more than one link).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import select
import struct
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

# Kinds of change, a bit each (a path's kinds are or-ed)
FILE = 1  # a file (or symlink, or special file) was made, written, removed, renamed or changed mode
TREE = 2  # a directory was made, removed or renamed: what is under it is new
META = 4  # a directory's mode or owner changed

IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE = 0x2, 0x4, 0x8
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x40, 0x80, 0x100, 0x200
IN_DELETE_SELF, IN_MOVE_SELF, IN_UNMOUNT, IN_Q_OVERFLOW, IN_IGNORED = 0x400, 0x800, 0x2000, 0x4000, 0x8000
IN_ONLYDIR, IN_DONT_FOLLOW, IN_EXCL_UNLINK, IN_ISDIR = 0x1000000, 0x2000000, 0x4000000, 0x40000000
MASK = (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
        | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK)
_HEADER = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then the name


@dataclass
class Changes:
    """What changed since the subscriber's last take: absolute path -> kinds. When `complete` is False the
    paths are only a hint, and the reader must look at everything (`why` says what was lost)."""

    complete: bool
    paths: dict[str, int] = field(default_factory=dict)
    why: str | None = None

    def under(self, root: Path) -> dict[str, int]:
        """The paths under `root`, relative to it (posix), with their kinds."""
        prefix = os.path.abspath(root).rstrip("/") + "/"
        return {path[len(prefix):]: kinds for path, kinds in self.paths.items() if path.startswith(prefix)}


class Subscription:
    """One reader's change list: what changed since its last `take()`."""

    def __init__(self, watch: ChangeWatch) -> None:
        self.watch = watch
        self.paths: dict[str, int] = {}
        self.lost: str | None = "nothing is known of what changed before the watch started"

    def take(self) -> Changes:
        return self.watch.take(self)


class ChangeWatch:
    """An inotify watch of some folders (the run's workspace and its `cairn/`), shared by subscribers."""

    def __init__(self, roots: list[Path]) -> None:
        self.roots = [os.path.abspath(root) for root in roots]
        self.lock = threading.RLock()
        self.subscribers: list[Subscription] = []
        self.fd: int | None = None
        self.dirs: dict[int, str] = {}  # watch descriptor -> the directory's absolute path
        self.broken: str | None = "not started"  # why the watch sees nothing now (None: it sees all)
        self.reopen = False  # after an overflow: watch everything again at the next take
        self.thread: threading.Thread | None = None
        self.closed = False

    def subscribe(self) -> Subscription:
        with self.lock:
            subscription = Subscription(self)
            self.subscribers.append(subscription)
            return subscription

    def start(self) -> str | None:
        """Watch every directory under the roots; None once watching, else why not (full scans then)."""
        with self.lock:
            self._open()
            if self.fd is not None and self.thread is None:
                self.thread = threading.Thread(target=self._read_forever, name="cairn-change-watch", daemon=True)
                self.thread.start()
            return self.broken

    def take(self, subscription: Subscription) -> Changes:
        with self.lock:
            if self.fd is not None:
                self._drain()
            if self.reopen and not self.closed:
                self.reopen = False
                self._open()  # after an overflow: watch everything again (this take is incomplete anyway)
            lost = subscription.lost or self.broken
            changes = Changes(lost is None, subscription.paths, lost)
            subscription.paths, subscription.lost = {}, None
            return changes

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self._close_fd("closed")

    # -- the inotify instance -----------------------------------------------------------------------

    def _open(self) -> None:
        libc = _libc()
        if libc is None:
            self.broken = "no inotify on this system"
            return
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            self.broken = f"inotify_init1: {os.strerror(ctypes.get_errno())}"
            return
        self.fd, self.dirs, self.broken = fd, {}, None
        for root in self.roots:
            self._watch_tree(root, report=False)
        if self.broken is not None:
            self._close_fd(self.broken)

    def _close_fd(self, why: str) -> None:
        self.broken = why
        for subscription in self.subscribers:
            subscription.lost = subscription.lost or why
        if self.fd is not None:
            os.close(self.fd)
            self.fd, self.dirs = None, {}

    def _watch_tree(self, top: str, report: bool) -> None:
        """Watch `top` and every directory under it; with `report`, everything found is reported as new
        (it may have been made before its directory's watch existed)."""
        pending = [top]
        while pending and self.broken is None:
            folder = pending.pop()
            wd = _libc().inotify_add_watch(self.fd, os.fsencode(folder), MASK)
            if wd < 0:
                error = ctypes.get_errno()
                if error in (errno.ENOENT, errno.ENOTDIR) and folder not in self.roots:
                    continue  # gone (or replaced) meanwhile: its parent's events say so
                self.broken = (f"cannot watch {folder}: {os.strerror(error)}"
                               + (" (fs.inotify.max_user_watches)" if error == errno.ENOSPC else ""))
                # A folder cairn may not read (the agent's, mode 700) is readable once given back: try again
                self.reopen = error == errno.EACCES
                return
            self.dirs[wd] = folder
            try:
                with os.scandir(folder) as entries:
                    for entry in entries:
                        is_dir = entry.is_dir(follow_symlinks=False)
                        if is_dir:
                            pending.append(entry.path)
                        if report:
                            self._note(entry.path, TREE if is_dir else FILE)
            except OSError:
                continue

    def _note(self, path: str, kinds: int) -> None:
        for subscription in self.subscribers:
            subscription.paths[path] = subscription.paths.get(path, 0) | kinds

    def _read_forever(self) -> None:
        poller = select.poll()
        fd = None
        while not self.closed:
            with self.lock:
                if self.fd != fd:
                    if fd is not None:
                        poller.unregister(fd)
                    fd = self.fd
                    if fd is not None:
                        poller.register(fd, select.POLLIN)
            if fd is None:
                threading.Event().wait(0.2)  # broken, or about to be watched again at the next take
                continue
            try:
                ready = poller.poll(200)
            except OSError:
                continue
            if ready:
                with self.lock:
                    if self.fd == fd:
                        self._drain()

    def _drain(self) -> None:
        """Read and apply every event the kernel has queued (called with the lock held)."""
        while self.fd is not None:
            try:
                data = os.read(self.fd, 256 * 1024)
            except BlockingIOError:
                return
            except OSError as exc:
                self._close_fd(f"reading inotify: {exc}")
                return
            if not data:
                return
            self._apply(data)

    def _apply(self, data: bytes) -> None:
        new_dirs: list[str] = []
        i = 0
        while i < len(data):
            wd, mask, _cookie, size = _HEADER.unpack_from(data, i)
            name = data[i + _HEADER.size:i + _HEADER.size + size].split(b"\0", 1)[0]
            i += _HEADER.size + size
            if mask & IN_Q_OVERFLOW:
                self._close_fd("the kernel's event queue overflowed (fs.inotify.max_queued_events)")
                self.reopen = True
                return
            folder = self.dirs.get(wd)
            if folder is None:
                continue
            if mask & (IN_IGNORED | IN_UNMOUNT | IN_DELETE_SELF | IN_MOVE_SELF):
                if folder in self.roots and mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_UNMOUNT | IN_IGNORED):
                    self._close_fd(f"{folder} was removed or moved")
                    return
                if mask & IN_IGNORED:
                    del self.dirs[wd]
                continue
            if not name:
                if mask & IN_ATTRIB:
                    self._note(folder, META)
                continue
            path = os.path.join(folder, os.fsdecode(name))
            if mask & IN_ISDIR:
                if mask & (IN_CREATE | IN_MOVED_TO):
                    new_dirs.append(path)
                if mask & (IN_MOVED_FROM | IN_DELETE):
                    self._unwatch_under(path)
                self._note(path, TREE if mask & (IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE) else META)
            else:
                self._note(path, FILE)
        for path in new_dirs:
            if self.fd is None:
                return
            self._watch_tree(path, report=True)
            if self.broken is not None:
                self._close_fd(self.broken)
                return

    def _unwatch_under(self, path: str) -> None:
        """A directory moved away (perhaps out of the roots) or removed: its watches name it no more."""
        prefix = path + "/"
        for wd, folder in list(self.dirs.items()):
            if folder == path or folder.startswith(prefix):
                del self.dirs[wd]
                _libc().inotify_rm_watch(self.fd, wd)


_LIBC: list[ctypes.CDLL | None] = []


def _libc() -> ctypes.CDLL | None:
    """The C library's inotify functions; None where there are none (not Linux)."""
    if not _LIBC:
        libc = None
        if sys.platform.startswith("linux"):
            try:
                libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
                libc.inotify_init1.argtypes = [ctypes.c_int]
                libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
                libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
            except (OSError, AttributeError):
                libc = None
        _LIBC.append(libc)
    return _LIBC[0]
