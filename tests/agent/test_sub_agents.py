"""Sub-agents (agent_delegate) end to end: the scripted model, the real sandbox, the real event logs.

The child uses the parent's model string, so it shares the script: the turns play in request order
(parent, then the child's turns, then the parent again).
"""

from __future__ import annotations

import json

import pytest

from orchestrator.store.children import open_child
from orchestrator.ui.inspect.timeline import step_lines
from orchestrator import events as ev
from tests.loop_helpers import play as docker_play
from tests.fake_loop import call, done, play, text_of, tool_messages, turn



def child_of(out, call_id=None):
    finished = [e for e in out.events("tool_finished") if e.name == "agent_delegate"]
    assert finished, "no agent_delegate call finished"
    e = finished[0] if call_id is None else next(f for f in finished if f.call_id == call_id)
    return e, open_child(out.run, e.call_id, e.child)


def test_a_child_does_its_task_in_the_shared_workspace_and_the_parent_gets_its_summary(tmp_path):
    out = play(tmp_path, [
        turn(call("shell_exec", command="echo parent > parent.txt")),
        turn(call("agent_delegate", task="Write notes/hello.md and make data.csv.")),
        turn(call("file_write", path="notes/hello.md", content="# hello\n")),
        turn(call("shell_exec", command="printf 'a,b\\n1,2\\n' > data.csv && rm parent.txt")),
        done("wrote notes/hello.md and data.csv"),
        done("all done"),
    ], task="the parent's task")
    assert out.status == "done"
    ws = out.run.workspace
    assert (ws / "notes/hello.md").read_text() == "# hello\n" and (ws / "data.csv").is_file()
    # requests: parent 1, parent 2, child 1-3, parent 3
    assert len(out.requests) == 6
    first_child, parent_after = out.requests[2], out.requests[5]
    # the child's own context: same system prompt and tools (shared prefix), its task is the one written
    assert first_child["messages"][0] == out.requests[0]["messages"][0]
    assert first_child["tools"] == out.requests[0]["tools"]
    assert first_child["messages"][1]["content"] == "Write notes/hello.md and make data.csv."
    assert "the parent's task" not in text_of(first_child)
    result = tool_messages(parent_after)[-1]["content"]
    assert "finished its task" in result and "wrote notes/hello.md and data.csv" in result
    assert "added    notes/hello.md" in result and "added    data.csv" in result
    assert "deleted  parent.txt" in result  # a shell command's change shows through the workspace diff
    assert "cairn/" not in result.split("Its log:")[0]
    finished, child = child_of(out)
    assert finished.child["status"] == "done" and finished.child["steps"] == 3
    assert {p["path"] for p in finished.child["paths"]} == {"notes/hello.md", "data.csv", "parent.txt"}
    assert child is not None and finished.child["path"] == f"state/children/{child.id}"


def test_the_childs_events_are_kept_under_the_parent_and_show_nests_them(tmp_path):
    out = play(tmp_path, [
        turn(call("agent_delegate", task="count to three")),
        turn(call("shell_exec", command="seq 3")),
        done("counted"),
        done(),
    ])
    finished, child = child_of(out)
    log = out.run.state / "children" / child.id / "events.jsonl"
    assert log.is_file() and (log.parent / "run.json").is_file()
    child_events = [e.type for e in child.events.read()[0]]
    assert child_events[0] == "run_started" and "tool_finished" in child_events
    # the parent's log holds none of the child's steps
    parent_calls = [e.name for e in out.events("tool_started")]
    assert parent_calls == ["agent_delegate", "task_done"]
    assert json.loads((log.parent / "run.json").read_text())["status"] == "done"
    doc = out.doc
    delegate_call = doc["steps"][0]["tool_calls"][0]
    nested = delegate_call["child"]
    assert nested["id"] == child.id and nested["status"] == "done"
    assert [c["name"] for s in nested["steps"] for c in s["tool_calls"]] == ["shell_exec", "task_done"]
    lines = step_lines(doc)
    at = next(i for i, line in enumerate(lines) if "delegate: " in line)
    assert "sub-agent" in lines[at + 1] and lines[at + 1].startswith("     ┆ ")
    assert " $ " in lines[at + 2] and lines[at + 2].startswith("     ┆ ")  # its shell_exec
    assert " done: " in lines[at + 4] and "┆" not in lines[at + 4]  # the parent's task_done


