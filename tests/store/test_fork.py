"""Forking a run at a step (orchestrator/store/fork.py, `cairn resume RUN --from-step N`): the fork's event
log is a byte-for-byte prefix of the source's, its workspace is that step's checkpoint, and run.json names
where it came from. On the in-memory ports: no engine needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import UsageError
from orchestrator.store.fork import fork_run, plan_fork
from tests.fake_loop import call, done, play, turn


def three_steps(tmp_path: Path):
    return play(tmp_path, [
        turn(call("file_write", path="a.txt", content="one\n")),
        turn(call("file_write", path="a.txt", content="two\n")),
        turn(call("ask_user", question="Which greeting?")),
    ])


def test_the_fork_keeps_the_log_up_to_the_step_and_the_workspace_of_that_step(tmp_path: Path) -> None:
    source = three_steps(tmp_path).run
    fork = fork_run(plan_fork(source, 1), tmp_path / "runs")
    assert fork.id != source.id
    assert (fork.workspace / "a.txt").read_text() == "one\n"
    source_lines = source.events.path.read_bytes().split(b"\n")
    fork_lines = fork.events.path.read_bytes().split(b"\n")[:-1]
    kept = fork_lines[:-2]  # the fork adds its notice and its status
    assert kept == source_lines[:len(kept)]
    meta = fork.read_meta()
    assert meta["forked_from"] == {"run": source.id, "step": 1} and meta["status"] == "interrupted"
    events, _torn = fork.events.read()
    assert events[-2].type == "notice" and f"forked from run {source.id} at step 1" in events[-2].text
    assert max(e.step for e in events) == 1


def test_a_fork_at_the_step_that_asked_the_person_waits_with_the_question(tmp_path: Path) -> None:
    source = three_steps(tmp_path).run
    fork = fork_run(plan_fork(source, 3), tmp_path / "runs")
    meta = fork.read_meta()
    assert meta["status"] == "waiting" and meta["result"] == "Which greeting?"
    assert (fork.workspace / "a.txt").read_text() == "two\n"


def test_the_source_is_left_as_it_was(tmp_path: Path) -> None:
    source = three_steps(tmp_path).run
    before = source.events.path.read_bytes()
    fork_run(plan_fork(source, 2), tmp_path / "runs")
    assert source.events.path.read_bytes() == before
    assert (source.workspace / "a.txt").read_text() == "two\n"


def test_a_step_the_run_never_reached_is_a_clear_error(tmp_path: Path) -> None:
    source = play(tmp_path, [turn(call("file_write", path="a.txt", content="x")), done()]).run
    with pytest.raises(UsageError, match="has steps 0 to 2; there is no step 9"):
        plan_fork(source, 9)
