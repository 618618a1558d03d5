"""A run's files for the page: the list of its workspace, and one file read without ever leaving the run.

The agent owns the workspace: any name in it may be a symbolic link to anywhere on this machine, and it
may change one while the page reads. So both go through store/run_files.py, the host's one way into a
run's folders: a file is opened one path component at a time, each relative to the folder opened before
it and with O_NOFOLLOW; a component that is a link is followed only when its target, taken as a path
inside the same root, stays in it (a link to an absolute path or out through `..` is refused), and what
is opened last must be a regular file. The list is made by descriptor, so a folder swapped for a link
while it is listed is not entered. The roots are the run's workspace and its own cairn folder (`/cairn`
in the sandbox: saved outputs, the critic's notes).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from orchestrator.store import run_files
from orchestrator.store.run_dir import RunDir
from orchestrator.store.run_files import Refused

NOISE = {".git", "node_modules", ".venv", "__pycache__", ".pytest_cache", ".mypy_cache"}
MAX_LIST = 5000  # entries listed at most; a tree of generated files is not a file browser's job
MAX_READ = 2 * 1024 * 1024  # bytes of one file shown at most
IMAGES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
          ".webp": "image/webp", ".bmp": "image/bmp", ".ico": "image/x-icon"}  # never SVG: it can hold a script

__all__ = ["Refused", "root_of", "read_file", "read_image", "list_files"]


def root_of(run: RunDir, name: str) -> Path:
    if name == "workspace":
        return run.workspace
    if name == "cairn":
        return run.cairn_dir
    raise Refused(f"no such root {name[:40]!r}: workspace or cairn")


def read_file(root: Path, rel: str) -> dict[str, Any]:
    """What the page shows of one file: its text (up to MAX_READ bytes), or that it is binary or an image."""
    fd = run_files.open_file(root, rel, links="inside")
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
    return run_files.read_bytes(root, rel, 16 * MAX_READ, links="inside"), image


def list_files(root: Path) -> dict[str, Any]:
    """The files under `root`, sorted, without following links (a link is listed as one), without the
    folders of generated files (NOISE); at most MAX_LIST."""
    rows: list[dict[str, Any]] = []
    cut = False
    for entry in run_files.walk(root, enter=lambda e: e.name not in NOISE, sort=True):
        if entry.is_dir():
            continue
        if len(rows) >= MAX_LIST:
            cut = True
            break
        rows.append({"path": entry.rel, "size": entry.stat.st_size, "link": entry.is_link()})
    rows.sort(key=lambda r: r["path"])
    return {"files": rows, "cut": cut}