def test_a_child_cannot_delegate_further_by_default(tmp_path):
    out = play(tmp_path, [
        turn(call("agent_delegate", task="outer sub-task")),
        turn(call("agent_delegate", task="inner sub-task")),
        done("could not delegate, did it myself"),
        done(),
    ])
    assert out.status == "done"
    _finished, child = child_of(out)
    inner = [e for e in child.events.read()[0] if isinstance(e, ev.ToolFinished)][0]
    assert inner.error and "cannot delegate further" in inner.content
    assert not (child.root / "children").exists()
    # the tool stays in the child's list, so the prefix is the same
    assert "agent_delegate" in [t["function"]["name"] for t in out.requests[1]["tools"]]


def test_the_childs_step_budget_ends_it_and_the_parent_gets_that_result(tmp_path):
    out = play(tmp_path, [
        turn(call("agent_delegate", task="loop a while", max_steps=5)),
        turn(call("shell_exec", command="echo one")),
        turn(call("shell_exec", command="echo two")),
        done(),
    ], settings={"limits": {"child_max_steps": 2}})
    assert out.status == "done"
    finished, child = child_of(out)
    assert finished.child["status"] == "budget" and finished.child["steps"] == 2 and finished.error
    assert json.loads(child.meta_path.read_text())["status"] == "budget"
    result = tool_messages(out.requests[3])[-1]["content"]
    assert "ran out of its budget" in result and "step limit (2)" in result
    assert out.requests[2]["tool_choice"] == {"type": "function", "function": {"name": "task_done"}}


@pytest.mark.docker  # the LiveRun: its own model clients, its pid
def test_the_childs_usage_counts_in_the_parents_totals(tmp_path, sandbox_image):
    pricing = {"pricing": {"input": 0.001, "cached_input": 0.0001, "output": 0.002}}
    out = docker_play(tmp_path, [
        turn(call("agent_delegate", task="do a little")),
        turn(call("shell_exec", command="true")),
        done("did"),
        done(),
    ], script_extra=pricing)
    _finished, child = child_of(out)
    child_requests = [e for e in child.events.read()[0] if isinstance(e, ev.ModelRequest)]
    own = [e for e in out.events("model_request") if getattr(e, "child", None) is None]
    assert len(child_requests) == 2 and len(own) == 2
    every = child_requests + own
    usage = out.doc["usage"]
    assert usage["prompt_tokens"] == sum(e.usage["prompt_tokens"] for e in every)
    assert usage["completion_tokens"] == sum(e.usage["completion_tokens"] for e in every)
    assert usage["cost_usd"] == pytest.approx(sum(e.usage["cost_usd"] for e in every), abs=1e-6)
    assert out.session.agent.state.totals.prompt_tokens == usage["prompt_tokens"]
    meta = out.run.read_meta()
    assert meta["usage"]["prompt_tokens"] == usage["prompt_tokens"]
    # the per-step figure of the delegating step stays the parent's own request
    assert out.doc["steps"][0]["usage"]["prompt_tokens"] == own[0].usage["prompt_tokens"]


def test_the_parents_budget_left_bounds_the_child(tmp_path):
    pricing = {"pricing": {"input": 0.001, "cached_input": 0.0001, "output": 0.002}}
    spending = [turn(call("shell_exec", command=f"echo {n}")) for n in range(10)]
    out = play(tmp_path, [turn(call("agent_delegate", task="spend")), *spending],
               script_extra=pricing, settings={"limits": {"max_cost": 2.8}})
    assert out.status == "budget"
    finished, _child = child_of(out)
    assert finished.child["status"] == "budget"
    # it had what the parent had left (about $0.75 after a first request of about $2.05; its cached ones cost
    # about $0.4), not the whole $2.8
    assert 1 <= finished.child["steps"] <= 3
    assert 2.8 <= out.doc["usage"]["cost_usd"] < 3.8
    assert len(out.events("assistant_message")) == 1  # the parent's next budget check saw the child's cost


