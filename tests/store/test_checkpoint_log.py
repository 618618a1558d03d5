"""A run's checkpoints read in one pass (store/checkpoint_log.py): what each step changed, the blobs, and
every step's diff from one git process, the same as `git diff` of each step alone."""

from __future__ import annotations

from pathlib import Path

from orchestrator.store.checkpoint_log import CheckpointLog
from orchestrator.store.checkpoints import Checkpoints, make_git


def _steps(tmp_path: Path) -> tuple[Checkpoints, Path]:
    ws = tmp_path / "workspace"
    ws.mkdir()
    (ws / "todo.md").write_text("- [ ] one\n")
    cp = Checkpoints(tmp_path / "checkpoints.git", ws)
    cp.commit(0)
    (ws / "a.txt").write_text("a\n")
    cp.commit(1)
    assert cp.commit(2).commit is None  # a step that changed nothing has no commit
    (ws / "a.txt").write_text("a\nb\n")
    (ws / "todo.md").write_text("- [x] one\n")
    (ws / "sub").mkdir()
    (ws / "sub" / "c.bin").write_bytes(b"\0\1\2")
    cp.commit(3)
    (ws / "a.txt").unlink()
    (ws / "a.md").write_text("a\nb\n")  # the same content under another name: a rename for the diff
    cp.commit(4)
    return cp, ws


def test_the_log_names_each_steps_commit_and_what_it_changed(tmp_path):
    cp, _ = _steps(tmp_path)
    log = CheckpointLog.read(cp.git_dir)
    assert [c.step for c in log.commits] == [0, 1, 3, 4]
    assert {c.step: c.commit for c in log.commits} == cp.steps()
    assert log.commits[0].parent is None and log.commits[1].parent == log.commits[0].commit
    assert [(ch.status, ch.path) for ch in log.commits[0].changes] == [("A", "todo.md")]
    assert sorted((ch.status, ch.path) for ch in log.commits[2].changes) == [
        ("A", "sub/c.bin"), ("M", "a.txt"), ("M", "todo.md")]
    assert sorted((ch.status, ch.path) for ch in log.commits[3].changes) == [("A", "a.md"), ("D", "a.txt")]
    assert log.at(2).step == 1 and log.at(3).step == 3 and log.at(99).step == 4 and log.at(-1) is None


def test_blobs_are_read_all_at_once(tmp_path):
    cp, _ = _steps(tmp_path)
    log = CheckpointLog.read(cp.git_dir)
    added = {ch.path: ch.new for c in log.commits for ch in c.changes if ch.new}
    contents = log.blobs(set(added.values()) | {"0" * 39 + "1"})  # one that is not there is left out
    assert contents[added["sub/c.bin"]] == b"\0\1\2" and contents[added["a.md"]] == b"a\nb\n"
    assert log.blob_sizes({added["a.md"]}) == {added["a.md"]: 4}


def test_every_steps_diff_from_one_process_is_what_git_diff_gives_for_the_step(tmp_path):
    cp, _ = _steps(tmp_path)
    log = CheckpointLog.read(cp.git_dir)
    later = [c for c in log.commits if c.parent]
    patches = log.patches([c.commit for c in later], [":(exclude,top).cairn"])
    g = make_git(cp.git_dir)
    for c in later:
        alone = g.execute(["git", "diff", "--no-color", "--no-ext-diff", "--no-textconv", "--find-renames", c.parent,
                           c.commit, "--", ":(exclude,top).cairn"], stdout_as_string=False, strip_newline_in_stdout=False)
        assert patches[c.commit] == alone
    assert b"rename from a.txt" in patches[later[-1].commit]


def test_a_run_without_checkpoints_has_no_log(tmp_path):
    assert CheckpointLog.read(tmp_path / "nothing.git") is None
    cp = Checkpoints(tmp_path / "empty.git", tmp_path)
    cp.init()
    assert CheckpointLog.read(cp.git_dir) is None
