"""A run's folders put into its archive (`cairn export`) the way the host reads anything the sandbox wrote:
listed and opened by descriptor (store/run_files.py), never by a path the kernel resolves on its own.

A run that stopped may still have a container running (a crashed session's), whose agent can swap a
folder for a link to `/` or a file for a FIFO while the export reads: tarfile's own `add` would then
list the host's folders and read its files into the archive, or wait on the FIFO for good.
"""

from __future__ import annotations

import os
import stat
import tarfile
from pathlib import Path
from typing import Callable

from orchestrator.store import run_files
from orchestrator.store.sparse import add_sparse, is_sparse

_TYPES = {stat.S_IFREG: tarfile.REGTYPE, stat.S_IFDIR: tarfile.DIRTYPE, stat.S_IFLNK: tarfile.SYMTYPE,
          stat.S_IFIFO: tarfile.FIFOTYPE, stat.S_IFCHR: tarfile.CHRTYPE, stat.S_IFBLK: tarfile.BLKTYPE}
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

Keep = Callable[[tarfile.TarInfo], "tarfile.TarInfo | None"]


def add_tree(tar: tarfile.TarFile, base: Path, arc_base: str, keep: Keep, notes: list[str]) -> None:
    """`base` (a folder of cairn's or the person's) as `arc_base`, and everything under it that `keep`
    keeps (it may change a member or return None to leave it out). `notes`: one line for each file
    written sparse, or that changed while it was read."""
    top = keep(tar.gettarinfo(base, arcname=arc_base))
    if top is not None:
        tar.addfile(top)
    for entry in run_files.walk(base, sort=True):
        kind = _TYPES.get(stat.S_IFMT(entry.stat.st_mode))
        info = tarfile.TarInfo(f"{arc_base}/{entry.rel}")
        info.type = kind if kind is not None else tarfile.REGTYPE
        info.mode, info.mtime = stat.S_IMODE(entry.stat.st_mode), int(entry.stat.st_mtime)
        if kind is None:  # a socket: keep() leaves out what is not a file, a folder or a link
            info.type = tarfile.FIFOTYPE
        elif kind == tarfile.SYMTYPE:
            info.linkname = os.readlink(entry.name, dir_fd=entry.dir_fd)
        elif kind == tarfile.REGTYPE:
            info.size = entry.stat.st_size
        kept = keep(info)
        if kept is None:
            continue
        if not kept.isreg():
            tar.addfile(kept)
            continue
        _add_file(tar, entry, kept, notes)


def _add_file(tar: tarfile.TarFile, entry: run_files.Entry, info: tarfile.TarInfo, notes: list[str]) -> None:
    rel = info.name.split("/", 1)[1]
    try:
        fd = os.open(entry.name, _READ, dir_fd=entry.dir_fd)
    except OSError:
        notes.append(f"left out: {rel} (it changed while it was read)")
        return
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (entry.stat.st_dev, entry.stat.st_ino):
            notes.append(f"left out: {rel} (it changed while it was read)")
            return
        if is_sparse(st):
            notes.append(add_sparse(tar, f, st, info.name))
            return
        info.size = st.st_size
        tar.addfile(info, f)
