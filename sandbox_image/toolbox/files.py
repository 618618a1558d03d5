"""The file ops: read, write, edit and list, on paths the workspace resolves."""

from __future__ import annotations

import os

from .errors import ToolError
from .workspace import Workspace, atomic_write, open_regular

LIST_MAX_ENTRIES = 2000
LIST_SKIP = {".git", "node_modules", "__pycache__", ".venv", "venv", ".mypy_cache", ".pytest_cache"}


def read(ws: Workspace, path: str, offset: int | None, limit: int | None, max_bytes: int) -> dict:
    """Lines of a regular text file, from line `offset` (1 by default), at most `limit` lines and `max_bytes`."""
    real = ws.resolve(path)
    start = 1 if offset is None else offset
    if not isinstance(start, int) or start < 1:
        raise ToolError(f"offset must be a line number from 1, not {offset!r}")
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        raise ToolError(f"limit must be a positive number of lines, not {limit!r}")
    chunks, size, end, total, cut = [], 0, start - 1, 0, False
    with open_regular(real, path) as f:
        if b"\0" in f.read(8192):
            raise ToolError(f"{path}: binary file ({os.fstat(f.fileno()).st_size} bytes); inspect it with shell tools")
        f.seek(0)
        for total, line in enumerate(f, 1):
            if total < start or cut:
                continue
            if (limit is not None and total >= start + limit) or size + len(line) > max_bytes:
                if not chunks:  # one line longer than max_bytes: give its beginning
                    chunks.append(line[:max_bytes])
                    end = total
                cut = True
                continue
            chunks.append(line)
            size += len(line)
            end = total
    if start > 1 and start > total:
        raise ToolError(f"{path}: offset {start} is past the end of the file ({total} lines)")
    content = b"".join(chunks).decode("utf-8", "replace")
    return {"path": ws.rel(real), "content": content, "start_line": start, "end_line": end,
            "total_lines": total, "truncated": cut}


def write(ws: Workspace, path: str, content: str) -> dict:
    """The file holds `content` now (written whole or not at all)."""
    if not isinstance(content, str):
        raise ToolError("content must be a string")
    real = ws.resolve(path)
    if os.path.isdir(real):
        raise ToolError(f"{path}: is a directory")
    created = not os.path.exists(real)
    data = content.encode("utf-8", "surrogateescape")
    atomic_write(real, data)
    return {"path": ws.rel(real), "bytes": len(data), "created": created}


def edit(ws: Workspace, path: str, old: str, new: str) -> dict:
    """`old`, which must occur exactly once, replaced by `new`."""
    if not isinstance(old, str) or not isinstance(new, str):
        raise ToolError("old and new must be strings")
    if not old:
        raise ToolError("old is empty: give the exact text to replace")
    real = ws.resolve(path)
    with open_regular(real, path) as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolError(f"{path}: not UTF-8 text; edit it with shell tools") from None
    count = text.count(old)
    if count == 0:
        raise ToolError(f"{path}: old text not found (it must match exactly, whitespace and indentation included)")
    if count > 1:
        raise ToolError(f"{path}: old text occurs {count} times; include more surrounding lines to make it unique")
    data = text.replace(old, new, 1).encode("utf-8")
    atomic_write(real, data)
    return {"path": ws.rel(real), "bytes": len(data)}


def listing(ws: Workspace, path: str, depth: int) -> dict:
    """The entries under a directory, `depth` levels down, skipping the usual heavy folders (LIST_SKIP)."""
    real = ws.resolve(path)
    if not os.path.isdir(real):
        raise ToolError(f"{path}: not a directory")
    entries: list = []

    def walk(directory: str, level: int) -> None:
        try:
            found = sorted(os.scandir(directory), key=lambda e: e.name)
        except PermissionError:
            return
        for entry in found:
            if len(entries) >= LIST_MAX_ENTRIES:
                return
            kind = ("link" if entry.is_symlink() else "dir" if entry.is_dir() else
                    "file" if entry.is_file() else "other")
            size = entry.stat(follow_symlinks=False).st_size if kind == "file" else None
            entries.append({"path": ws.rel(entry.path), "type": kind, "size": size})
            if kind == "dir" and level < depth and entry.name not in LIST_SKIP:
                walk(entry.path, level + 1)

    walk(real, 1)
    return {"entries": entries, "truncated": len(entries) >= LIST_MAX_ENTRIES}
