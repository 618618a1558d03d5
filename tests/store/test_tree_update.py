"""Checkpoints by what changed (store/tree_update.py, store/change_list.py): a step's tree made from the
host kernel's change list is the tree a full scan makes of the same workspace, whatever the step did;
and where the change list is broken (an overflow of events, a watch that could not start, a new process),
the step is a full scan, which catches what the list lost."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from orchestrator.store import change_list
from orchestrator.store.change_list import ChangeWatch
from orchestrator.store.checkpoints import Checkpoints, make_git
from orchestrator.store.tree_update import EMPTY_TREE

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/sys/fs/inotify"), reason="inotify is Linux's")


def _full_scan(cp: Checkpoints, tmp: Path, before: str | None = None) -> tuple[str, dict[str, str]]:
    """What a full scan makes of the workspace now, from an index of the tree `before` (what was tracked
    decides whether git looks into a folder that holds a repository), every file hashed again."""
    index = tmp / "scratch-index"
    index.unlink(missing_ok=True)
    scan = Checkpoints(cp.git_dir, cp.workspace, index=index)
    if before is not None:
        scan.git.read_tree(before)
    _changed, skipped = scan.stage()
    return scan.git.write_tree(), skipped


def _files(cp: Checkpoints, tree: str) -> dict[str, str]:
    out = make_git(cp.git_dir).ls_tree("-r", "-z", "--full-tree", tree)
    return {e.split("\t", 1)[1]: e.split("\t", 1)[0] for e in out.split("\0") if e}


@pytest.fixture
def watched(tmp_path):
    ws = tmp_path / "workspace"
    (ws / "src" / "pkg").mkdir(parents=True)
    (ws / "docs").mkdir()
    for i in range(5):
        (ws / "src" / "pkg" / f"m{i}.py").write_text(f"x = {i}\n")
    (ws / "docs" / "a.md").write_text("# a\n")
    (ws / "README").write_text("hello\n")
    watch = ChangeWatch([ws])
    cp = Checkpoints(tmp_path / "checkpoints.git", ws, changes=watch.subscribe())
    assert watch.start() is None
    cp.commit(0)  # the first checkpoint: the whole workspace, through git fast-import
    assert (cp._tree, cp.skipped()) == _full_scan(cp, tmp_path)
    yield cp, ws, tmp_path, watch
    watch.close()
    cp.close()


def _git_init(folder: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    subprocess.run(["git", "init", "-q", str(folder)], check=True, env=env)


STEPS = {
    "edit, add and remove files": lambda ws: (
        (ws / "src" / "pkg" / "m1.py").write_text("x = 'one'\n"), (ws / "docs" / "b.md").write_text("b\n"),
        (ws / "src" / "pkg" / "m2.py").unlink()),
    "a new folder tree, written before it could be watched": lambda ws: [
        (p.mkdir(parents=True), (p / "f.txt").write_text(str(p))) for p in
        (ws / "new" / "a" / "b", ws / "new" / "c")],
    "a folder renamed, one moved away, one replaced": lambda ws: (
        os.rename(ws / "new" / "a", ws / "renamed"), shutil.rmtree(ws / "new" / "c"),
        os.rename(ws / "docs", ws / "old-docs"), (ws / "docs").mkdir(), (ws / "docs" / "z.md").write_text("z\n")),
    "a file becomes a folder, a folder a file, a symlink": lambda ws: (
        (ws / "README").unlink(), (ws / "README").mkdir(), (ws / "README" / "inner").write_text("i\n"),
        shutil.rmtree(ws / "renamed"), (ws / "renamed").write_text("now a file\n"),
        os.symlink("src/pkg", ws / "link"), os.symlink("../nowhere", ws / "docs" / "dangling")),
    "modes, and a touch that changes no byte": lambda ws: (
        os.chmod(ws / "src" / "pkg" / "m3.py", 0o755), os.utime(ws / "src" / "pkg" / "m4.py")),
    "generated trees, a big file, a FIFO": lambda ws: (
        (ws / "web" / "node_modules" / "left-pad").mkdir(parents=True),
        (ws / "web" / "node_modules" / "left-pad" / "index.js").write_text("1\n"),
        (ws / "web" / "app.js").write_text("app\n"), (ws / "src" / "__pycache__").mkdir(),
        (ws / "only" / "deeper" / ".venv" / "bin").mkdir(parents=True), (ws / "only" / "deeper" / ".venv" / "bin" / "py").write_text("#\n"),
        (ws / "src" / "__pycache__" / "m.pyc").write_bytes(b"\0"),
        os.truncate(ws / "big.bin", 0) if (ws / "big.bin").exists() else open(ws / "big.bin", "wb").truncate(11 * 2**20),
        os.mkfifo(ws / "pipe")),
    "a nested repository, then files in it": lambda ws: (
        (ws / "vendor").mkdir(), _git_init(ws / "vendor"), (ws / "vendor" / "lib.c").write_text("int x;\n")),
    "the nested repository's .git removed: its files are the workspace's": lambda ws: (
        shutil.rmtree(ws / "vendor" / ".git"),),
    "a git init in a tracked folder, and the workspace's own .git": lambda ws: (
        _git_init(ws / "src"), (ws / "src" / "pkg" / "m0.py").write_text("x = 0.5\n"), _git_init(ws),
        (ws / ".GIT").mkdir(), (ws / ".GIT" / "x").write_text("never kept\n")),
    "generated trees and the big file go away": lambda ws: (
        shutil.rmtree(ws / "web" / "node_modules"), (ws / "big.bin").unlink(), (ws / "pipe").unlink()),
    "a folder out of the workspace, changed there, and back": lambda ws: (
        os.rename(ws / "old-docs", ws.parent / "outside"), (ws.parent / "outside" / "a.md").write_text("out\n"),
        (ws.parent / "outside" / "new.md").write_text("made outside\n"), os.rename(ws.parent / "outside", ws / "back")),
    "a folder removed and made again, with other files, in one step": lambda ws: (
        shutil.rmtree(ws / "back"), (ws / "back" / "deep" / "er").mkdir(parents=True),
        (ws / "back" / "deep" / "er" / "x.txt").write_text("x\n"), (ws / "empty" / "folders").mkdir(parents=True)),
    "odd names, a file named like a generated tree, a linked worktree's .git file": lambda ws: (
        (ws / "with space é\nnewline.txt").write_text("odd\n"), (ws / "node_modules").write_text("a file\n"),
        (ws / "wt").mkdir(), (ws / "wt" / "f").write_text("f\n"),
        (ws / "wt" / ".git").write_text(f"gitdir: {ws / 'vendor-repo' / '.git'}\n")),
    "the .git file now names a repository": lambda ws: (
        (ws / "vendor-repo").mkdir(), _git_init(ws / "vendor-repo"), (ws / "wt2").mkdir(),
        (ws / "wt2" / "g").write_text("g\n"), (ws / "wt2" / ".git").write_text("gitdir: ../vendor-repo/.git\n")),
    "the exec bit off, a file replaced by a symlink to itself's neighbour": lambda ws: (
        os.chmod(ws / "src" / "pkg" / "m3.py", 0o644), (ws / "src" / "pkg" / "m4.py").unlink(),
        os.symlink("m3.py", ws / "src" / "pkg" / "m4.py")),
}


def test_each_step_from_the_change_list_is_the_tree_a_full_scan_makes(watched):
    cp, ws, tmp, _watch = watched
    previous = cp._tree
    for step, (what, act) in enumerate(STEPS.items(), start=1):
        act(ws)
        done = cp.commit(step)
        tree = cp._tree
        expected, skipped = _full_scan(cp, tmp, previous)
        assert _files(cp, tree) == _files(cp, expected), what
        assert tree == expected, what
        assert cp.skipped() == skipped, what
        assert (done.commit is None) == (tree == previous), what
        previous = tree
    assert cp.full_scans == 0  # every step above came from the change list
    _restores_byte_for_byte(cp, tmp)


def _restores_byte_for_byte(cp: Checkpoints, tmp: Path) -> None:
    """The last commit, checked out into an empty folder (as `cairn resume --from-step` does), is the
    workspace: the same files, bytes, modes and symlinks, less what is skipped."""
    restored, index = tmp / "restored", tmp / "restore-index"
    restored.mkdir()
    g = make_git(cp.git_dir, restored)
    g.update_environment(GIT_INDEX_FILE=str(index))
    g.read_tree("--reset", "-u", cp.head())

    def listing(root: Path) -> dict[str, tuple[int, bytes]]:
        out = {}
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                out[rel] = (0o120000, os.readlink(path).encode())
            elif path.is_file() and not path.is_fifo():
                out[rel] = (path.stat().st_mode & 0o100, path.read_bytes())
        return out

    kept = set(_files(cp, cp._tree))
    assert listing(restored) == {rel: entry for rel, entry in listing(cp.workspace).items() if rel in kept}


def test_the_first_checkpoint_keeps_what_a_full_scan_keeps_and_fills_the_index_later(tmp_path):
    ws = tmp_path / "workspace"
    (ws / "sub" / "node_modules" / "x").mkdir(parents=True)
    (ws / "sub" / "node_modules" / "x" / "i.js").write_text("1\n")
    (ws / '"quoted" name').write_text("q\n")
    (ws / "new\nline").write_text("n\n")
    (ws / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(ws / "run.sh", 0o755)
    os.symlink("run.sh", ws / "link")
    os.mkfifo(ws / "pipe")
    open(ws / "big.bin", "wb").truncate(11 * 2**20)
    (ws / "repo").mkdir()
    _git_init(ws / "repo")
    cp = Checkpoints(tmp_path / "checkpoints.git", ws)
    cp.commit(0)
    assert (cp._tree, cp.skipped()) == _full_scan(cp, tmp_path)
    assert set(cp.skipped()) == {"sub/node_modules/", "big.bin", "repo/"}
    assert not (cp.git_dir / "index").exists() and cp.full_scans == 0
    cp.refresh_index()
    assert cp.git.ls_files("-z").split("\0")[:-1] == sorted(_files(cp, cp._tree))
    (ws / "run.sh").write_text("#!/bin/sh\necho changed\n")
    assert cp.commit(1).commit is not None and cp.full_scans == 1  # no change list: a full scan, from the index


def test_a_file_with_other_names_makes_the_step_a_full_scan(watched):
    cp, ws, tmp, _watch = watched
    os.link(ws / "README", ws / "also-readme")
    cp.commit(1)
    (ws / "README").write_text("changed through one name: the other changed too\n")
    cp.commit(2)
    assert cp.full_scans == 2
    assert cp._tree == _full_scan(cp, tmp)[0]
    assert _files(cp, cp._tree)["also-readme"] == _files(cp, cp._tree)["README"]


def test_an_overflow_of_events_loses_the_change_list_and_the_full_scan_catches_what_it_lost(watched):
    cp, ws, tmp, watch = watched
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    a, b = ws / "src" / "pkg" / "m0.py", ws / "src" / "pkg" / "m1.py"
    with watch.lock:  # the reader cannot empty the kernel's queue: it overflows
        for i in range(limit // 2 + 10):
            os.utime(a, (i, i))
            os.utime(b, (i, i))
        (ws / "lost.txt").write_text("its events were dropped\n")
        a.write_text("x = 'changed after the overflow'\n")
    done = cp.commit(1)
    assert cp.full_scans == 1  # the list was incomplete: this step was a full scan
    files = _files(cp, done.commit)
    assert "lost.txt" in files and cp._tree == _full_scan(cp, tmp)[0]
    (ws / "after.txt").write_text("seen again\n")  # the watch was set up again: the next step is a list's
    cp.commit(2)
    assert cp.full_scans == 1 and "after.txt" in _files(cp, cp._tree)


def test_a_watch_that_cannot_start_means_full_scans(tmp_path, monkeypatch):
    monkeypatch.setattr(change_list, "_LIBC", [None])  # as on a system without inotify
    ws = tmp_path / "workspace"
    ws.mkdir()
    watch = ChangeWatch([ws])
    cp = Checkpoints(tmp_path / "checkpoints.git", ws, changes=watch.subscribe())
    assert watch.start() == "no inotify on this system"
    cp.commit(0)
    (ws / "a.txt").write_text("a\n")
    assert "a.txt" in _files(cp, cp.commit(1).commit)
    assert cp.full_scans == 1


def test_a_new_process_scans_first_what_changed_while_nobody_watched(watched):
    cp, ws, tmp, watch = watched
    watch.close()
    (ws / "while-stopped.txt").write_text("made between two drives\n")
    again = ChangeWatch([ws])
    resumed = Checkpoints(cp.git_dir, ws, changes=again.subscribe())
    again.start()
    try:
        resumed.prepare()  # what a resumed drive does in the background
        (ws / "first-step.txt").write_text("the first step's work\n")
        done = resumed.commit(1)
        files = _files(resumed, done.commit)
        assert "while-stopped.txt" in files and "first-step.txt" in files
        assert resumed.full_scans == 1
    finally:
        again.close()
        resumed.close()



def test_a_first_scan_that_a_killed_cairn_left_behind_never_blocks_the_next_one(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("a\n")
    cp = Checkpoints(tmp_path / "checkpoints.git", workspace)
    cp.init()
    # What a scan leaves when its cairn is SIGKILLed after git wrote its commit: its ref (the name before
    # this change, and one with another process's id)
    stale = cp.git.commit_tree(EMPTY_TREE, "-m", "stale")
    for ref in ("refs/cairn/first-scan", "refs/cairn/first-scan-1"):
        cp.git.update_ref(ref, stale)
    assert cp.commit(0).commit is not None and list(_files(cp, cp._tree)) == ["a.txt"]
    assert list(cp.steps()) == [0]
