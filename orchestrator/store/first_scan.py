"""The first scan of a workspace: the tree of its checkpoints' first commit, written by one `git fast-import`.

    python -m orchestrator.store.first_scan GIT_DIR WORKSPACE    # prints {"tree": ID, "skipped": {...}}

Every file is read once and written into one pack, not a loose file each: 100,000 loose objects cost
far more to write, and then to pack, than the files cost to hash. What is kept is what a full scan keeps
(the same listing, `Checkpoints._listing`, over an empty index: every file is new). It runs in a
process of its own (store/checkpoints.py `_first_tree`): reading every file of a big workspace is seconds
of Python, which would take the interpreter from the run's start (the model library's import).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

from orchestrator.store.checkpoints import Checkpoints
from orchestrator.store.git_safety import IDENTITY, make_git

FIRST_SCAN = "refs/cairn/first-scan-"  # + this process's id: where `git fast-import` leaves its commit, for an instant


def first_tree(cp: Checkpoints) -> tuple[str, dict[str, str]]:
    """The tree of the workspace now, written into one pack, and what is skipped (path -> why)."""
    empty = cp.git_dir / "index.first-scan"  # no such file: an empty index, so every file is new
    empty.unlink(missing_ok=True)
    lister = make_git(cp.git_dir, cp.workspace)
    lister.update_environment(GIT_INDEX_FILE=str(empty))
    paths, _drop, skipped = cp._listing(lister)
    # A ref of this process's own: one a killed scan left behind (or one still going, whose cairn was
    # killed) is never this scan's; --force: one a dead process of the same id left is moved all the same
    ref, cairn = f"{FIRST_SCAN}{os.getpid()}", os.getppid()
    importer = cp.git.execute(["git", "fast-import", "--quiet", "--done", "--force", "--date-format=raw"],
                              as_process=True, istream=subprocess.PIPE)
    out = importer.proc.stdin
    who = f"{IDENTITY['name']} <{IDENTITY['email']}> {int(time.time())} +0000"
    out.write(f"commit {ref}\nauthor {who}\ncommitter {who}\ndata 0\n".encode())
    for n, path in enumerate(sorted(paths)):
        if n % 1024 == 0 and os.getppid() != cairn:
            sys.exit("the cairn process that started this scan is gone")  # no `done`: fast-import writes nothing
        entry = _file_entry(cp.workspace / path)
        if entry is not None:
            mode, data = entry
            out.write(b"M %s inline %s\ndata %d\n" % (mode, _fast_import_path(path), len(data)) + data + b"\n")
    out.write(b"done\n")
    out.close()
    importer.wait()  # raises git's error
    tree = cp.git.rev_parse(f"{ref}^{{tree}}")
    cp.git.update_ref("-d", ref)
    return tree, skipped


def _file_entry(path: Path) -> tuple[bytes, bytes] | None:
    """A file's mode and content as git keeps them (a symlink's content is its target); None when it is
    gone, or is no longer a file or a symlink."""
    try:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            return b"120000", os.fsencode(os.readlink(path))
        if not stat.S_ISREG(st.st_mode):
            return None
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    return (b"100755" if st.st_mode & stat.S_IXUSR else b"100644"), data


def _fast_import_path(path: str) -> bytes:
    """A path as `git fast-import` reads it: C-quoted when it holds a newline or starts with a quote."""
    raw = path.encode("utf-8", "surrogateescape")
    if b"\n" not in raw and not raw.startswith(b'"'):
        return raw
    return b'"' + raw.replace(b"\\", b"\\\\").replace(b'"', b'\\"').replace(b"\n", b"\\n") + b'"'


def main(argv: list[str]) -> None:
    git_dir, workspace = Path(argv[0]), Path(argv[1])
    tree, skipped = first_tree(Checkpoints(git_dir, workspace))
    print(json.dumps({"tree": tree, "skipped": skipped}))


if __name__ == "__main__":
    main(sys.argv[1:])
