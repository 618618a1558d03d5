"""Where things are: the work directory as the model names it and as it really is, and the safe ways the
toolbox reads and writes a file there (never through a FIFO or a device, never half written)."""

from __future__ import annotations

import os
import stat
import tempfile

from .errors import ToolError

WORKDIR = "/workspace"  # the default work directory
CAIRN_DIR = "/cairn"  # cairn's own files (saved outputs, fetched pages), outside any project tree
UMASK = os.umask(0o022)
os.umask(UMASK)


class Workspace:
    """Path resolution: a relative path is relative to the work directory, an absolute one is taken as it is.

    `name` is the work directory as the model knows it (/workspace, /app); `root` is where it really is,
    the same path inside a container, another directory on the host in tests (`--root`), so a path
    under `name` is read under `root`. With `lockdown` every path must resolve, inside the container, to
    the work directory or cairn's directory (its saved outputs) or below them.
    """

    def __init__(self, root: str, name: str = WORKDIR, cairn: str = CAIRN_DIR, lockdown: bool = False) -> None:
        self.root = os.path.realpath(root)
        self.name = name.rstrip("/") or "/"
        self.cairn = os.path.realpath(cairn)
        self.lockdown = lockdown

    def resolve(self, path: object) -> str:
        if not isinstance(path, str) or not path.strip():
            raise ToolError("path must be a non-empty string")
        if "\0" in path:
            raise ToolError(f"{path!r}: a path cannot contain a NUL byte")
        if path == self.name or path.startswith(self.name + "/"):
            joined = os.path.join(self.root, path[len(self.name):].lstrip("/"))
        else:  # an absolute path stays what it is; join() keeps it
            joined = os.path.join(self.root, path)
        # realpath follows symlinks here, inside the container, so a link cannot lead the check astray.
        real = os.path.realpath(joined)
        if self.lockdown and not (under(real, self.root) or under(real, self.cairn)):
            raise ToolError(f"{path}: outside {self.name} (it resolves to {real}); under --lockdown use paths "
                            f"inside {self.name} (and {CAIRN_DIR}, cairn's saved outputs)")
        return real

    def rel(self, real: str) -> str:
        """A path as results give it: relative to the work directory when under it, else absolute."""
        return os.path.relpath(real, self.root) if under(real, self.root) else real


def under(path: str, directory: str) -> bool:
    """Whether `path` is `directory` or below it (both real paths)."""
    return path == directory or path.startswith(directory.rstrip("/") + "/")



def atomic_write(real: str, data: bytes) -> None:
    """Write through a temporary file in the same directory and rename it: readers see old or new, never half."""
    parent, name = os.path.split(real)
    os.makedirs(parent, exist_ok=True)
    mode = os.stat(real).st_mode & 0o7777 if os.path.exists(real) else 0o666 & ~UMASK
    fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            os.fchmod(f.fileno(), mode)
        os.replace(tmp, real)
    except BaseException:
        os.unlink(tmp)
        raise


_NOT_READABLE = ((stat.S_ISDIR, "is a directory; list it instead"),
                 (stat.S_ISFIFO, "is a FIFO (named pipe), not a regular file; only regular files are read"),
                 (stat.S_ISSOCK, "is a socket, not a regular file; only regular files are read"),
                 (stat.S_ISCHR, "is a character device, not a regular file; only regular files are read"),
                 (stat.S_ISBLK, "is a block device, not a regular file; only regular files are read"))


def open_regular(real: str, path: str):
    """The file at `real`, open for reading, if it is a regular file; else a ToolError naming what it is.
    O_NONBLOCK makes the open of a FIFO return at once instead of waiting for a writer (which would
    hang the toolbox), and the check is on the open descriptor, so the path cannot change in between."""
    fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        why = next((text for test, text in _NOT_READABLE if test(mode)), "is not a regular file")
        raise ToolError(f"{path}: {why}")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")
