"""The first checkpoint off the critical path (runs/first_checkpoint.py): the first model request goes out
while step 0 is being taken; no tool call runs before it is; step 0 is in the log before step 1; a long
one is said on screen. On the in-memory ports: no engine needed."""

from __future__ import annotations

import json
import time
from typing import Any

from orchestrator.api import Agent
from orchestrator.runs import first_checkpoint
from orchestrator.store.checkpoints import Checkpoints, make_git
from orchestrator.store.run_dir import RunDir
from orchestrator.testing import LocalSandbox, ScriptedModel
from tests.loop_helpers import call, done, turn

SLOW = 1.5  # seconds the first checkpoint is made to take


def test_the_first_request_goes_out_while_step_0_is_taken_and_no_call_runs_before_it(tmp_path, monkeypatch):
    taken: list[float] = []
    first_tree = Checkpoints._first_tree

    def slow_first_tree(self):  # noqa: ANN001, ANN202
        time.sleep(SLOW)  # a big workspace
        out = first_tree(self)
        taken.append(time.monotonic())
        return out

    said: list[str] = []
    monkeypatch.setattr(Checkpoints, "_first_tree", slow_first_tree)
    monkeypatch.setattr(first_checkpoint, "SAY_AFTER", 0.5)
    monkeypatch.setattr(first_checkpoint, "progress", said.append)
    model = ScriptedModel({"turns": [turn(call("file_write", path="made.txt", content="step 1\n")), done()]})
    asked: list[float] = []
    complete = model.complete
    model.complete = lambda *a, **k: asked.append(time.monotonic()) or complete(*a, **k)
    sandbox = LocalSandbox()
    try:
        result = Agent(model, sandbox, runs_dir=tmp_path / "runs").run("make a file")
    finally:
        sandbox.stop()
    assert result.status == "done"
    assert asked[0] < taken[0]  # the first request did not wait for step 0

    run = RunDir(result.run_dir)
    events = [json.loads(line) for line in run.events.path.read_text().splitlines()]
    steps = [e["step"] for e in events]
    assert steps == sorted(steps)  # step 0's checkpoint is in the log before anything of step 1
    first = next(i for i, e in enumerate(events) if e["type"] == "checkpoint")
    assert events[first]["step"] == 0 and events[first]["commit"]
    started = next(e for e in events if e["type"] == "tool_started")
    assert started["ts"] >= events[first]["ts"]  # the call that changed the workspace came after it
    files = make_git(run.state / "checkpoints.git").ls_tree("-r", "--name-only", "refs/cairn/step-0").split()
    assert "made.txt" not in files  # step 0 is the workspace as the run started
    assert any("first checkpoint" in line and "while the model is asked" in line for line in said), said
    assert any(line.startswith("step 1 waits for the workspace's first checkpoint") for line in said), said


def _run(tmp_path, turns, on_event=None):  # noqa: ANN001, ANN202
    sandbox = LocalSandbox()
    try:
        result = Agent(ScriptedModel({"turns": turns}), sandbox, runs_dir=tmp_path / "runs",
                       on_event=on_event).run("make a file")
    finally:
        sandbox.stop()
    run = RunDir(result.run_dir)
    return result, run, [json.loads(line) for line in run.events.path.read_text().splitlines()]


def test_a_first_checkpoint_that_fails_is_a_notice_before_step_1_and_said_on_screen(tmp_path, monkeypatch):
    first_tree, failed = Checkpoints._first_tree, []

    def broken_once(self):  # noqa: ANN001, ANN202
        if not failed:
            failed.append(True)
            raise OSError("the disk is gone")
        return first_tree(self)

    shown: list[Any] = []
    monkeypatch.setattr(Checkpoints, "_first_tree", broken_once)
    result, run, events = _run(tmp_path, [turn(call("file_write", path="made.txt", content="x\n")), done()],
                               on_event=shown.append)
    assert result.status == "done"  # a checkpoint is never the end of the run
    notice = next(i for i, e in enumerate(events) if e["type"] == "notice" and "step 0" in e["text"])
    assert events[notice]["step"] == 0 and "the disk is gone" in events[notice]["text"]
    assert all(e["step"] == 0 for e in events[:notice])  # before anything of step 1
    assert any(e.type == "notice" and "the disk is gone" in e.text for e in shown)  # on the display too
    step_1 = make_git(run.state / "checkpoints.git").ls_tree("-r", "--name-only", "refs/cairn/step-1").split()
    assert "made.txt" in step_1  # the next step's checkpoint is whole (a full scan)


def test_a_watch_that_cannot_start_is_said_once_and_the_steps_are_full_scans(tmp_path, monkeypatch):
    from orchestrator.store import change_list

    said: list[str] = []
    monkeypatch.setattr(change_list, "_libc", lambda: None)  # as where there is no inotify
    monkeypatch.setattr(first_checkpoint, "progress", said.append)
    result, run, events = _run(tmp_path, [turn(call("file_write", path="a.txt", content="1\n")),
                                          turn(call("file_write", path="sub/b.txt", content="2\n")), done()])
    assert result.status == "done"
    watch_lines = [line for line in said if "cannot be watched" in line]
    assert len(watch_lines) == 1 and "no inotify on this system" in watch_lines[0], said
    git = make_git(run.state / "checkpoints.git")
    assert {"a.txt", "sub/b.txt"} <= set(git.ls_tree("-r", "--name-only", "refs/cairn/step-2").split())
    assert "sub/b.txt" not in git.ls_tree("-r", "--name-only", "refs/cairn/step-1").split()
    assert git.show("refs/cairn/step-2:sub/b.txt") == "2"


def test_a_drive_that_ends_before_step_1_does_not_wait_for_step_0_and_the_next_drive_takes_it(tmp_path, monkeypatch):
    monkeypatch.setattr(Checkpoints, "_first_scan_command", lambda self: ["sh", "-c", "sleep 60"])  # a huge workspace
    model = ScriptedModel({"turns": [{"fail": 401}, turn(call("file_write", path="made.txt", content="x\n")), done()]})
    sandbox = LocalSandbox()
    agent = Agent(model, sandbox, runs_dir=tmp_path / "runs")
    try:
        started = time.monotonic()
        failed = agent.run("make a file")
        assert failed.status == "failed" and time.monotonic() - started < 30  # not the first scan's minute
        run = RunDir(failed.run_dir)
        events = [json.loads(line) for line in run.events.path.read_text().splitlines()]
        assert not [e for e in events if e["type"] == "checkpoint" or "step 0" in e.get("text", "")]
        monkeypatch.undo()
        resumed = agent.resume("go on")
    finally:
        sandbox.stop()
    assert resumed.status == "done"
    events = [json.loads(line) for line in run.events.path.read_text().splitlines()]
    assert [e["step"] for e in events] == sorted(e["step"] for e in events)
    assert [e["step"] for e in events if e["type"] == "checkpoint"][:1] == [0]  # taken by the second drive
    step_0 = make_git(run.state / "checkpoints.git").ls_tree("-r", "--name-only", "refs/cairn/step-0").split()
    assert "made.txt" not in step_0
