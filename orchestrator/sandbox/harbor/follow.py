"""The run's workspace/ as a copy of the task's work directory under Harbor (HarborSandbox.follow_workspace).

Each listing that scan.py makes in the container is compared with the one before: what went is deleted
here, what is new or changed is written, from the contents that came with the listing, or, for the few
the listing could not carry (a change its clock could not vouch for), fetched with `pack`. Every name
comes from the container, which the agent controls, so nothing is written outside workspace/: a name
that is absolute, holds `..`, or passes through a symbolic link or a file here is refused.
"""

from __future__ import annotations

import base64
import binascii
import os
import shutil
import stat
from pathlib import Path
from typing import Any

TICK_NS = 20_000_000  # what changed in the last 20 ms before a walk is asked for again (the kernel's
# file times move in ticks of up to 10 ms, behind the clock the walk read)
Key = tuple[str, int, int, int]  # kind, size, ctime in ns, mode: what says a path changed


class WorkspaceCopy:
    """`root` (the run's workspace/) kept equal to the work directory's followed part, listing by listing."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.listing: dict[str, Key] = {}
        self.since = 0  # the ctime from which the next listing carries contents

    def update(self, scanned: dict[str, Any]) -> list[str]:
        """Apply one `list` answer; return the changed files whose contents it did not carry."""
        if not self.listing:  # the first: whatever the folder held is not the work directory's
            for entry in list(self.root.iterdir()):
                _remove(entry)
        entries = {entry[0]: entry for entry in _valid(scanned.get("entries"))}
        for path in sorted(set(self.listing) - set(entries), reverse=True):  # children before their folder
            _remove(self.root / path)
        listing: dict[str, Key] = {}
        missing = []
        for path in sorted(entries):  # a folder before what it holds
            _, kind, size, ctime, mode, payload = entries[path]
            key, old = (kind, size, ctime, mode), self.listing.get(path)
            if old is not None and old[0] != kind:
                _remove(self.root / path)
                old = None
            if kind == "f" and payload is None and old != key:
                missing.append(path)  # not listed until it is here: asked for again if the fetch fails
                continue
            if old != key or (kind == "f" and payload is not None):
                self._write(path, kind, mode, payload)
            listing[path] = key
        self.listing = listing
        self.since = int(scanned["clock"]) - TICK_NS
        return missing

    def fill(self, packed: dict[str, Any]) -> None:
        """Write the files a `pack` answer carried."""
        for path, kind, size, ctime, mode, payload in _valid(packed.get("entries")):
            if self._write(path, kind, mode, payload):
                self.listing[path] = (kind, size, ctime, mode)

    def _write(self, path: str, kind: str, mode: int, payload: str | None) -> bool:
        target = self._place(path)
        if target is None:
            return False
        try:
            if kind == "d":
                if not (target.is_dir() and not target.is_symlink()):
                    _remove(target)
                    target.mkdir()
                return True
            if target.is_dir() and not target.is_symlink():
                _remove(target)
            if kind == "l":
                target.unlink(missing_ok=True)
                os.symlink(payload or "", target)
                return True
            data = base64.b64decode(payload or "", validate=True)
            target.unlink(missing_ok=True)  # a link here is replaced, never written through
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as file:
                file.write(data)
                os.fchmod(file.fileno(), 0o755 if mode & 0o111 else 0o644)  # all git keeps of a mode
            return True
        except (OSError, binascii.Error):
            return False

    def _place(self, path: str) -> Path | None:
        """Where `path` goes under root, its folders made; None when that would leave root."""
        parts = path.split("/")
        if path.startswith("/") or "\0" in path or any(part in ("", ".", "..") for part in parts):
            return None
        folder = self.root
        for part in parts[:-1]:
            folder = folder / part
            try:
                info = folder.lstat()
            except FileNotFoundError:
                folder.mkdir()
                continue
            if not stat.S_ISDIR(info.st_mode):  # a link or a file where a folder should be
                return None
        return folder / parts[-1]


def _valid(entries: object) -> list[tuple[str, str, int, int, int, str | None]]:
    """The entries of an answer that have the shape scan.py gives them; anything else is dropped."""
    good = []
    for entry in entries if isinstance(entries, list) else []:
        if not (isinstance(entry, list) and len(entry) == 6):
            continue
        path, kind, size, ctime, mode, payload = entry
        if (isinstance(path, str) and kind in ("f", "l", "d") and all(type(n) is int for n in (size, ctime, mode))
                and (payload is None or isinstance(payload, str))):
            good.append((path, kind, size, ctime, mode, payload))
    return good


def _remove(path: Path) -> None:
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    except FileNotFoundError:
        pass
