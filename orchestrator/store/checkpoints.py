"""Checkpoints: one git commit of `workspace/` per step, in `state/checkpoints.git` (docs/design.md).

The git dir lives in `state/`, so the sandbox never sees it; the work tree is the workspace. The
workspace's own `.git`, if the agent made one, is never read or written (git never tracks a path named
`.git`), and a nested repository elsewhere in the workspace is skipped, not descended into.

How a step is committed. With a change list (store/change_list.py: the paths the host kernel saw change
since the last checkpoint), only those paths are read and only the trees above them are rewritten
(store/tree_update.py): a step costs what it changed. The repository's first commit is the whole
workspace, read once and written by one `git fast-import` into one pack (`_first_tree`). Otherwise
(no change list, an incomplete one: the first step of a process, an overflow of events, a watch that
could not start; a failed step before; and every FULL_SCAN_EVERY steps, for what inotify cannot see)
the step is a full scan, with git plumbing, so that cairn, not the workspace, decides what is kept:

1. `git ls-files -t -o -m -d --exclude-from=<ours>` names what changed since the index was last brought
   up to the workspace: untracked, modified and deleted files. The index holds every tracked file's stat
   data, so an unchanged file costs one `lstat` and no read (steps made from a change list leave the
   index behind; it is a cache of stat data, and what it misses costs a read, never a wrong tree; after
   the first commit, `refresh_index` fills it beside the steps). Only cairn's own exclude list applies;
   the workspace's `.gitignore` files do not hide anything.
2. `git ls-files -o -i --directory` names the generated trees that were skipped (`node_modules/`, ...).
3. Of the changed paths only, files over 10 MiB and special files (FIFOs, sockets, devices, which git
   cannot store) are skipped (and dropped from the index if they were tracked before). Nothing else in
   the workspace is stat'ed from Python.
4. `git update-index` takes the changed paths, `git write-tree` makes the tree (the cache tree makes it
   cheap). git reads big files through a memory map: one rewritten meanwhile kills it (SIGBUS) or makes
   it refuse; the scan is then tried once more, after the index's lock that git left is removed.

Either way, when the tree equals the last checkpoint's, no commit is made. The commit (fixed identity,
message `cairn step N`) and its refs are written in process through gitpython's object database and
reference code, which saves two git processes a step: the branch `refs/heads/checkpoints` moves, and
`refs/cairn/step-N` is set. The commit of step N is that ref; a step without a ref changed nothing (its
workspace is the nearest earlier step's). Once more than LOOSE_OBJECTS objects are loose, they are
packed (`git repack --geometric=2`: the new pack is rolled up with the small ones, so there are few
packs and each object is packed a few times at most) and the refs too.

git is never configured by a run (store/git_safety.py).

What is currently skipped is kept in `checkpoints.git/cairn-skipped.json` (path -> reason), for
`cairn files` and so that a Checkpoint event names a skipped path once, not at every step.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import git
from gitdb.base import IStream

from orchestrator.store.change_list import Subscription
# make_git and own_git_dir (and the settings) are imported from here by the readers of checkpoints too
from orchestrator.store.git_safety import IDENTITY, OWN_CONFIG, SAFE_SETTINGS, _env, _owned, make_git, own_git_dir  # noqa: F401
from orchestrator.store.tree_update import TreeUpdate, special

BRANCH = "refs/heads/checkpoints"
STEP_REF = "refs/cairn/step-"
MAX_FILE_BYTES = 10 * 1024 * 1024
SKIPPED_DIRS = ("node_modules", ".venv", "venv", "__pycache__", ".cache", ".pytest_cache", ".mypy_cache", ".tox")
LOOSE_OBJECTS = 256  # more loose objects than this are packed (counted every PACK_CHECK_EVERY commits)
PACK_CHECK_EVERY = 16
FULL_SCAN_EVERY = 100  # even with a complete change list, every so many steps are full scans
_MESSAGE = re.compile(r"^cairn step (\d+)$")


@dataclass
class Result:
    step: int
    commit: str | None  # None: the step changed nothing
    skipped: list[str] = field(default_factory=list)  # newly skipped paths (directories end with "/")


def _run_with_input(g: git.Git, command: str, args: list[str], data: bytes) -> str:
    with tempfile.TemporaryFile() as f:
        f.write(data)
        f.seek(0)
        return getattr(g, command)(*args, istream=f)


def _paths(paths: set[str]) -> bytes:
    return b"".join(p.encode("utf-8", "surrogateescape") + b"\0" for p in sorted(paths))


def _output(proc) -> str:  # noqa: ANN001 - gitpython's AutoInterrupt
    out = proc.stdout.read()
    proc.wait()
    return out.decode("utf-8", "surrogateescape")


def _split_z(out: str) -> list[str]:
    return [p for p in out.split("\0") if p]


def tree_changes(g: git.Git, before: str | None, after: str) -> list[tuple[str, str]]:
    """(status letter, path) of every path that differs between two commits or trees; every path of
    `after` when there is no `before`."""
    args = [before, after] if before else ["--root", after]
    parts = _split_z(g.diff_tree("-r", "-z", "--no-commit-id", "--name-status", "--no-renames", *args))
    return [(parts[i][:1], parts[i + 1]) for i in range(0, len(parts) - 1, 2)]


class Checkpoints:
    def __init__(self, git_dir: Path, workspace: Path, index: Path | None = None,
                 changes: Subscription | None = None) -> None:
        """`index`: stage into this scratch index instead of the checkpoints' own (a sub-agent's diff).
        `changes`: the change list of the workspace (store/change_list.py); without it every step is a
        full scan."""
        self.git_dir, self.workspace, self.index, self.changes = git_dir, workspace, index, changes
        self.exclude = git_dir / "cairn-exclude"
        self.skipped_file = git_dir / "cairn-skipped.json"
        self.lock = threading.Lock()  # the first checkpoint may be taken in a thread (runs/first_checkpoint.py)
        self.index_lock = threading.Lock()  # the index: full scans, and its refresh beside the steps
        self._git: git.Git | None = None
        self._skipped: dict[str, str] | None = None
        self._head: str | None = None
        self._head_tree: str | None = None
        self._tree: str | None = None  # the workspace's tree as this process last knew it
        self._update: TreeUpdate | None = None
        self._refreshing: git.cmd.Git.AutoInterrupt | None = None  # refresh_index's git, while it runs
        self._first_scan: subprocess.Popen | None = None  # store/first_scan.py's process, while it runs
        self._closed = False
        self._repo: git.Repo | None = None
        self._commits = 0
        self._steps = 0
        self.full_scans = 0  # steps that were full scans (for tests and benches)

    @classmethod
    def of(cls, run) -> "Checkpoints":  # noqa: ANN001 - RunDir
        return cls(run.state / "checkpoints.git", run.workspace)

    @property
    def git(self) -> git.Git:
        if self._git is None:
            self._git = make_git(self.git_dir, self.workspace)
            if self.index is not None:
                self._git.update_environment(GIT_INDEX_FILE=str(self.index))
        return self._git

    def exists(self) -> bool:
        return (self.git_dir / "HEAD").is_file()

    def close(self) -> None:
        """Ends the git processes kept for this run (the object reader of the change-list steps, a first
        scan still going, and an index refresh still going: it leaves the index as it was, and its lock,
        which a full scan clears)."""
        self._closed = True
        refreshing, scan = self._refreshing, self._first_scan
        if refreshing is not None:
            refreshing.proc.terminate()
        if scan is not None:
            _end(scan)
        if self._git is not None:
            self._git.clear_cache()

    def init(self) -> None:
        if self.exists():
            if self._git is None:  # first use in this process: a run has one writer, so a lock left
                (self.git_dir / "index.lock").unlink(missing_ok=True)  # behind is from a killed cairn
            return
        self.git_dir.mkdir(parents=True, exist_ok=True)
        g = make_git(self.git_dir)
        g.init("--bare", "--quiet", "--template=")  # no sample hooks, no info/
        own_git_dir(self.git_dir)  # the config is cairn's own text
        g.symbolic_ref("HEAD", BRANCH)
        self.exclude.write_text("".join(f"{name}/\n" for name in SKIPPED_DIRS))

    # -- committing -------------------------------------------------------------------------------

    def commit(self, step: int) -> Result:
        """Commits the workspace as the state after `step`, unless nothing changed since the last one."""
        with self.lock:
            self.init()
            if self._head is None:
                self._head = self.head()
            if self._head is None and self._tree is None:
                if self.changes is not None:
                    self.changes.take()  # what changed before: in this scan
                tree, skipped = self._first_tree()
                self._tree = tree
            else:
                tree, skipped = self._tree_now()
            new_skips = self._remember_skipped(skipped)
            if self._head is not None and tree == self._tree_of(self._head):
                return Result(step, None, new_skips)
            commit = self._write_commit(tree, self._head, step)
            self._head, self._head_tree = commit, tree
            self._pack_when_loose()
            return Result(step, commit, new_skips)

    def prepare(self) -> None:
        """Brings what this process knows of the workspace up to it, without a commit: a resumed run's
        full scan, taken while its first request goes out, so that its first step is not one."""
        with self.lock:
            if self._tree is None:
                self.init()
                self._remember_skipped(self._tree_now()[1])

    def _tree_now(self) -> tuple[str, dict[str, str]]:
        """The workspace's tree now, and what is skipped: from the change list when it is complete, else
        (and every FULL_SCAN_EVERY steps, for what inotify cannot see) from a full scan."""
        changes = self.changes.take() if self.changes is not None else None
        self._steps += 1
        known, self._tree = self._tree, None  # unknown until this step is done: after a failure, a full scan
        if changes is not None and changes.complete and known is not None and self._steps % FULL_SCAN_EVERY:
            try:
                tree, skipped = self._updater().update(known, changes.under(self.workspace), self.skipped())
                self._tree = tree
                return tree, skipped
            except Exception:  # noqa: BLE001 - a hard link, an unreadable object, ...: a full scan is right
                pass
        self.full_scans += 1
        with self.index_lock:
            if known is not None and not self._index_filled():
                # The first tree leaves no index (refresh_index fills it later): without the last tree in
                # it, git would not name a tracked file that became a FIFO (untracked ones it never lists)
                self.git.read_tree(known)
            try:
                _changed, skipped = self.stage()
            except git.GitCommandError:
                # git maps big files into memory: one rewritten as it reads it kills git (SIGBUS) or makes it
                # refuse ("unstable object source data"), and leaves the index's lock behind. Once more.
                self._index_file().with_name(self._index_file().name + ".lock").unlink(missing_ok=True)
                _changed, skipped = self.stage()
            tree = self.git.write_tree()
        self._tree = tree
        return tree, skipped

    def _index_file(self) -> Path:
        return self.index if self.index is not None else self.git_dir / "index"

    def _index_filled(self) -> bool:
        index = self._index_file()
        return index.exists() and index.stat().st_size > 0

    def _updater(self) -> TreeUpdate:
        if self._update is None:
            self._update = TreeUpdate(self.git_dir, self.workspace, self.git, SKIPPED_DIRS, MAX_FILE_BYTES)
        return self._update

    def stage(self) -> tuple[bool, dict[str, str]]:
        """Brings the index up to the workspace; returns whether it changed, and what is skipped (why)."""
        g = self.git
        update, drop, skipped = self._listing(g)
        if update:
            _run_with_input(g, "update_index", ["--add", "--remove", "--replace", "-z", "--stdin"], _paths(update))
        if drop:
            _run_with_input(g, "update_index", ["--force-remove", "-z", "--stdin"], _paths(drop))
        return bool(update or drop), skipped

    def _listing(self, g: git.Git) -> tuple[set[str], set[str], dict[str, str]]:
        """What differs between the index and the workspace: paths to update (or remove), tracked paths to
        drop (they became too big, or special files), and what is skipped (path -> why)."""
        exclude = f"--exclude-from={self.exclude}"
        # The two scans are independent: run them side by side.
        listing = g.ls_files("-z", "-o", "-i", "--directory", exclude, as_process=True)
        changes = _split_z(g.ls_files("-z", "-t", "-o", "-m", "-d", exclude))
        ignored = _split_z(_output(listing))
        # `--directory` also names the folders above a generated tree that hold nothing else: not skipped
        skipped = {path: "generated tree" for path in ignored if path.rstrip("/").rsplit("/", 1)[-1] in SKIPPED_DIRS}
        update: set[str] = set()
        drop: set[str] = set()
        for entry in changes:
            tag, path = entry[:1], entry[2:]
            if path.endswith("/"):  # an untracked directory git would not enter: a nested repository
                skipped[path] = "a git repository"
                continue
            if tag in ("?", "C"):
                try:
                    st = os.lstat(self.workspace / path)
                except OSError:
                    update.add(path)  # gone meanwhile: --remove drops it
                    continue
                why = special(st.st_mode)
                if why is None and st.st_size > MAX_FILE_BYTES and stat.S_ISREG(st.st_mode):
                    why = f"over 10 MiB ({st.st_size / 2**20:.1f} MiB)"
                if why is not None:
                    skipped[path] = why
                    if tag == "C":
                        drop.add(path)
                    continue
            update.add(path)
        return update, drop, skipped

    def _first_tree(self) -> tuple[str, dict[str, str]]:
        """The tree of a repository's first commit, and what is skipped: the whole workspace, written by
        store/first_scan.py into one pack, in a process of its own (reading every file is seconds of
        Python on a big workspace, which would take the interpreter from the start's own work: the
        model library's import). The index is left empty: `refresh_index` fills it later."""
        self._index_file().unlink(missing_ok=True)  # whatever was there is not this workspace's
        # Its own process group, so that `close()` ends it with its `git fast-import` (which, killed before
        # the scan's `done`, writes no ref: the next drive takes the first checkpoint again)
        scan = subprocess.Popen(self._first_scan_command(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
        self._first_scan = scan
        try:
            if self._closed:
                _end(scan)
            stdout, stderr = scan.communicate()
        finally:
            self._first_scan = None
        if scan.returncode != 0:
            lines = [line for line in stderr.splitlines() if line.strip()]
            raise RuntimeError(f"the first scan of the workspace failed: {lines[-1] if lines else scan.returncode}")
        out = json.loads(stdout)
        return out["tree"], out["skipped"]

    def _first_scan_command(self) -> list[str]:
        return [sys.executable, "-m", "orchestrator.store.first_scan", str(self.git_dir), str(self.workspace)]

    def refresh_index(self) -> None:
        """Fills the index with the last tree's files and their stat data (hashing each once), so that a
        full scan to come costs an `lstat` a file, not a read. Safe beside steps made from the change list."""
        with self.index_lock:
            tree = self._tree
            if self._closed or tree is None or self._index_filled():
                return
            g = make_git(self.git_dir, self.workspace)
            if self.index is not None:
                g.update_environment(GIT_INDEX_FILE=str(self.index))
            g.read_tree(tree)
            # At the lowest CPU priority: it must not slow the steps it runs beside
            low = ["nice", "-n", "19"] if shutil.which("nice") else []
            self._refreshing = g.execute([*low, "git", "update-index", "-q", "--refresh"], as_process=True)
            if self._closed:
                self._refreshing.proc.terminate()
            try:
                self._refreshing.wait()
            except git.GitCommandError:
                pass  # files changed since, or `close()` ended it: a full scan finds what it left out
            finally:
                self._refreshing = None

    def _write_commit(self, tree: str, parent: str | None, step: int) -> str:
        """The commit object and its two refs, written in process by gitpython's object database and
        reference code (what `git commit-tree` and `git update-ref` would do, without two more processes)."""
        if self._repo is None:
            own_git_dir(self.git_dir)  # gitpython reads the config (and a commondir file) in process
            self._repo = git.Repo(str(self.git_dir))
            self._repo.git.update_environment(**_env(self.git_dir, None))  # should it ever run git
        who = f"{IDENTITY['name']} <{IDENTITY['email']}> {int(time.time())} +0000"
        body = (f"tree {tree}\n" + (f"parent {parent}\n" if parent else "")
                + f"author {who}\ncommitter {who}\n\ncairn step {step}\n").encode()
        stored = self._repo.odb.store(IStream(b"commit", len(body), io.BytesIO(body)))
        commit = git.Commit(self._repo, stored.binsha)
        for ref in (BRANCH, f"{STEP_REF}{step}"):
            git.SymbolicReference(self._repo, ref).set_reference(commit)
        return commit.hexsha

    def _pack_when_loose(self) -> None:
        """Packs the loose objects once there are more than LOOSE_OBJECTS (looked at every few commits)."""
        self._commits += 1
        if self._commits % PACK_CHECK_EVERY != 1 or loose_objects(self.git_dir) <= LOOSE_OBJECTS:
            return
        self.git.repack("--geometric=2", "-d", "-q", "-n")  # -n: no info/ files for dumb transports
        self.git.pack_refs("--all", "--prune")

    def _tree_of(self, commit: str) -> str:
        if self._head_tree is None:
            self._head_tree = self.git.rev_parse(f"{commit}^{{tree}}")
        return self._head_tree

    def _remember_skipped(self, now: dict[str, str]) -> list[str]:
        before = self.skipped()
        if now != before:
            tmp = self.skipped_file.with_suffix(".tmp")
            tmp.write_text(json.dumps(now, indent=1, sort_keys=True))
            os.replace(tmp, self.skipped_file)
            self._skipped = now
        return sorted(set(now) - set(before))

    # -- reading ----------------------------------------------------------------------------------

    def skipped(self) -> dict[str, str]:
        if self._skipped is None:
            try:
                self._skipped = json.loads(self.skipped_file.read_text())
            except (OSError, json.JSONDecodeError):
                self._skipped = {}
        return dict(self._skipped)

    def head(self) -> str | None:
        if not self.exists():
            return None
        try:
            return make_git(self.git_dir).rev_parse("--verify", "-q", BRANCH)
        except git.GitCommandError:
            return None

    def steps(self) -> dict[int, str]:
        """Step -> commit, for the steps that made a commit."""
        if not self.exists():
            return {}
        out = make_git(self.git_dir).for_each_ref("--format=%(refname) %(objectname)", "refs/cairn/")
        steps = {}
        for line in out.splitlines():
            ref, _, commit = line.partition(" ")
            if ref.startswith(STEP_REF) and ref[len(STEP_REF):].isdigit():
                steps[int(ref[len(STEP_REF):])] = commit
        return steps

    def commit_at(self, step: int, steps: dict[int, str] | None = None) -> str | None:
        """The workspace as it was at the end of `step`: the commit of the nearest step at or before it."""
        steps = self.steps() if steps is None else steps
        earlier = [n for n in steps if n <= step]
        return steps[max(earlier)] if earlier else None


def _end(process: subprocess.Popen) -> None:
    """Ends a process that leads its own group, and the group (a child it started)."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


def loose_objects(git_dir: Path) -> int:
    """How many objects of `git_dir` are loose files (objects/xx/...), not in a pack."""
    count = 0
    try:
        with os.scandir(git_dir / "objects") as folders:
            for folder in folders:
                if len(folder.name) == 2 and folder.is_dir():
                    count += len(os.listdir(folder.path))
    except OSError:
        pass
    return count


def step_of_message(message: str) -> int | None:
    m = _MESSAGE.match(message.strip())
    return int(m.group(1)) if m else None
