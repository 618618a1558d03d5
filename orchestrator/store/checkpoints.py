"""Checkpoints: one git commit of `workspace/` per step, in `state/checkpoints.git` (DESIGN.md).

The git dir lives in `state/`, so the sandbox never sees it; the work tree is the workspace. The
workspace's own `.git`, if the agent made one, is never read or written (git never tracks a path named
`.git`), and a nested repository elsewhere in the workspace is skipped, not descended into.

How a step is committed, with git plumbing so that cairn, not the workspace, decides what is kept:

1. `git ls-files -t -o -m -d --exclude-from=<ours>` names what changed since the last checkpoint:
   untracked, modified and deleted files. The index holds every tracked file's stat data, so an
   unchanged file costs one `lstat` and no read. Only cairn's own exclude list applies; the
   workspace's `.gitignore` files do not hide anything from a checkpoint.
2. `git ls-files -o -i --directory` names the generated trees that were skipped (`node_modules/`, ...).
3. Of the changed paths only, files over 10 MiB and special files (FIFOs, sockets, devices, which git
   cannot store) are skipped (and dropped from the index if they were tracked before). Nothing else in
   the workspace is stat'ed from Python.
4. `git update-index` takes the changed paths, `git write-tree` makes the tree (the cache tree makes it
   cheap), and when that tree equals the last checkpoint's, no commit is made.
5. The commit (fixed identity, message `cairn step N`) and its refs are written in process through
   gitpython's object database and reference code, which saves two git processes a step: the branch
   `refs/heads/checkpoints` moves, and `refs/cairn/step-N` is set. The commit of step N is that ref; a
   step without a ref changed nothing (its workspace is the nearest earlier step's).

Every git process gets `-c safe.directory=*` (the workspace may belong to the sandbox's uid 1000 while
cairn runs as root), a fixed identity, and no global or system git config.

What is currently skipped is kept in `checkpoints.git/cairn-skipped.json` (path -> reason), for
`cairn files` and so that a Checkpoint event names a skipped path once, not at every step.
"""

from __future__ import annotations

import io
import json
import os
import re
import stat
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import git
from gitdb.base import IStream

BRANCH = "refs/heads/checkpoints"
STEP_REF = "refs/cairn/step-"
MAX_FILE_BYTES = 10 * 1024 * 1024
SKIPPED_DIRS = ("node_modules", ".venv", "venv", "__pycache__", ".cache", ".pytest_cache", ".mypy_cache", ".tox")
IDENTITY = {"name": "cairn", "email": "cairn@localhost"}
_MESSAGE = re.compile(r"^cairn step (\d+)$")
_SPECIAL = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
            (stat.S_ISBLK, "a block device"))


@dataclass
class Result:
    step: int
    commit: str | None  # None: the step changed nothing
    skipped: list[str] = field(default_factory=list)  # newly skipped paths (directories end with "/")


def _env(git_dir: Path, work_tree: Path | None) -> dict[str, str]:
    env = {
        "GIT_DIR": str(git_dir),
        # Only our repository's config: a user's global or system git config must not change what is kept.
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": IDENTITY["name"], "GIT_AUTHOR_EMAIL": IDENTITY["email"],
        "GIT_COMMITTER_NAME": IDENTITY["name"], "GIT_COMMITTER_EMAIL": IDENTITY["email"],
        "GIT_TERMINAL_PROMPT": "0",
        "LC_ALL": "C",
    }
    if work_tree is not None:
        env["GIT_WORK_TREE"] = str(work_tree)
    return env


def make_git(git_dir: Path, work_tree: Path | None = None) -> git.Git:
    """A gitpython command runner on this git dir and work tree (the git command line underneath)."""
    g = git.Git(str(work_tree if work_tree is not None else git_dir))
    g.update_environment(**_env(git_dir, work_tree))
    # The workspace may belong to the sandbox's uid 1000 while cairn runs as root.
    g.set_persistent_git_options(c=["safe.directory=*", "core.quotepath=off"])
    return g


