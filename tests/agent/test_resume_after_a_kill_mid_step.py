"""What a resume makes of a run that was killed mid-step, on the in-memory ports: the event log is cut
back to the moment of the kill (a sub-agent's log too) and the toolbox's journal (which LocalSandbox
writes where the Docker sandbox does, in the run's cairn/) says what became of the open call. The kills themselves, and the
toolbox journaling as it dies, are the sandbox's: tests/agent/test_exactly_once.py and tests/runs/test_survives_sigkill.py
do them for real, with the Docker sandbox and SIGKILL."""

from __future__ import annotations

import json
from typing import Any

import pytest

from orchestrator.sandbox.local.sandbox import LocalSandbox
from orchestrator.store import journal
from orchestrator.store.run_dir import RunDir
from tests.fake_loop import Outcome, call, done, play, resume, turn
from tests.runs.test_survives_sigkill import check_invariants

COMMAND = "echo ran >> ledger.txt; echo the-true-output"


@pytest.fixture(autouse=True)
def never_told(monkeypatch):
    """A run killed before it logged a call's result never told the toolbox it may drop the call's
    record (PROTOCOL.md, "The journal"): the runs played here keep every record, as the killed one would."""
    monkeypatch.setattr(LocalSandbox, "recorded", lambda self, journal_key: None)


def killed_after(outcome: Outcome, event_type: str) -> RunDir:
    """The run as a SIGKILL right after its first `event_type` event leaves it: the log ends there and
    run.json still says running."""
    run = outcome.run
    lines = (run.state / "events.jsonl").read_text().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if json.loads(line)["type"] == event_type)
    (run.state / "events.jsonl").write_text("".join(lines[:cut + 1]))
    run.write_meta({**run.read_meta(), "status": "running"})
    return run


def one_call_then_pause(tmp_path) -> Outcome:  # noqa: ANN001
    return play(tmp_path, [turn(call("shell_exec", command=COMMAND)), {"content": "pausing"}])


def raw_events(run: RunDir) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run.state / "events.jsonl").read_text().splitlines()]


def result_of(run: RunDir) -> dict[str, Any]:
    """The tool_finished event of the run's one shell_exec call."""
    [finished] = [e for e in raw_events(run) if e["type"] == "tool_finished" and e["name"] == "shell_exec"]
    return finished


def test_a_call_the_journal_saw_finish_gets_its_true_result_and_is_not_run_again(tmp_path):
    run = killed_after(one_call_then_pause(tmp_path), "tool_started")
    again = resume(Outcome(run, "running"), turns=[done("resumed")])
    assert again.status == "done"
    check_invariants(raw_events(run))
    finished = result_of(run)
    assert finished["content"].startswith("the-true-output\n[exit code 0, ") and not finished["error"]
    assert (run.workspace / "ledger.txt").read_text() == "ran\n", "not run again"
    assert "the-true-output" in json.dumps(again.requests[0]["messages"]), "the model sees the true result"


def test_a_call_whose_finish_record_is_torn_is_reported_killed(tmp_path):
    run = killed_after(one_call_then_pause(tmp_path), "tool_started")
    path = run.cairn_dir / journal.JOURNAL_NAME
    path.write_bytes(path.read_bytes()[:-20])  # as if the toolbox died while it wrote the finish record
    again = resume(Outcome(run, "running"), turns=[done()])
    assert again.status == "done"
    check_invariants(raw_events(run))
    finished = result_of(run)
    assert finished["content"].startswith("[killed: the run stopped while this command ran") and finished["error"]


def test_a_started_call_the_journal_does_not_know_is_not_executed(tmp_path):
    run = killed_after(one_call_then_pause(tmp_path), "tool_started")
    (run.workspace / "ledger.txt").unlink()
    (run.cairn_dir / journal.JOURNAL_NAME).write_text("")  # cairn died before the request reached the sandbox
    again = resume(Outcome(run, "running"), turns=[done()])
    assert again.status == "done"
    check_invariants(raw_events(run))
    assert result_of(run)["content"] == "not executed: the run stopped before this call reached the sandbox"
    assert not (run.workspace / "ledger.txt").exists(), "a call the sandbox never saw is not run on resume"


