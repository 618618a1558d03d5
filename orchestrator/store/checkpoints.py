"""Checkpoints: one git commit of `workspace/` per step, in `state/checkpoints.git` (docs/design.md).

The git dir lives in `state/`, so the sandbox never sees it; the work tree is the workspace. The
workspace's own `.git`, if the agent made one, is never read or written (git never tracks a path named
`.git`), and a nested repository elsewhere in the workspace is skipped, not descended into.

How a step is committed. With a change list (store/change_list.py: the paths the host kernel saw change
since the last checkpoint), only those paths are read and only the trees above them are rewritten
(store/tree_update.py): a step costs what it changed. Without one, or when it is incomplete (the first
checkpoint of a process, an overflow of events, a watch that could not start), the step is a full scan,
with git plumbing, so that cairn, not the workspace, decides what is kept:

1. `git ls-files -t -o -m -d --exclude-from=<ours>` names what changed since the index was last brought
   up to the workspace: untracked, modified and deleted files. The index holds every tracked file's stat
   data, so an unchanged file costs one `lstat` and no read (steps made from a change list leave the
   index behind; it is a cache of stat data, and what it misses costs a read, never a wrong tree).
   Only cairn's own exclude list applies; the workspace's `.gitignore` files do not hide anything.
2. `git ls-files -o -i --directory` names the generated trees that were skipped (`node_modules/`, ...).
3. Of the changed paths only, files over 10 MiB and special files (FIFOs, sockets, devices, which git
   cannot store) are skipped (and dropped from the index if they were tracked before). Nothing else in
   the workspace is stat'ed from Python.
4. `git update-index` takes the changed paths (the first scan of a workspace writes its blobs into one
   pack, not a loose file each), `git write-tree` makes the tree (the cache tree makes it cheap).

Either way, when the tree equals the last checkpoint's, no commit is made. The commit (fixed identity,
message `cairn step N`) and its refs are written in process through gitpython's object database and
reference code, which saves two git processes a step: the branch `refs/heads/checkpoints` moves, and
`refs/cairn/step-N` is set. The commit of step N is that ref; a step without a ref changed nothing (its
workspace is the nearest earlier step's). Once more than LOOSE_OBJECTS objects are loose, they are
packed (`git repack --geometric=2`: the new pack is rolled up with the small ones, so there are few
packs and each object is packed a few times at most) and the refs too.

git is never configured by a run. Every git process gets a fixed identity, no global or system config,
and command-line settings (GIT_CONFIG_COUNT, which outrank any config file) that switch off everything
in git that can start a program: fsmonitor, hooks, pager, editor, external diff, signature checks,
diff drivers and filters. `safe.directory=*` too: the workspace may belong to
the sandbox's uid while cairn runs as root. Before the first git call on a git dir in a process,
`own_git_dir` makes its `config` cairn's own text and removes what git would follow out of it (hooks,
info/attributes, alternates, commondir): a git dir copied from elsewhere cannot act on this machine.

What is currently skipped is kept in `checkpoints.git/cairn-skipped.json` (path -> reason), for
`cairn files` and so that a Checkpoint event names a skipped path once, not at every step.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import stat
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import git
from gitdb.base import IStream

from orchestrator.store.change_list import Subscription
from orchestrator.store.tree_update import NeedsFullScan, TreeUpdate, special

BRANCH = "refs/heads/checkpoints"
STEP_REF = "refs/cairn/step-"
MAX_FILE_BYTES = 10 * 1024 * 1024
SKIPPED_DIRS = ("node_modules", ".venv", "venv", "__pycache__", ".cache", ".pytest_cache", ".mypy_cache", ".tox")
IDENTITY = {"name": "cairn", "email": "cairn@localhost"}
LOOSE_OBJECTS = 256  # more loose objects than this are packed (counted every PACK_CHECK_EVERY commits)
PACK_CHECK_EVERY = 16
BULK_FROM = 1000  # a full scan that adds more files than this writes them into one pack
_MESSAGE = re.compile(r"^cairn step (\d+)$")


@dataclass
class Result:
    step: int
    commit: str | None  # None: the step changed nothing
    skipped: list[str] = field(default_factory=list)  # newly skipped paths (directories end with "/")


# Settings given on git's command line (as GIT_CONFIG_COUNT) outrank every config file, so even a hostile
# `config` that slipped past `own_git_dir` cannot make git start a program.
SAFE_SETTINGS = (
    ("core.fsmonitor", "false"),
    ("core.hooksPath", os.devnull),  # no hook is ever found there
    ("core.pager", "cat"),
    ("core.editor", "true"),
    ("core.sshCommand", "false"),
    ("core.askPass", ""),
    ("core.attributesFile", os.devnull),
    ("core.quotepath", "off"),
    ("credential.helper", ""),
    ("diff.external", ""),
    ("log.showSignature", "false"),
    ("submodule.recurse", "false"),
    ("protocol.allow", "never"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("safe.directory", "*"),  # the workspace may belong to the sandbox's uid while cairn runs as root
)
# A git dir's `config` is exactly this: what `init` writes, and what `own_git_dir` puts back.
OWN_CONFIG = f"""[core]
\trepositoryformatversion = 0
\tfilemode = true
\tbare = true
\tautocrlf = false
\tsymlinks = true
[gc]
\tauto = 0
[user]
\tname = {IDENTITY["name"]}
\temail = {IDENTITY["email"]}
"""
# What git would follow out of a git dir, or run: none of it is ever part of cairn's checkpoints.
_FOREIGN = ("hooks", "info", "commondir", "gitdir", "worktrees", "modules", "logs", "shallow",
            "objects/info/alternates", "objects/info/http-alternates")
_owned: set[Path] = set()  # git dirs made safe in this process


def own_git_dir(git_dir: Path) -> None:
    """Makes `git_dir` safe to run git on: its config is cairn's own text, and nothing git would follow
    or run (hooks, info/attributes, alternates, commondir, ...) is left in it. Once per process."""
    key = Path(os.path.abspath(git_dir))
    if key in _owned or not (git_dir / "HEAD").exists():
        return
    config = git_dir / "config"
    try:
        same = not config.is_symlink() and config.read_text() == OWN_CONFIG
    except (OSError, UnicodeDecodeError):
        same = False
    if not same:
        tmp = git_dir / "config.cairn-tmp"
        tmp.unlink(missing_ok=True)
        tmp.write_text(OWN_CONFIG)
        os.replace(tmp, config)  # replaces a symlink itself, never what it points to
    for name in _FOREIGN:
        path = git_dir / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif os.path.lexists(path):
            path.unlink()
    _owned.add(key)


def _env(git_dir: Path, work_tree: Path | None) -> dict[str, str]:
    env = {
        "GIT_DIR": str(git_dir),
        # Only cairn's settings: a user's global or system git config must not change what is kept.
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_ATTR_NOSYSTEM": "1",
        "GIT_NO_REPLACE_OBJECTS": "1",
        "GIT_AUTHOR_NAME": IDENTITY["name"], "GIT_AUTHOR_EMAIL": IDENTITY["email"],
        "GIT_COMMITTER_NAME": IDENTITY["name"], "GIT_COMMITTER_EMAIL": IDENTITY["email"],
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_PAGER": "cat", "GIT_EDITOR": "true",
        "LC_ALL": "C",
    }
    settings = list(SAFE_SETTINGS)
    # A filter a config file defines runs for any path a .gitattributes (the workspace's) names it for:
    # give each an empty command, which git takes as none. (Diff drivers and textconv never run: every
    # diff cairn makes says --no-ext-diff --no-textconv.)
    for name in sorted(_filters(git_dir / "config")):
        settings += [(f"filter.{name}.{key}", "") for key in ("clean", "smudge", "process")]
    if work_tree is not None:
        env["GIT_WORK_TREE"] = str(work_tree)
    env["GIT_CONFIG_COUNT"] = str(len(settings))
    for i, (key, value) in enumerate(settings):
        env[f"GIT_CONFIG_KEY_{i}"], env[f"GIT_CONFIG_VALUE_{i}"] = key, value
    return env


_FILTER_SECTION = re.compile(r'^\s*\[\s*(filter)(?:\s+"((?:[^"\\\\]|\\\\.)*)"|\.([^\]\s]+))\s*\]', re.I | re.M)


def _filters(config: Path) -> set[str]:
    """The names of the filters a config file defines."""
    try:
        text = config.read_text(errors="replace")
    except OSError:
        return set()
    return {(m.group(2) if m.group(2) is not None else m.group(3)).replace('\\"', '"')
            for m in _FILTER_SECTION.finditer(text)}


def make_git(git_dir: Path, work_tree: Path | None = None) -> git.Git:
    """A gitpython command runner on this git dir and work tree (the git command line underneath),
    with cairn's own settings only (see the module's docstring)."""
    own_git_dir(git_dir)
    g = git.Git(str(work_tree if work_tree is not None else git_dir))
    g.update_environment(**_env(git_dir, work_tree))
    return g


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
        self.lock = threading.Lock()  # the first checkpoint may be taken in a thread (runs/compose.py)
        self._git: git.Git | None = None
        self._skipped: dict[str, str] | None = None
        self._head: str | None = None
        self._head_tree: str | None = None
        self._tree: str | None = None  # the workspace's tree as this process last knew it
        self._update: TreeUpdate | None = None
        self._repo: git.Repo | None = None
        self._commits = 0
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
        """Ends the git processes kept for this run (the object reader of the change-list steps)."""
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
        from a full scan."""
        changes = self.changes.take() if self.changes is not None else None
        if changes is not None and changes.complete and self._tree is not None:
            try:
                self._tree, skipped = self._updater().update(self._tree, changes.under(self.workspace), self.skipped())
                return self._tree, skipped
            except NeedsFullScan:
                pass
        self.full_scans += 1
        _changed, skipped = self.stage()
        self._tree = self.git.write_tree()
        return self._tree, skipped

    def _updater(self) -> TreeUpdate:
        if self._update is None:
            self._update = TreeUpdate(self.git_dir, self.workspace, self.git, SKIPPED_DIRS, MAX_FILE_BYTES)
        return self._update

    def stage(self) -> tuple[bool, dict[str, str]]:
        """Brings the index up to the workspace; returns whether it changed, and what is skipped (why)."""
        g = self.git
        exclude = f"--exclude-from={self.exclude}"
        # The two scans are independent: run them side by side.
        listing = g.ls_files("-z", "-o", "-i", "--directory", exclude, as_process=True)
        changes = _split_z(g.ls_files("-z", "-t", "-o", "-m", "-d", exclude))
        ignored = _split_z(_output(listing))
        skipped = {path: "generated tree" for path in ignored}
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
        if update:
            # Many new files (a workspace's first scan) go into one pack: a loose file each would cost more
            # to write, and to pack later, than to hash (git's bulk check-in, for blobs over the threshold).
            runner = g(c="core.bigFileThreshold=1") if len(update) > BULK_FROM else g
            _run_with_input(runner, "update_index", ["--add", "--remove", "--replace", "-z", "--stdin"], _paths(update))
        if drop:
            _run_with_input(g, "update_index", ["--force-remove", "-z", "--stdin"], _paths(drop))
        return bool(update or drop), skipped

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