def _special(mode: int) -> str | None:
    """Why a path cannot be checkpointed as it is (git stores files and symlinks only), or None."""
    kind = next((name for test, name in _SPECIAL if test(mode)), None)
    return f"{kind}, not a file" if kind else None


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
    def __init__(self, git_dir: Path, workspace: Path, index: Path | None = None) -> None:
        """`index`: stage into this scratch index instead of the checkpoints' own (a sub-agent's diff)."""
        self.git_dir, self.workspace, self.index = git_dir, workspace, index
        self.exclude = git_dir / "cairn-exclude"
        self.skipped_file = git_dir / "cairn-skipped.json"
        self._git: git.Git | None = None
        self._skipped: dict[str, str] | None = None
        self._head: str | None = None
        self._head_tree: str | None = None
        self._repo: git.Repo | None = None

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

    def init(self) -> None:
        if self.exists():
            if self._git is None:  # first use in this process: a run has one writer, so a lock left
                (self.git_dir / "index.lock").unlink(missing_ok=True)  # behind is from a killed cairn
            return
        self.git_dir.mkdir(parents=True, exist_ok=True)
        g = make_git(self.git_dir)
        g.init("--bare", "--quiet")
        g.symbolic_ref("HEAD", BRANCH)
        for key, value in (("core.autocrlf", "false"), ("core.filemode", "true"), ("core.symlinks", "true"),
                           ("gc.auto", "0"), ("user.name", IDENTITY["name"]), ("user.email", IDENTITY["email"])):
            g.config(key, value)
        self.exclude.write_text("".join(f"{name}/\n" for name in SKIPPED_DIRS))

    # -- committing -------------------------------------------------------------------------------

    def commit(self, step: int) -> Result:
        """Commits the workspace as the state after `step`, unless nothing changed since the last one."""
        self.init()
        changed, skipped = self.stage()
        new_skips = self._remember_skipped(skipped)
        if self._head is None:
            self._head = self.head()
        if self._head is not None and not changed:
            return Result(step, None, new_skips)
        tree = self.git.write_tree()
        if self._head is not None and tree == self._tree_of(self._head):
            return Result(step, None, new_skips)
        commit = self._write_commit(tree, self._head, step)
        self._head, self._head_tree = commit, tree
        return Result(step, commit, new_skips)

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
                why = _special(st.st_mode)
                if why is None and st.st_size > MAX_FILE_BYTES and stat.S_ISREG(st.st_mode):
                    why = f"over 10 MiB ({st.st_size / 2**20:.1f} MiB)"
                if why is not None:
                    skipped[path] = why
                    if tag == "C":
                        drop.add(path)
                    continue
            update.add(path)
        if update:
            _run_with_input(g, "update_index", ["--add", "--remove", "--replace", "-z", "--stdin"], _paths(update))
        if drop:
            _run_with_input(g, "update_index", ["--force-remove", "-z", "--stdin"], _paths(drop))
        return bool(update or drop), skipped

    def _write_commit(self, tree: str, parent: str | None, step: int) -> str:
        """The commit object and its two refs, written in process by gitpython's object database and
        reference code (what `git commit-tree` and `git update-ref` would do, without two more processes)."""
        if self._repo is None:
            self._repo = git.Repo(str(self.git_dir))
        who = f"{IDENTITY['name']} <{IDENTITY['email']}> {int(time.time())} +0000"
        body = (f"tree {tree}\n" + (f"parent {parent}\n" if parent else "")
                + f"author {who}\ncommitter {who}\n\ncairn step {step}\n").encode()
        stored = self._repo.odb.store(IStream(b"commit", len(body), io.BytesIO(body)))
        commit = git.Commit(self._repo, stored.binsha)
        for ref in (BRANCH, f"{STEP_REF}{step}"):
            git.SymbolicReference(self._repo, ref).set_reference(commit)
        return commit.hexsha

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


def step_of_message(message: str) -> int | None:
    m = _MESSAGE.match(message.strip())
    return int(m.group(1)) if m else None
