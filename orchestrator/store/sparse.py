"""Sparse files in a run's archive: a disk image or a database file of gigabytes that holds little data
goes into the tar as a GNU sparse member (format 1.0, what `tar --sparse --format=pax` writes), its
holes left out, so that `cairn export` neither reads nor writes gigabytes of zeros."""

from __future__ import annotations

import io
import os
import posixpath
import stat
import tarfile

from orchestrator.sizes import format_size

SPARSE_MIN = 1 << 20  # smaller files are written whole, holes and all


def is_sparse(st: os.stat_result) -> bool:
    """A file (as its stat says) of 1 MiB or more that holds less than half its size on disk."""
    return st.st_size >= SPARSE_MIN and st.st_blocks * 512 < st.st_size // 2


def _data_regions(f: io.BufferedReader, size: int) -> list[tuple[int, int]]:
    """(offset, length) of the parts of a file that hold data, from the file system (SEEK_DATA/HOLE)."""
    fd, regions, offset = f.fileno(), [], 0
    while offset < size:
        try:
            start = os.lseek(fd, offset, os.SEEK_DATA)
        except OSError:  # ENXIO: no data after offset
            break
        end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
        regions.append((start, end - start))
        offset = end
    return regions


class _Concat(io.RawIOBase):
    """The data of a sparse member: its map, then each data region of the file, read as one stream."""

    def __init__(self, head: bytes, f: io.BufferedReader, regions: list[tuple[int, int]]) -> None:
        self.parts: list[tuple[str, int, int]] = [("head", 0, len(head))] + [("file", o, n) for o, n in regions]
        self.head, self.f = head, f

    def readable(self) -> bool:
        return True

    def read(self, n: int | None = -1) -> bytes:
        """`n` bytes (all that is left with -1), across the parts: tarfile takes a short read for the end."""
        out = bytearray()
        while self.parts and (n is None or n < 0 or len(out) < n):
            kind, offset, left = self.parts[0]
            take = left if n is None or n < 0 else min(n - len(out), left)
            if kind == "head":
                data = self.head[offset:offset + take]
            else:
                self.f.seek(offset)
                data = self.f.read(take)
                if len(data) < take:  # the file shrank while being read: pad, the header's size is written
                    data += b"\0" * (take - len(data))
            out += data
            self.parts[0] = (kind, offset + take, left - take)
            if left == take:
                self.parts.pop(0)
        return bytes(out)


def add_sparse(tar: tarfile.TarFile, f: io.BufferedReader, st: os.stat_result, name: str) -> str:
    """The open file `f` (its stat `st`) as a GNU sparse member, format 1.0 (what `tar --sparse
    --format=pax` writes): a map of the data regions, then their bytes; the holes are not in the archive.
    Returns the note for the user."""
    regions = _data_regions(f, st.st_size)
    map_text = f"{len(regions)}\n" + "".join(f"{o}\n{n}\n" for o, n in regions)
    head = map_text.encode() + b"\0" * (-len(map_text) % tarfile.BLOCKSIZE)
    info = tarfile.TarInfo(f"{posixpath.dirname(name)}/GNUSparseFile.0/{posixpath.basename(name)}")
    info.size = len(head) + sum(n for _o, n in regions)
    info.mode, info.mtime = stat.S_IMODE(st.st_mode), int(st.st_mtime)
    # "path" first: a reader applies these in order, and GNU.sparse.name must win.
    info.pax_headers = {"path": info.name, "GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.name": name,
                        "GNU.sparse.realsize": str(st.st_size)}
    tar.addfile(info, _Concat(head, f, regions))
    held = sum(n for _o, n in regions)
    return f"written sparse: {name.split('/', 1)[1]} ({format_size(st.st_size)}, of which {format_size(held)} data)"