def test_a_model_answer_that_was_logged_is_not_asked_for_again(tmp_path):
    run = killed_after(one_call_then_pause(tmp_path), "assistant_message")
    (run.cairn_dir / journal.JOURNAL_NAME).write_text("")
    again = resume(Outcome(run, "running"), turns=[done("resumed")])
    assert again.status == "done"
    evs = raw_events(run)
    check_invariants(evs)
    assert result_of(run)["content"] == "not executed: the run stopped before this call"
    [request] = again.requests  # only step 2's: the answer of step 1 came from the log
    assert COMMAND in json.dumps(request["messages"])
    assert [e["step"] for e in evs if e["type"] == "model_request"] == [1, 2]


def test_a_model_call_cut_off_by_the_kill_is_asked_again_with_the_same_history(tmp_path):
    out = one_call_then_pause(tmp_path)
    run = out.run
    # A model_request is logged with its answer: killed while the model answered, the log ends at step 1.
    lines = (run.state / "events.jsonl").read_text().splitlines(keepends=True)
    second_request = [i for i, line in enumerate(lines) if json.loads(line)["type"] == "model_request"][1]
    (run.state / "events.jsonl").write_text("".join(lines[:second_request]))
    run.write_meta({**run.read_meta(), "status": "running"})
    again = resume(Outcome(run, "running"), turns=[done("resumed")])
    assert again.status == "done"
    check_invariants(raw_events(run))
    [asked] = again.requests
    assert asked["messages"][:-1] == out.requests[1]["messages"][:-1], "the same history bytes after the crash"
    assert "resumed in a new sandbox" in json.dumps(asked["messages"][-1])
    assert (run.workspace / "ledger.txt").read_text() == "ran\n", "step 1's finished call is not run again"


def test_a_sub_agent_killed_mid_task_goes_on_first_with_its_history_and_nothing_runs_twice(tmp_path):
    out = play(tmp_path, [turn(call("agent_delegate", task="append two lines to child.txt")),
                          turn(call("shell_exec", command="echo one >> child.txt")), {"content": "pausing"}, done()])
    run = killed_after(out, "tool_started")  # the parent, inside its agent_delegate call
    [child_dir] = run.state.glob("children/*")
    lines = (child_dir / "events.jsonl").read_text().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if json.loads(line)["type"] == "tool_finished")
    (child_dir / "events.jsonl").write_text("".join(lines[:cut + 1]))  # the child, asking its model again
    meta = json.loads((child_dir / "run.json").read_text())
    (child_dir / "run.json").write_text(json.dumps({**meta, "status": "running"}))

    again = resume(Outcome(run, "running"), message="then finish", turns=[
        turn(call("shell_exec", command="echo two >> child.txt")), done("appended both"), done("parent done")])
    assert again.status == "done"
    assert (run.workspace / "child.txt").read_text() == "one\ntwo\n", "nothing ran twice"
    first, *_, last = again.requests
    assert first["messages"][1]["content"] == "append two lines to child.txt", "the child went on first"
    assert "echo one >> child.txt" in json.dumps(first["messages"]), "with its history from before the kill"
    evs = raw_events(run)
    [finished] = [e for e in evs if e["type"] == "tool_finished" and e["name"] == "agent_delegate"]
    assert finished["child"]["status"] == "done" and finished["child"]["steps"] == 3
    assert finished["child"]["paths"] == [{"path": "child.txt", "change": "added"}]
    # The parent's next request: the call, its result right after it, then the person's message.
    delegating = next(i for i, m in enumerate(last["messages"]) if "agent_delegate" in json.dumps(m.get("tool_calls")))
    assert last["messages"][delegating + 1]["role"] == "tool"
    assert "appended both" in last["messages"][delegating + 1]["content"]
    assert last["messages"][delegating + 2] == {"role": "user", "content": "then finish"}
