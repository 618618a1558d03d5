"""What is in flight is named in the tail of every request, from the run's state, never from the history, so
that no compaction makes the agent forget it (agent/in_flight.py; the terminal sessions: the toolbox's)."""

from __future__ import annotations

import re

from orchestrator import events as ev
from orchestrator.agent.in_flight import in_flight_notices
from orchestrator.agent.state import RunState
from orchestrator.config import ContextConfig
from orchestrator.context import TokenCounter
from tests.fake_loop import call, done, play, turn

BIG = 'for i in $(seq 600); do echo "trace line $i ' + "x" * 60 + '"; done'


def state_of(*events: ev._Event) -> RunState:
    state = RunState(ContextConfig(), TokenCounter())
    for event in (ev.RunStarted(task="t", system_prompt="s", tools=[], seed=1), *events):
        state.apply(event)
    return state


def answer(step: int, *calls: tuple[str, str, str]) -> ev.AssistantMessage:
    tool_calls = [{"id": id, "type": "function", "function": {"name": name, "arguments": args}} for id, name, args in calls]
    return ev.AssistantMessage(step=step, message={"role": "assistant", "content": None, "tool_calls": tool_calls})


def test_nothing_in_flight_says_nothing():
    assert in_flight_notices(state_of()) == []


def test_a_question_is_named_unanswered_then_with_the_step_of_its_answer():
    asked = state_of(ev.StatusChanged(step=4, status="waiting", reason="ask_user", result="Blue or green?"))
    assert in_flight_notices(asked) == ['You asked the person at step 4 (ask_user): "Blue or green?". No answer has '
                                        'come yet.']
    asked.apply(ev.UserMessage(step=4, text="Blue.", source="answer"))
    assert in_flight_notices(asked) == ['You asked the person at step 4 (ask_user): "Blue or green?". They answered at '
                                        'step 4; their words are kept in the conversation.']


def test_a_checks_feedback_is_no_answer():
    asked = state_of(ev.StatusChanged(step=4, status="waiting", reason="ask_user", result="Blue or green?"),
                     ev.UserMessage(step=5, text="the check failed", source="check"))
    assert "No answer has come yet" in in_flight_notices(asked)[0]


def test_a_call_waiting_for_approval_and_then_answered_but_not_run_is_named():
    state = state_of(answer(3, ("c1", "web_fetch", '{"url": "https://example.com"}')),
                     ev.ApprovalAsked(step=3, call_id="c1", name="web_fetch", arguments="{}", why="network", grant="web_fetch"))
    assert in_flight_notices(state) == ["Your web_fetch call of step 3 waits for the person's approval."]
    state.apply(ev.ApprovalAnswered(step=3, call_id="c1", name="web_fetch", approved=False, by="cairn approve",
                                    reason="not that site"))
    assert in_flight_notices(state) == ["Your web_fetch call of step 3 was denied by the person; it has not run yet."]
    state.apply(ev.ToolStarted(step=3, call_id="c1", name="web_fetch", arguments="{}"))
    assert in_flight_notices(state) == []


def test_a_running_sub_agent_is_named_with_its_task_until_its_result_comes():
    state = state_of(answer(6, ("d1", "agent_delegate", '{"task": "Write the parser tests."}')))
    assert in_flight_notices(state) == []  # asked for, not started
    state.apply(ev.ToolStarted(step=6, call_id="d1", name="agent_delegate", arguments='{"task": "Write the parser tests."}'))
    assert in_flight_notices(state) == ['A sub-agent (your agent_delegate call d1, task "Write the parser tests.") is '
                                        "still running; its result will come as the call's result."]
    state.apply(ev.ToolFinished(step=6, call_id="d1", name="agent_delegate", content="done"))
    assert in_flight_notices(state) == []


def test_an_open_terminal_session_is_named_after_every_compaction_as_before_it(tmp_path):
    turns = [turn(call("shell_start", command="sleep 300", session="server", wait=0))]
    turns += [turn(call("shell_exec", command=f"{BIG}  # {n}")) for n in range(12)]
    turns += [turn(call("shell_stop", session="server")), done()]
    out = play(tmp_path, turns, settings={"model": {"context_window": 10_000}})
    assert out.status == "done"
    compactions = [e.step for e in out.events("compaction")]
    assert len(compactions) >= 2
    session = re.compile(r"Terminal session server \(`sleep 300`\): running for ")
    for step in compactions:  # request `step` is the first one after the compaction; `step - 1`, the last before
        assert session.search(out.requests[step - 2]["messages"][-1]["content"])
        assert session.search(out.requests[step - 1]["messages"][-1]["content"])
