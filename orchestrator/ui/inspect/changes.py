"""What a run changed in its workspace, read from its checkpoints: `cairn diff` and `cairn files`.

Reads only `state/checkpoints.git` (never the live workspace), and imports no model library.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.errors import UsageError
from orchestrator.store.checkpoints import BRANCH, Checkpoints, make_git, step_of_message
from orchestrator.store.run_dir import RunDir
from orchestrator.ui.terminal import clean_name

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"  # git's empty tree: the base of step 0


def _checkpoints(run: RunDir) -> tuple[Checkpoints, dict[int, str]]:
    cp = Checkpoints.of(run)
    steps = cp.steps()
    if not steps:
        raise UsageError(f"run {run.id} has no checkpoints (it was made by a cairn without them)")
    return cp, steps


# cairn's own files in a workspace (saved outputs, fetched pages, summaries, the inbox): left out of
# `cairn diff` unless --all. The one place that says which they are, as a git pathspec.
CAIRN_OWN = [":(exclude,top).cairn"]


def diff(run: RunDir, step: int | None = None, paths: list[str] | None = None, everything: bool = False,
         stat: bool = False, stat_width: int | None = None) -> str:
    """A unified diff (or with `stat` git's diffstat): what step `step` changed, or with no step the
    whole run (first to last checkpoint), limited to `paths` (relative to the workspace) when given,
    without cairn's own files unless `everything`. Binary files are named, not shown. Empty when
    nothing changed. Never coloured by git: the patch holds the run's own bytes, which a terminal must get
    cleaned before cairn colours it (orchestrator/ui/terminal.py)."""
    pathspecs = _pathspecs(paths) + ([] if everything else CAIRN_OWN)
    cp, steps = _checkpoints(run)
    if step is None:
        before, after = steps[min(steps)], steps[max(steps)]
    else:
        last = last_step(run, steps)
        if not 0 <= step <= last:
            raise UsageError(f"run {run.id} has no step {step}: its steps are 0 to {last}")
        after = cp.commit_at(step, steps)
        if after is None:
            raise UsageError(f"run {run.id} has no checkpoint at or before step {step}")
        before = cp.commit_at(step - 1, steps) or EMPTY_TREE
    if before == after:
        return ""
    how = [f"--stat={stat_width or 1000}"] if stat else []
    return make_git(cp.git_dir).diff(
        "--no-color", "--no-ext-diff", "--no-textconv", "--find-renames", *how,
        before, after, "--", *pathspecs)


def commit_changes(run: RunDir, commit: str) -> list[tuple[str, str]]:
    """What one checkpoint commit changed against the one before it: ("+", path) added, ("~", path)
    modified, ("-", path) removed, without cairn's own files. `cairn watch` puts these under their step."""
    cp = Checkpoints.of(run)
    out = make_git(cp.git_dir).diff_tree("-r", "-z", "--name-status", "--no-renames", "--no-commit-id",
                                         commit, "--", *CAIRN_OWN)
    fields = out.split("\0")
    marks = {"A": "+", "M": "~", "D": "-", "T": "~"}
    return [(marks.get(kind[:1], "~"), path) for kind, path in zip(fields[::2], fields[1::2]) if kind]


def _pathspecs(paths: list[str] | None) -> list[str]:
    """The path arguments of `cairn diff RUN -- PATH...`, relative to the workspace (`src/`, `./src` and
    `/workspace/src` name the same folder); git's wildcards work in them."""
    out = []
    for raw in paths or []:
        path = raw
        if path == "/workspace" or path.startswith("/workspace/"):
            path = path[len("/workspace"):].lstrip("/")
        if path.startswith("/"):
            raise UsageError(f"{raw}: give a path relative to the workspace (as `cairn files` lists them)")
        if ".." in Path(path).parts:
            raise UsageError(f"{raw}: a path in the workspace has no '..'")
        out.append(f":(top){path or '.'}")
    return out


def last_step(run: RunDir, steps: dict[int, str]) -> int:
    """The run's last step: the newest in its log (a step that changed nothing has no checkpoint)."""
    events, _torn = run.events.read()
    return max([max(steps), *(getattr(e, "step", 0) or 0 for e in events)])


def files(run: RunDir) -> dict[str, Any]:
    """The files of the last checkpoint, each with its size and the step that last changed it, and the
    paths that checkpoints skip (generated trees, files over 10 MiB, nested repositories)."""
    cp, steps = _checkpoints(run)
    g = make_git(cp.git_dir)
    last_changed: dict[str, int] = {}
    for chunk in g.log("-z", "--name-only", "--no-renames", "--root", "--format=%x01%s", BRANCH).split("\x01"):
        if not chunk:
            continue
        subject, *paths = chunk.split("\0")
        number = step_of_message(subject)
        for path in paths:
            path = path.lstrip("\n")
            if path and number is not None:
                last_changed.setdefault(path, number)  # newest first: the first sighting is the last change
    rows = []
    for entry in g.ls_tree("-r", "-l", "-z", "--full-tree", BRANCH).split("\0"):
        if not entry:
            continue
        info, path = entry.split("\t", 1)
        mode, kind, _sha, size = info.split()
        rows.append({"path": path, "size": int(size) if size.isdigit() else None, "step": last_changed.get(path),
                     "symlink": mode == "120000"})
    skipped = [{"path": p, "reason": r} for p, r in sorted(cp.skipped().items())]
    return {"id": run.id, "last_checkpoint_step": max(steps), "files": rows, "skipped": skipped}


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "K", "M", "G"):
        if n < 1024 or unit == "G":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return str(n)


def render_files(doc: dict[str, Any]) -> str:
    """The table of `cairn files`; a file name is the agent's, so it is cleaned for the terminal."""
    lines = [f"{'step':>5} {'size':>8}  path"]
    for row in doc["files"]:
        step = "-" if row["step"] is None else str(row["step"])
        lines.append(f"{step:>5} {_size(row['size']):>8}  {clean_name(row['path'])}" + ("  (symlink)" if row["symlink"] else ""))
    for row in doc["skipped"]:
        lines.append(f"{'-':>5} {'-':>8}  {clean_name(row['path'])}  (skipped: {row['reason']})")
    lines.append(f"{len(doc['files'])} files as of step {doc['last_checkpoint_step']}"
                 + (f"; {len(doc['skipped'])} skipped" if doc["skipped"] else ""))
    return "\n".join(lines)