def play_interrupting_the_child(tmp_path, monkeypatch, interrupt):
    """The parent delegates a job of two commands; `interrupt(child)` runs as the child's first step begins."""
    from orchestrator.agent.loop import Loop

    original_step = Loop.step

    def step(self):
        if getattr(self, "depth", 0) == 1 and self.state.step == 0:
            interrupt(self)
        return original_step(self)

    monkeypatch.setattr(Loop, "step", step)
    return play(tmp_path, [
        turn(call("agent_delegate", task="long job")),
        turn(call("shell_exec", command="echo one")),
        turn(call("shell_exec", command="echo two")),
        done(),
    ])


def test_a_stop_of_the_parent_stops_the_child_and_then_the_parent(tmp_path, monkeypatch):
    """As Ctrl-C (or a batch stopping) does: the flag is set while the child works, and stop means now: the
    child's next call does not start."""
    seen = {}

    def stop(child):
        child.parent.stop_requested = True  # as if Ctrl-C came during the child's first step
        seen["set"] = True

    out = play_interrupting_the_child(tmp_path, monkeypatch, stop)
    assert seen["set"]
    assert out.status == "interrupted"
    finished, child = child_of(out)
    assert finished.child["status"] == "interrupted"
    child_events = child.events.read()[0]
    assert [e.name for e in child_events if isinstance(e, ev.ToolStarted)] == []
    [result] = [e for e in child_events if isinstance(e, ev.ToolFinished)]
    assert result.error and "the person stopped the run before this call" in result.content


def test_the_childs_saved_outputs_never_overwrite_the_parents(tmp_path):
    big = "python3 -c \"print('\\n'.join('{who} %05d ' % i + 'x' * 40 for i in range(4000)))\""
    out = play(tmp_path, [
        turn(call("shell_exec", command=big.format(who="parent"))),
        turn(call("agent_delegate", task="make noise")),
        turn(call("shell_exec", command=big.format(who="child"))),
        done("noisy"),
        done(),
    ])
    obs = out.run.cairn_dir / "obs"
    assert (obs / "1-shell_exec.txt").read_text().startswith("parent 00000")
    _finished, child = child_of(out)
    theirs = obs / f"1-shell_exec-sub-{child.id}.txt"
    assert theirs.read_text().startswith("child 00000")
    child_result = [e for e in child.events.read()[0] if isinstance(e, ev.ToolFinished)][0]
    assert child_result.offloaded_to == f"/cairn/obs/{theirs.name}"


def test_the_report_nests_the_childs_steps(tmp_path):
    from orchestrator.ui.inspect.report import render_report

    out = play(tmp_path, [
        turn(call("agent_delegate", task="count")),
        turn(call("shell_exec", command="echo NESTED-MARK")),
        done("counted"),
        done(),
    ])
    page = render_report(out.run)
    _finished, child = child_of(out)
    assert f"sub-agent {child.id} [done]" in page and "NESTED-MARK" in page.split(f"sub-agent {child.id}")[1]


def test_ctrl_c_during_a_child_stops_the_child_now_then_the_parent(tmp_path, monkeypatch):
    import os
    import signal

    before = signal.getsignal(signal.SIGINT)  # Python's own, or SIG_IGN when pytest was started in the background
    out = play_interrupting_the_child(tmp_path, monkeypatch, lambda child: os.kill(os.getpid(), signal.SIGINT))
    assert out.status == "interrupted"
    finished, child = child_of(out)
    assert finished.child["status"] == "interrupted" and "was interrupted" in finished.content
    assert [e.name for e in child.events.read()[0] if isinstance(e, ev.ToolStarted)] == []  # none starts after it
    assert signal.getsignal(signal.SIGINT) is before  # both handlers were put back
