"""Calls of one answer that cannot interfere run at once (orchestrator/agent/parallel.py): consecutive
file_read and web_fetch calls, and consecutive agent_delegate calls. Their results come back in the order
of the calls, each logged once; approvals are asked one call at a time before any of them runs; the rest
runs one call after the other, as before.

On the in-memory ports (no Docker): the loop, the event log, the toolbox's journal and sub-agents are the
real ones. With the Docker sandbox and a kill -9: tests/agent/test_exactly_once.py. How much faster:
bench/parallel_calls.py.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from orchestrator import events as ev
from orchestrator.agent.loop import Loop
from orchestrator.agent.parallel import groups
from orchestrator.api import Agent
from orchestrator.config import RunConfig
from orchestrator.llm.types import ToolCall
from orchestrator.ports import Answer, Question
from orchestrator.runs.new_run import create_run
from orchestrator.store.run_dir import RunDir
from orchestrator.testing import LocalSandbox, ScriptedModel
from tests.agent.test_resume_after_a_kill_mid_step import raw_events
from tests.agents_by_task import ByTask
from tests.fake_loop import Outcome, call, done, turn
from tests.runs.test_survives_sigkill import check_invariants

TASK = "the parent's task"


def played(tmp_path: Path, model: Any, settings: dict[str, Any] | None = None, task: str = TASK) -> Outcome:
    sandbox = LocalSandbox()
    agent = Agent(model, sandbox, runs_dir=tmp_path / "runs", settings=settings or {})
    try:
        result = agent.run(task)
    finally:
        sandbox.stop()
    return Outcome(RunDir(result.run_dir), result.status)


def test_which_calls_go_together():
    names = ["file_read", "web_fetch", "shell_exec", "file_read", "agent_delegate", "agent_delegate", "file_read",
             "todo_write", "agent_delegate"]
    calls = [(ToolCall(id=f"c{i}", name=name, arguments="{}"), None) for i, name in enumerate(names)]
    assert [[c.id for c, _ in group] for group in groups(calls)] == [
        ["c0", "c1"], ["c2"], ["c3"], ["c4", "c5"], ["c6"], ["c7"], ["c8"]]


def test_reads_in_one_answer_start_together_and_their_results_come_back_in_order(tmp_path):
    reads = [call("file_read", path=f"{name}.txt") for name in ("a", "b", "c")]
    model = ScriptedModel({"turns": [
        turn(*(call("file_write", path=f"{name}.txt", content=f"text of {name}\n") for name in ("a", "b", "c"))),
        turn(*reads, call("shell_exec", command="cat a.txt"), reads[2]),
        done()]})
    out = played(tmp_path, model, {"context": {"vary_framing": False}})  # each result as the tool gave it
    assert out.status == "done"
    step2 = [e for e in raw_events(out.run) if e.get("step") == 2 and e["type"].startswith("tool_")]
    # The three reads begin before any ends (the display shows them running together); the shell
    # command after them waits for them, and the read after it runs alone.
    assert [(e["type"], e["name"]) for e in step2] == [
        ("tool_started", "file_read")] * 3 + [("tool_finished", "file_read")] * 3 + [
        ("tool_started", "shell_exec"), ("tool_finished", "shell_exec"),
        ("tool_started", "file_read"), ("tool_finished", "file_read")]
    finished = [e for e in step2 if e["type"] == "tool_finished"]
    assert [e["content"] for e in finished] == ["text of a", "text of b", "text of c",
                                               "text of a\n[exit code 0, " + finished[3]["content"].split(", ", 1)[1],
                                               "text of c"]
    messages = model.requests[-1]["messages"]
    results = [m["content"] for m in messages if m["role"] == "tool"][3:]
    assert results[:3] == ["text of a", "text of b", "text of c"], "back in the order of the calls"
    check_invariants(raw_events(out.run))
    # Each call's records went from the journal once it was logged, the three reads' with the command's
    # start: the journal holds the last call alone.
    records = [json.loads(line) for line in (out.run.cairn_dir / "journal.jsonl").read_text().splitlines()]
    assert [r["state"] for r in records] == ["started", "finished"] and records[0]["op"] == "read"


def test_two_sub_agents_of_one_answer_work_side_by_side(tmp_path):
    model = ByTask({
        TASK: [turn(call("agent_delegate", task="write a.txt"), call("agent_delegate", task="write b.txt")),
               done("both written")],
        "write a.txt": [turn(call("file_write", path="a.txt", content="A\n")), done("a written")],
        "write b.txt": [turn(call("file_write", path="b.txt", content="B\n")), done("b written")],
    }, delay=0.2)
    out = played(tmp_path, model)
    assert out.status == "done"
    assert (out.run.workspace / "a.txt").read_text() == "A\n" and (out.run.workspace / "b.txt").read_text() == "B\n"
    firsts = {task: (began, ended) for task, began, ended in reversed(model.asked)}  # each child's first request
    a, b = firsts["write a.txt"], firsts["write b.txt"]
    assert a[0] < b[1] and b[0] < a[1], "the two children asked their model at the same time"
    evs = raw_events(out.run)
    check_invariants([e for e in evs if not (e["type"] == "model_request" and e.get("child"))])
    finished = [e for e in evs if e["type"] == "tool_finished"]
    assert [e["child"]["status"] for e in finished[:2]] == ["done", "done"]
    assert "a written" in finished[0]["content"] and "b written" in finished[1]["content"], "in the order of the calls"
    assert "a.txt" in [p["path"] for p in finished[0]["child"]["paths"]]
    assert "other sub-agents worked beside it: these paths may hold what they changed too" in finished[0]["content"]
    # Each child's own log, and its usage in the parent's totals, once each.
    assert sorted(e["child"] for e in evs if e["type"] == "model_request" and e.get("child")) == sorted(
        e["child"]["id"] for e in finished[:2])


class Person:
    """A display a person answers at: every question is put, one at a time, and approved."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.at_once = 0
        self._busy = threading.Lock()

    def event(self, event: ev.Event, state: Any) -> None:
        pass

    def can_ask(self) -> bool:
        return True

    def ask_approval(self, question: Question) -> Answer:
        if not self._busy.acquire(blocking=False):
            self.at_once += 1
        else:
            self._busy.release()
        self.asked.append(json.loads(question.arguments)["path"])
        return Answer(True)


