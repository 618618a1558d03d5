"""Checkpoints of the workspace (one git commit per step), `cairn files`, `cairn diff`, and forking a run
from a step with `cairn resume --from-step`."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.store.checkpoints import Checkpoints, make_git
from tests import fake_loop
from tests.loop_helpers import call, done, play, turn

docker = pytest.mark.docker


def _cp(tmp_path: Path) -> tuple[Checkpoints, Path]:
    ws = tmp_path / "workspace"
    ws.mkdir()
    (ws / "todo.md").write_text("- [ ] start\n")
    cp = Checkpoints(tmp_path / "state" / "checkpoints.git", ws)
    cp.commit(0)
    return cp, ws


def _tree(cp: Checkpoints, commit: str) -> dict[str, str]:
    out = make_git(cp.git_dir).ls_tree("-r", "-z", "--full-tree", commit)
    return {e.split("\t", 1)[1]: e.split()[2] for e in out.split("\0") if e}


def _show(cp: Checkpoints, commit: str, path: str) -> str:
    return make_git(cp.git_dir).show(f"{commit}:{path}")


def _git(ws: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=ws, env=env,
                          check=True, capture_output=True, text=True).stdout


def _cli(*args: str) -> str:
    result = CliRunner().invoke(app, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


# -- the checkpoints themselves (no sandbox needed) ----------------------------------------------------


def test_a_step_that_writes_a_file_makes_a_commit_whose_tree_has_it(tmp_path):
    cp, ws = _cp(tmp_path)
    (ws / "src").mkdir()
    (ws / "src" / "app.py").write_text("print('hi')\n")
    result = cp.commit(1)
    assert result.commit is not None
    assert cp.steps()[1] == result.commit
    assert _show(cp, result.commit, "src/app.py") == "print('hi')"
    assert "todo.md" in _tree(cp, result.commit)


def test_a_step_that_changes_nothing_makes_no_commit(tmp_path):
    cp, ws = _cp(tmp_path)
    (ws / "a.txt").write_text("a\n")
    first = cp.commit(1).commit
    os.utime(ws / "a.txt")  # touched, same content
    assert cp.commit(2).commit is None
    assert sorted(cp.steps()) == [0, 1] and cp.head() == first
    assert cp.commit_at(2) == first  # step 2's workspace is step 1's


def test_big_files_and_node_modules_are_skipped_and_recorded(tmp_path):
    cp, ws = _cp(tmp_path)
    (ws / "web" / "node_modules" / "left-pad").mkdir(parents=True)
    (ws / "web" / "node_modules" / "left-pad" / "index.js").write_text("module.exports = 1\n")
    (ws / "web" / "app.js").write_text("require('left-pad')\n")
    with open(ws / "data.bin", "wb") as f:
        f.truncate(11 * 1024 * 1024)
    result = cp.commit(1)
    assert set(result.skipped) == {"web/node_modules/", "data.bin"}
    assert set(_tree(cp, result.commit)) == {"todo.md", "web/app.js"}
    assert cp.commit(2).skipped == []  # named once, not at every step
    assert set(cp.skipped()) == {"web/node_modules/", "data.bin"}


def test_the_workspaces_own_git_is_untouched(tmp_path):
    cp, ws = _cp(tmp_path)
    _git(ws, "init", "-q")
    (ws / "main.py").write_text("x = 1\n")
    _git(ws, "add", "main.py")
    _git(ws, "commit", "-q", "-m", "agent's commit")
    (ws / "main.py").write_text("x = 2\n")  # modified in the work tree, not staged
    status = _git(ws, "status", "--porcelain")  # (may refresh the agent's index: read it after)
    head, index = _git(ws, "rev-parse", "HEAD"), (ws / ".git" / "index").read_bytes()
    result = cp.commit(1)
    assert _git(ws, "rev-parse", "HEAD") == head and (ws / ".git" / "index").read_bytes() == index
    assert " M main.py" in status and _git(ws, "status", "--porcelain") == status
    assert not any(p.startswith(".git/") for p in _tree(cp, result.commit))
    assert _show(cp, result.commit, "main.py") == "x = 2"
    assert cp.git_dir.resolve() != (ws / ".git").resolve() and not str(cp.git_dir).startswith(str(ws))


# -- end to end: a scripted model on the in-memory ports, and in the real sandbox for a fork --------


def _three_steps(tmp_path, play=play):
    return play(tmp_path, [
        turn(call("file_write", path="a.txt", content="one\n")),
        turn(call("file_write", path="b.txt", content="bee\n")),
        turn(call("file_edit", path="a.txt", old="one", new="two")),
        done(),
    ])


# `files` and `diff` read the checkpoints, which the host makes after each step: the in-memory ports do.
def test_files_shows_the_step_that_last_changed_a_file(tmp_path):
    out = _three_steps(tmp_path, fake_loop.play)
    assert out.status == "done"
    doc = json.loads(_cli("files", out.run.id, "--json", "--runs-dir", str(out.run.root.parent)))
    steps = {row["path"]: row["step"] for row in doc["files"]}
    assert steps["a.txt"] == 3 and steps["b.txt"] == 2 and steps["todo.md"] == 0
    assert {row["path"]: row["size"] for row in doc["files"]}["a.txt"] == 4


def test_diff_of_a_step_shows_exactly_that_steps_change(tmp_path):
    out = _three_steps(tmp_path, fake_loop.play)
    text = _cli("diff", out.run.id, "--step", "3", "--runs-dir", str(out.run.root.parent))
    assert "diff --git a/a.txt b/a.txt" in text and "-one\n+two" in text
    assert "b.txt" not in text and "todo.md" not in text
    whole = _cli("diff", out.run.id, "--runs-dir", str(out.run.root.parent))
    assert "+two" in whole and "+bee" in whole


@docker
def test_resume_from_a_step_forks_a_run_that_goes_on_to_done(tmp_path, sandbox_image, monkeypatch):
    out = _three_steps(tmp_path)
    runs = out.run.root.parent
    script = tmp_path / "fork-script.json"
    script.write_text(json.dumps({"turns": [
        turn(call("shell_exec", command="cat a.txt; ls")),
        done("fork done"),
    ]}))
    log = tmp_path / "fork-requests.jsonl"
    monkeypatch.setenv("CAIRN_SCRIPTED_LOG", str(log))
    result = CliRunner().invoke(app, ["resume", out.run.id, "--from-step", "1", "--model", f"scripted:{script}",
                                      "--runs-dir", str(runs)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    fork_id = result.stdout.split()[0]
    from orchestrator.store.run_dir import RunDir

    fork, source = RunDir.find(runs, fork_id), out.run
    assert fork.read_meta()["forked_from"] == {"run": source.id, "step": 1}
    assert fork.read_meta()["status"] == "done"
    # Its history is the source's, byte for byte, up to the end of step 1.
    src_lines = source.events.path.read_bytes().splitlines()
    fork_lines = fork.events.path.read_bytes().splitlines()
    fork_events = fork.events.read()[0]
    cut = next(i for i, e in enumerate(fork_events) if e.type == "notice" and "forked from" in e.text)
    assert fork_lines[:cut] == src_lines[:cut]
    assert all(e.step <= 1 for e in fork_events[:cut]) and fork_events[cut - 1].type in ("checkpoint", "tool_finished")
    assert source.events.read()[0][cut].step == 2  # the source went on where the fork stopped
    # Its workspace was step 1's: a.txt as first written, no b.txt.
    first_request = json.loads(log.read_text().splitlines()[1])
    assert "one" in first_request["messages"][-2]["content"] and "b.txt" not in first_request["messages"][-2]["content"]
    assert (fork.workspace / "a.txt").read_text() == "one\n" and not (fork.workspace / "b.txt").exists()
    assert Checkpoints.of(fork).steps()[1] == Checkpoints.of(source).steps()[1]
    assert 2 not in Checkpoints.of(fork).steps()  # the source's later steps are not the fork's


def test_the_store_is_packed_as_the_run_goes_and_reads_the_same(tmp_path, monkeypatch):
    from orchestrator.store import checkpoints
    from orchestrator.store.checkpoint_log import CheckpointLog

    monkeypatch.setattr(checkpoints, "LOOSE_OBJECTS", 10)
    monkeypatch.setattr(checkpoints, "PACK_CHECK_EVERY", 4)
    cp, ws = _cp(tmp_path)
    for step in range(1, 41):
        (ws / f"f{step % 7}.txt").write_text(f"step {step}\n")
        cp.commit(step)
    assert checkpoints.loose_objects(cp.git_dir) <= 10 + 4 * 4  # at most a few steps' objects since the last pack
    assert list((cp.git_dir / "objects" / "pack").glob("*.pack")) and (cp.git_dir / "packed-refs").is_file()
    assert sorted(cp.steps()) == list(range(41)) and len(CheckpointLog.read(cp.git_dir).commits) == 41
    assert _show(cp, cp.commit_at(39), "f4.txt") == "step 39"
    assert not (cp.git_dir / "info").exists()  # nothing git would serve to a dumb transport
