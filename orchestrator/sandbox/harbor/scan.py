"""The work directory as the Harbor sandbox follows it, read inside the task's container (standard-library
Python 3.9+, run by the toolbox's Python; uploaded beside the relay, never run by cairn on the host).

The run's workspace/ on the host is a copy of a small work directory, brought up to date before each
checkpoint. Downloading the whole folder each time costs seconds once it holds a virtualenv; this script
costs one `exec`: it lists what is there with sizes and change times, and carries the contents of only
what changed since the host last looked.

    scan.py list WORKDIR SINCE_NS MAX_BYTES MAX_FILES [--keep-dependencies]
    scan.py pack WORKDIR MAX_BYTES NAMES         (NAMES: base64 of a JSON list; or --file PATH)

`list` prints one JSON line: {"clock": <ns when the walk began>, "over": false, "files": N, "bytes": B,
"entries": [[path, kind, size, ctime_ns, mode, payload], ...], "pruned": [path, ...]}. `kind` is "f" (a
regular file: `payload` is its content in base64 when its ctime is SINCE_NS or later, else null), "l" (a
symbolic link, never followed: `payload` is its target) or "d" (a folder). FIFOs, sockets and devices are
left out, and so are other file systems mounted inside. The folders named in NOT_FOLLOWED, and those
tagged as caches (CACHEDIR.TAG), are not walked: `pruned` lists them, and nothing in them counts. Past
MAX_FILES files and links or MAX_BYTES bytes the walk stops: {"over": true, "files", "bytes"} (at least).

`pack` prints {"entries": [...], "over": false} for the named paths (their contents, whatever their
ctime); a path gone in between is left out, and past MAX_BYTES it stops: {"over": true}.

Why ctime: the kernel sets it on every write, chmod, rename and link, and nothing can set it back
(`touch -d`, `cp -p`, `tar x` and `mv` keep an old mtime). It is read in nanoseconds, but the kernel
stamps files from a clock that moves in ticks (up to 10 ms), so the host asks again for whatever changed
in the last tick before the previous walk.

Names travel as JSON with `ensure_ascii`: a name that is not UTF-8 goes as surrogate escapes, which the
host's `os.fsencode` turns back into the same bytes.
"""

import base64
import json
import os
import stat
import sys
import time

# What the Harbor sandbox never brings back to the host, nor copies into a trial's logs unless asked:
# installed dependencies, and caches and build outputs that tools rebuild, by names no project uses for
# anything else (those cairn's checkpoints skip, and a few more), and git's own store, which checkpoints
# never hold. Folders holding a CACHEDIR.TAG (the Cache Directory Tagging convention: cargo's target/,
# and the caches of pytest, mypy, ruff) are left out too.
NOT_FOLLOWED = (".venv", "venv", "node_modules", "__pycache__", ".cache", ".pytest_cache", ".mypy_cache",
                ".ruff_cache", ".tox", ".nox", ".gradle", ".next", ".parcel-cache", ".turbo", ".git")
CACHE_TAG = "CACHEDIR.TAG"
CACHE_SIGNATURE = b"Signature: 8a477f597d28d172789f06886806bc55"


def not_followed(folder: str, names: list) -> list:
    """The names in `folder` that are folders left out (as `shutil.copytree`'s `ignore` takes it)."""
    left = []
    for name in names:
        path = os.path.join(folder, name)
        if os.path.isdir(path) and not os.path.islink(path) and (name in NOT_FOLLOWED or _tagged(path)):
            left.append(name)
    return left


def _tagged(folder: str) -> bool:
    tag = _content(os.path.join(folder, CACHE_TAG), 4096)
    return bool(tag) and tag.startswith(CACHE_SIGNATURE)


def _content(path: str, limit: int):
    """The file's bytes, None when it cannot be read (gone, unreadable, not a regular file: never a link
    followed, never a FIFO waited on), or False past `limit` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            size += len(chunk)
        return False
    except OSError:
        return None
    finally:
        os.close(fd)


def _entry(root: str, rel: str, st: os.stat_result, payload):
    if stat.S_ISLNK(st.st_mode):
        try:
            return [rel, "l", st.st_size, st.st_ctime_ns, 0o777, os.readlink(os.path.join(root, rel))]
        except OSError:
            return None
    kind = "d" if stat.S_ISDIR(st.st_mode) else "f"
    return [rel, kind, st.st_size if kind == "f" else 0, st.st_ctime_ns, stat.S_IMODE(st.st_mode), payload]


def listing(root: str, since: int, max_bytes: int, max_files: int, keep_dependencies: bool) -> dict:
    clock = time.time_ns()
    device = os.stat(root).st_dev
    entries, pruned, wanted = [], [], []
    files = size = 0
    folders = [""]
    while folders:
        rel_folder = folders.pop()
        try:
            children = list(os.scandir(os.path.join(root, rel_folder)))
        except OSError:
            continue  # gone or unreadable since its parent was read
        for child in children:
            rel = os.path.join(rel_folder, child.name)
            try:
                st = child.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                if st.st_dev != device:
                    continue
                if not keep_dependencies and (child.name in NOT_FOLLOWED or _tagged(child.path)):
                    pruned.append(rel)
                    continue
                folders.append(rel)
            elif stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
                files += 1
                size += st.st_size if stat.S_ISREG(st.st_mode) else 0
                if files > max_files or size > max_bytes:
                    return {"over": True, "files": files, "bytes": size}
            else:
                continue  # a FIFO, a socket, a device
            entry = _entry(root, rel, st, None)
            if entry is not None:
                entries.append(entry)
                if entry[1] == "f" and st.st_ctime_ns >= since:
                    wanted.append(entry)
    carried = 0
    for entry in wanted:  # after the walk: a folder over the limit costs no reading
        data = _content(os.path.join(root, entry[0]), max_bytes - carried)
        if data is False:  # it grew since the walk
            return {"over": True, "files": files, "bytes": max_bytes + 1}
        if data is not None:
            carried += len(data)
            entry[5] = base64.b64encode(data).decode()
    return {"clock": clock, "over": False, "files": files, "bytes": size, "entries": entries, "pruned": pruned}


def pack(root: str, names: list, max_bytes: int) -> dict:
    entries, size = [], 0
    for rel in names:
        path = os.path.join(root, rel)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        payload = None
        if stat.S_ISREG(st.st_mode):
            payload = _content(path, max_bytes - size)
            if payload is False:
                return {"over": True}
            if payload is None:
                continue
            size += len(payload)
            payload = base64.b64encode(payload).decode()
        elif not (stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode)):
            continue
        entry = _entry(root, rel, st, payload)
        if entry is not None:
            entries.append(entry)
    return {"over": False, "entries": entries}


def main(args: list) -> int:
    try:
        if len(args) in (5, 6) and args[0] == "list" and args[5:] in ([], ["--keep-dependencies"]):
            answer = listing(args[1], int(args[2]), int(args[3]), int(args[4]), keep_dependencies=len(args) == 6)
        elif len(args) in (4, 5) and args[0] == "pack":
            if args[3] == "--file":
                with open(args[4], "rb") as file:
                    raw = file.read()
                os.unlink(args[4])
            else:
                raw = base64.b64decode(args[3])
            answer = pack(args[1], json.loads(raw.decode("utf-8", "surrogateescape")), int(args[2]))
        else:
            sys.stderr.write(__doc__)
            return 2
    except (OSError, ValueError) as exc:
        answer = {"error": str(exc)}
    sys.stdout.write(json.dumps(answer) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
