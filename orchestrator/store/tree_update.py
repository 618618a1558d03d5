"""A step's checkpoint from its change list: the last tree with only the changed paths brought up to the
workspace, so that a step costs what it changed, whatever the workspace holds.

The full scan (store/checkpoints.py, `Checkpoints.stage`) asks git which files differ from the index:
that reads the whole index and lstat's every file, about 6 µs a file a step. With the change list
(store/change_list.py) this module reads only the changed paths from the disk, hashes what changed into
blobs and rewrites only the trees on the way from the root to them; the other trees are the last
tree's, by id. No git process runs: objects are read through gitpython's persistent `git cat-file`
(and kept once read) and written as loose objects in process, as git writes them.

It decides what is kept exactly as the full scan does, path by path (tests/store/test_tree_update.py
compares the two on the same changes): never a `.git` (any case); a folder named as in SKIPPED_DIRS is
a generated tree; a folder that is not in the last tree and holds a git repository (git's own test,
`is_nonbare_repository_dir`) is skipped whole; files over 10 MiB and special files are skipped; a
symlink is kept as its target; a file's mode is 100755 when its owner may execute it. A changed file
with more than one link (its other names changed too, unseen) makes the step a full scan:
`NeedsFullScan`.
"""

from __future__ import annotations

import hashlib
import os
import stat
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import git

from orchestrator.store.change_list import FILE, TREE

TREE_MODE, LINK_MODE, EXEC_MODE, FILE_MODE = b"40000", b"120000", b"100755", b"100644"
GIT_HINT = 8  # something changed in a folder's `.git`: whether the folder is a repository may have
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
SPECIAL = ", not a file"  # the end of the reason a special file is skipped for (store/checkpoints.py's too)


class NeedsFullScan(Exception):
    """The change list cannot say what this step changed (a hard-linked file): scan everything."""


@dataclass
class _Node:
    kinds: int = 0
    children: dict[str, _Node] = field(default_factory=dict)


Entries = dict[bytes, tuple[bytes, str]]  # name -> (mode, object id)


class TreeUpdate:
    """Applies change lists to trees of the workspace, with the object database of `git_dir`."""

    def __init__(self, git_dir: Path, workspace: Path, g: git.Git, skipped_dirs: tuple[str, ...],
                 max_bytes: int) -> None:
        self.objects, self.workspace, self.git = git_dir / "objects", workspace, g
        self.skipped_dirs, self.max_bytes = frozenset(skipped_dirs), max_bytes
        self.trees: dict[str, Entries] = {}  # trees read or written, by id (the last few steps' paths)
        self.skipped: dict[str, str] = {}

    def update(self, tree: str, changes: dict[str, int], skipped: dict[str, str]) -> tuple[str, dict[str, str]]:
        """`tree` with the `changes` (path relative to the workspace -> change_list kinds) brought up to the
        workspace; and what is skipped now (path -> why), from what was skipped before."""
        if len(self.trees) > 20_000:
            self.trees.clear()
        # A special file is named only in the step that made it out of a tracked file, as in a full scan
        # (git lists no FIFO, socket or device as untracked: the scan sees one only where a file was).
        self.skipped = {path: why for path, why in skipped.items() if not why.endswith(SPECIAL)}
        root = _Node()
        for rel, kinds in changes.items():
            parts = [p for p in rel.split("/") if p]
            dot_git = next((i for i, part in enumerate(parts) if part.lower() == ".git"), None)
            if dot_git is not None:
                if dot_git == 0:
                    continue  # the workspace's own repository: never part of a checkpoint
                parts, kinds = parts[:dot_git], GIT_HINT
            node = root
            for part in parts:
                node = node.children.setdefault(part, _Node())
            node.kinds |= kinds
        entries = self._folder("", self._read(tree), root)
        return self._write_tree(entries), self.skipped

    # -- one folder ------------------------------------------------------------------------------

    def _folder(self, rel: str, old: Entries, node: _Node) -> Entries:
        """The entries of the folder `rel` (`old`: as in the last tree) with `node`'s changes applied."""
        if node.kinds & TREE:
            return self._rescan(rel, old)
        new = dict(old)
        for name, child in node.children.items():
            key = os.fsencode(name)
            entry = self._path(f"{rel}/{name}" if rel else name, old.get(key), child)
            if entry is None:
                new.pop(key, None)
            else:
                new[key] = entry
        return new

    def _rescan(self, rel: str, old: Entries) -> Entries:
        """The folder `rel` as it is on the disk, every path under it read again."""
        self._forget_under(rel)
        new: Entries = {}
        try:
            with os.scandir(self.workspace / rel if rel else self.workspace) as found:
                names = [entry.name for entry in found]
        except (FileNotFoundError, NotADirectoryError):
            return new
        for name in names:
            if name.lower() == ".git":
                continue
            key = os.fsencode(name)
            entry = self._path(f"{rel}/{name}" if rel else name, old.get(key), _Node(TREE | FILE))
            if entry is not None:
                new[key] = entry
        return new

    def _path(self, rel: str, old: tuple[bytes, str] | None, node: _Node) -> tuple[bytes, str] | None:
        """The tree entry of `rel` now, from the disk (None: not in the checkpoint), noting skipped paths."""
        full = self.workspace / rel
        try:
            st = os.lstat(full)
        except (FileNotFoundError, NotADirectoryError):
            self._forget(rel)
            return None
        if stat.S_ISDIR(st.st_mode):
            return self._dir(rel, old, node)
        self._forget(rel)
        if stat.S_ISLNK(st.st_mode):
            return LINK_MODE, self._write(b"blob", os.fsencode(os.readlink(full)))
        if not stat.S_ISREG(st.st_mode):
            if old is not None:
                self.skipped[rel] = special(st.st_mode) or "not a file"
            return None
        if st.st_size > self.max_bytes:
            self.skipped[rel] = f"over 10 MiB ({st.st_size / 2**20:.1f} MiB)"
            return None
        if st.st_nlink > 1:
            raise NeedsFullScan(f"{rel} has {st.st_nlink} links")
        try:
            with open(full, "rb") as f:
                data = f.read()
        except (FileNotFoundError, NotADirectoryError):
            return None  # gone meanwhile: the next change list names it again
        # (a file cairn may not read raises: the full scan then says so, rather than leave it out unseen)
        return (EXEC_MODE if st.st_mode & stat.S_IXUSR else FILE_MODE), self._write(b"blob", data)

    def _dir(self, rel: str, old: tuple[bytes, str] | None, node: _Node) -> tuple[bytes, str] | None:
        name = rel.rsplit("/", 1)[-1]
        tracked = old is not None and old[0] == TREE_MODE
        self.skipped.pop(rel, None)
        if name in self.skipped_dirs:
            self._forget_under(rel)
            self.skipped[rel + "/"] = "generated tree"
            return None
        if not tracked and is_repository(self.workspace / rel):
            self._forget_under(rel)
            self.skipped[rel + "/"] = "a git repository"
            return None
        self.skipped.pop(rel + "/", None)
        before = self._read(old[1]) if tracked else {}
        if not tracked and node.kinds & (GIT_HINT | FILE):  # not a repository (any more), or was a file
            node = _Node(TREE)
        entries = self._folder(rel, before, node)
        return (TREE_MODE, self._write_tree(entries)) if entries else None

    def _forget(self, rel: str) -> None:
        self.skipped.pop(rel, None)
        self._forget_under(rel)

    def _forget_under(self, rel: str) -> None:
        prefix = rel + "/" if rel else ""
        for path in [p for p in self.skipped if p.startswith(prefix)]:
            del self.skipped[path]

    # -- objects ---------------------------------------------------------------------------------

    def _read(self, tree: str) -> Entries:
        if tree not in self.trees:
            _sha, kind, _size, data = self.git.get_object_data(tree)
            if kind != b"tree":
                raise ValueError(f"{tree} is a {kind.decode()}, not a tree")
            self.trees[tree] = _parse_tree(data)
        return self.trees[tree]

    def _write_tree(self, entries: Entries) -> str:
        order = sorted(entries, key=lambda n: n + b"/" if entries[n][0] == TREE_MODE else n)
        tree = self._write(b"tree", b"".join(entries[n][0] + b" " + n + b"\0" + bytes.fromhex(entries[n][1])
                                              for n in order))
        self.trees[tree] = entries
        return tree

    def _write(self, kind: bytes, data: bytes) -> str:
        """A loose object, as git writes one (zlib at core.looseCompression's default, read-only), unless
        it is there already; its id."""
        body = kind + b" %d\0" % len(data) + data
        sha = hashlib.sha1(body).hexdigest()
        folder = self.objects / sha[:2]
        path = folder / sha[2:]
        if not path.exists():
            folder.mkdir(exist_ok=True)
            tmp = folder / f"tmp_obj_{os.getpid()}_{sha[2:10]}"
            tmp.write_bytes(zlib.compress(body, 1))
            os.chmod(tmp, 0o444)
            os.replace(tmp, path)
        return sha