def test_approvals_are_asked_one_call_at_a_time_before_any_of_them_runs(tmp_path):
    cfg = RunConfig.model_validate({"approvals": {"mode": "always"}})
    run = create_run(tmp_path / "runs", TASK, cfg)
    person = Person()
    model = ScriptedModel({"turns": [turn(*(call("file_read", path=name) for name in ("x", "y", "z"))), done()]})
    sandbox = LocalSandbox(run.workspace, run.cairn_dir)
    try:
        assert Loop(run, cfg, sandbox, model, person).run() == "done"
    finally:
        sandbox.stop()
    assert person.asked == ["x", "y", "z"] and person.at_once == 0
    kinds = [e["type"] for e in raw_events(run) if e.get("step") == 1]
    assert kinds.index("tool_started") > max(i for i, kind in enumerate(kinds) if kind == "approval_answered")


def test_a_question_no_one_can_answer_now_lets_the_calls_before_it_run_and_the_rest_wait(tmp_path):
    rules = [{"tool": "file_read", "match": "b.txt", "action": "ask"}]
    model = ScriptedModel({"turns": [turn(*(call("file_read", path=f"{name}.txt") for name in "abc")), done()]})
    out = played(tmp_path, model, {"approvals": {"rules": rules}})
    assert out.status == "waiting"
    evs = raw_events(out.run)
    ran = [json.loads(e["arguments"])["path"] for e in evs if e["type"] == "tool_started"]
    assert ran == ["a.txt"], "the call before the question ran; the asked one and the one after it wait"
    status = [e for e in evs if e["type"] == "status"][-1]
    assert status["status"] == "waiting" and status["reason"] == "approval: file_read b.txt"


def child_script(name: str) -> list[dict[str, Any]]:
    return [turn(call("shell_exec", command=f"echo {name}1 >> {name}.txt")),
            turn(call("shell_exec", command=f"echo {name}2 >> {name}.txt")), done(f"{name} done")]


def test_sub_agents_a_kill_cut_off_side_by_side_go_on_side_by_side_and_nothing_runs_twice(tmp_path, monkeypatch):
    # As a kill leaves it (tests/agent/test_resume_after_a_kill_mid_step.py does one child): the parent's
    # log ends after both calls began, each child's after its first command; none of it was told to the
    # toolbox's journal as logged. The kill itself, with the Docker sandbox: tests/agent/test_exactly_once.py.
    monkeypatch.setattr(LocalSandbox, "recorded", lambda self, journal_key: None)
    delegating = turn(call("agent_delegate", task="write a"), call("agent_delegate", task="write b"))
    out = played(tmp_path, ByTask({TASK: [delegating, done()], "write a": child_script("a"),
                                   "write b": child_script("b")}))
    run = out.run
    lines = (run.state / "events.jsonl").read_text().splitlines(keepends=True)
    cut = [i for i, line in enumerate(lines) if json.loads(line)["type"] == "tool_started"][1]
    (run.state / "events.jsonl").write_text("".join(lines[:cut + 1]))
    run.write_meta({**run.read_meta(), "status": "running"})
    for name in "ab":
        [child] = [d for d in run.state.glob("children/*") if "write " + name in (d / "run.json").read_text()]
        lines = (child / "events.jsonl").read_text().splitlines(keepends=True)
        cut = next(i for i, line in enumerate(lines) if json.loads(line)["type"] == "tool_finished")
        (child / "events.jsonl").write_text("".join(lines[:cut + 1]))
        (child / "run.json").write_text(json.dumps({**json.loads((child / "run.json").read_text()), "status": "running"}))
        (run.workspace / f"{name}.txt").write_text(f"{name}1\n")  # what the first command had done by then

    model = ByTask({TASK: [done("parent done")], "write a": child_script("a")[1:], "write b": child_script("b")[1:]},
                   delay=0.2)
    sandbox = LocalSandbox()
    agent = Agent(model, sandbox, runs_dir=run.root.parent)
    agent.run_dir = run
    try:
        assert agent.resume().status == "done"
    finally:
        sandbox.stop()
    assert (run.workspace / "a.txt").read_text() == "a1\na2\n" and (run.workspace / "b.txt").read_text() == "b1\nb2\n"
    firsts = {task: (began, ended) for task, began, ended in reversed(model.asked)}
    a, b = firsts["write a"], firsts["write b"]
    assert a[0] < b[1] and b[0] < a[1], "the two children went on at the same time"
    evs = raw_events(run)
    finished = [e for e in evs if e["type"] == "tool_finished" and e["name"] == "agent_delegate"]
    assert [e["child"]["status"] for e in finished] == ["done", "done"] and [e["child"]["steps"] for e in finished] == [3, 3]
    assert "a done" in finished[0]["content"] and "b done" in finished[1]["content"]
    check_invariants([e for e in evs if not (e["type"] == "model_request" and e.get("child"))])
