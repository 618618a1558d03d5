"""A run's checkpoints read in one pass, for the readers of a whole run (the report).

One `git log --raw` of the checkpoints' branch gives every step's commit and what it changed (paths,
status, the blobs before and after); one `git cat-file --batch-check` gives the sizes of those blobs and
one `git cat-file --batch` their contents; one `git diff-tree --stdin -p` gives the diffs of all the
steps at once. So reading a run costs a handful of git processes, not a few per step (a 2,000-step run
took 6,000 processes before), and each step's diff is bounded: a step whose diff could be big (the blobs
it changed add up to more than BATCH_BYTES) gets a process of its own that is stopped once it said
enough, so one huge step never makes git write (and cairn read) a gigabyte.

Reads only `state/checkpoints.git`, with cairn's own git settings (store/checkpoints.py).
"""

from __future__ import annotations

import bisect
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.store.checkpoints import BRANCH, make_git, step_of_message
from orchestrator.store.run_dir import RunDir

NO_BLOB = "0" * 40
BATCH_BYTES = 1024 * 1024  # a step whose changed blobs are smaller than this is diffed in the shared process


@dataclass(frozen=True)
class Change:
    """One path a step changed: git's status letter (A added, M modified, D deleted, T type changed) and
    the blob before and after (None where there is none)."""

    status: str
    path: str
    old: str | None
    new: str | None


@dataclass
class StepCommit:
    step: int
    commit: str
    parent: str | None
    changes: list[Change] = field(default_factory=list)


class CheckpointLog:
    """The checkpoints' branch, oldest commit first (`commits`), with what each changed."""

    def __init__(self, git_dir: Path, commits: list[StepCommit]) -> None:
        self.git_dir, self.commits = git_dir, commits
        self.git = make_git(git_dir)
        self._steps = [c.step for c in commits]

    @classmethod
    def of(cls, run: RunDir) -> CheckpointLog | None:
        return cls.read(run.state / "checkpoints.git")

    @classmethod
    def read(cls, git_dir: Path) -> CheckpointLog | None:
        """The log of the checkpoints in `git_dir`; None when there is no repository or no commit."""
        if not (git_dir / "HEAD").is_file():
            return None
        g = make_git(git_dir)
        out = g.execute(["git", "log", "--reverse", "--raw", "-z", "--no-renames", "--no-abbrev", "--root",
                         "--format=%x01%H %P%x00%s", BRANCH, "--"], stdout_as_string=False,
                        with_exceptions=False)
        commits = [c for c in (_commit(chunk) for chunk in out.split(b"\x01") if chunk) if c is not None]
        return cls(git_dir, commits) if commits else None

    def at(self, step: int) -> StepCommit | None:
        """The commit that holds the workspace as it was at the end of `step`: the nearest at or before it."""
        i = bisect.bisect_right(self._steps, step)
        return self.commits[i - 1] if i else None

    def blob_sizes(self, blobs: set[str]) -> dict[str, int]:
        """Blob id -> size, for those that are in the repository."""
        if not blobs:
            return {}
        out = self._batch("--batch-check", sorted(blobs)).decode()
        sizes = {}
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[2].isdigit():
                sizes[parts[0]] = int(parts[2])
        return sizes

    def blobs(self, blobs: set[str]) -> dict[str, bytes]:
        """Blob id -> content, for those that are in the repository."""
        if not blobs:
            return {}
        data, i, out = self._batch("--batch", sorted(blobs)), 0, {}
        while i < len(data):
            end = data.index(b"\n", i)
            header = data[i:end].split()
            i = end + 1
            if len(header) != 3:  # "<id> missing"
                continue
            size = int(header[2])
            out[header[0].decode()] = data[i:i + size]
            i += size + 1
        return out

    def patches(self, commits: list[str], pathspecs: list[str]) -> dict[str, bytes]:
        """Commit -> the unified diff of what it changed against its parent (empty when nothing within
        `pathspecs`), as `git diff --find-renames` prints it, for all of them in one process."""
        if not commits:
            return {}
        lines = "".join(f"{c}\n" for c in commits).encode()
        data = self._run(["diff-tree", "--stdin", "--always", "--root", "-p", "--no-color", "--no-ext-diff",
                          "--no-textconv", "--find-renames", "--", *pathspecs], lines)
        # Each commit's diff follows a line that is its id alone; no line of a diff is a bare id (they all
        # start with a space, +, -, @ or a word), so the next expected id splits them.
        out, pos = {}, 0
        for i, commit in enumerate(commits):
            head = commit.encode() + b"\n"
            if not data.startswith(head, pos):
                break
            start = pos + len(head)
            following = commits[i + 1].encode() + b"\n" if i + 1 < len(commits) else None
            end = data.find(b"\n" + following, start - 1) + 1 if following else len(data)
            if end <= 0:
                end = len(data)
            out[commit] = data[start:end]
            pos = end
        return out

    def _batch(self, how: str, names: list[str]) -> bytes:
        return self._run(["cat-file", how], "".join(f"{n}\n" for n in names).encode())

    def _run(self, args: list[str], stdin: bytes) -> bytes:
        with tempfile.TemporaryFile() as f:  # a file, not a pipe: git's output never waits for its input
            f.write(stdin)
            f.seek(0)
            return self.git.execute(["git", *args], istream=f, stdout_as_string=False, strip_newline_in_stdout=False)


def _commit(chunk: bytes) -> StepCommit | None:
    """One commit of `git log --raw -z --format=%x01%H %P%x00%s`: its ids, its subject, its raw changes."""
    parts = chunk.split(b"\0")
    ids = parts[0].decode().split()
    step = step_of_message(parts[1].decode("utf-8", "replace")) if len(parts) > 1 else None
    if not ids or step is None:
        return None
    entry = StepCommit(step, ids[0], ids[1] if len(ids) > 1 else None)
    fields = [p for p in parts[2:]]
    i = 0
    while i + 1 < len(fields):
        raw = fields[i].lstrip(b"\n")
        if not raw.startswith(b":"):
            i += 1
            continue
        _old_mode, _new_mode, old, new, status = raw[1:].decode().split()
        entry.changes.append(Change(status[:1], fields[i + 1].decode("utf-8", "surrogateescape"),
                                    None if old == NO_BLOB else old, None if new == NO_BLOB else new))
        i += 2
    return entry