def _parse_tree(data: bytes) -> Entries:
    entries: Entries = {}
    i = 0
    while i < len(data):
        space = data.index(b" ", i)
        nul = data.index(b"\0", space)
        entries[data[space + 1:nul]] = (data[i:space], data[nul + 1:nul + 21].hex())
        i = nul + 21
    return entries


_SPECIAL = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
            (stat.S_ISBLK, "a block device"))


def special(mode: int) -> str | None:
    """Why a path cannot be checkpointed as it is (git stores files and symlinks only), or None."""
    kind = next((name for test, name in _SPECIAL if test(mode)), None)
    return f"{kind}{SPECIAL}" if kind else None


# -- git's test of a nested repository (setup.c: is_nonbare_repository_dir, is_git_directory) ----------


def is_repository(folder: Path) -> bool:
    """Whether `folder` holds a git repository as git sees it: `.git` a git directory, or a file saying
    `gitdir: PATH` of one."""
    dot = folder / ".git"
    try:
        st = os.stat(dot)
    except OSError:
        return False
    if stat.S_ISDIR(st.st_mode):
        return _is_git_directory(dot)
    if not stat.S_ISREG(st.st_mode):
        return False
    try:
        text = dot.read_bytes()[:4096].decode("utf-8", "replace")
    except OSError:
        return False
    if not text.startswith("gitdir: "):
        return False
    target = text[len("gitdir: "):].strip()
    return bool(target) and _is_git_directory(folder / target)


def _is_git_directory(path: Path) -> bool:
    common = path
    try:
        common = path / (path / "commondir").read_text().strip()
    except (OSError, UnicodeDecodeError):
        pass
    if not (os.access(common / "objects", os.X_OK) and os.access(common / "refs", os.X_OK)):
        return False
    head = path / "HEAD"
    try:
        if os.path.islink(head):
            return os.readlink(head).startswith("refs/")
        text = head.read_bytes()[:256].decode("ascii", "replace")
    except OSError:
        return False
    if text.startswith("ref:"):
        return text[4:].lstrip(" \t").startswith("refs/")
    digits = text.strip()
    return len(digits) in (40, 64) and all(c in "0123456789abcdef" for c in digits)
