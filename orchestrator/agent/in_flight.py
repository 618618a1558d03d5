"""Work in flight, named in the tail of every request, so that no compaction makes the agent forget it.

A digest folds away the turn that started a terminal session, asked the person a question or handed a
task to a sub-agent; an agent that then forgets its server is running, or what the answer it got was
about, starts it again or asks again (Codex #16580, Claude Code #29193: background processes lost after a
compaction). So what is in flight is read from the run's state, rebuilt from its events, never from the
history: the tail names it the same before and after every compaction. The terminal sessions are the
toolbox's to list (tools/sessions/status.py); the rest is here:

- the agent's last question to the person (ask_user), and whether and when they answered;
- a call that waits for the person's approval, or was answered and has not run yet;
- sub-agents (agent_delegate calls) that started and have not given their result.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Protocol

from orchestrator.context.person import PERSON_ANSWERS
from orchestrator.tools.sessions.status import WithSessions, session_notices

if TYPE_CHECKING:
    from orchestrator.agent.state import RunState

SHOWN_CHARS = 300  # of a question or a sub-agent's task: the tail is sent uncached with every request


class WithWork(WithSessions, Protocol):
    """The agent whose work in flight is named: its sessions (through its sandbox) and its run's state."""

    state: RunState


def work_in_flight(agent: WithWork) -> list[str]:
    """Every notice of work in flight for the tail: the terminal sessions, then the rest."""
    return [*session_notices(agent), *in_flight_notices(agent.state)]


def in_flight_notices(state: RunState) -> list[str]:
    """One notice for each thing in flight, from the run's state alone."""
    notices = []
    question = state.question
    if question is not None:
        asked = f"You asked the person at step {question.step} (ask_user): \"{_short(question.text)}\""
        notices.append(f"{asked}. They answered at step {question.answered}; their words are kept in the "
                       "conversation." if question.answered is not None else f"{asked}. No answer has come yet.")
    ledger = state.approvals
    if ledger.waiting is not None:
        notices.append(f"Your {ledger.waiting.name} call of step {ledger.waiting.step} waits for the person's "
                       "approval.")
    elif ledger.answer is not None:
        answer = ledger.answer
        verdict = "approved" if answer.approved else "denied"
        by = "by the person" if answer.by in PERSON_ANSWERS else f"by {answer.rule or 'an earlier answer'}"
        notices.append(f"Your {answer.name} call of step {answer.step} was {verdict} {by}; it has not run yet.")
    for call in state.open_calls.values():
        if call.name == "agent_delegate" and call.id in state.started:
            task = _short(_task(call.arguments))
            notices.append(f"A sub-agent (your agent_delegate call {call.id}, task \"{task}\") is still running; its "
                           "result will come as the call's result.")
    return notices


def _task(arguments: str) -> str:
    try:
        task = json.loads(arguments).get("task")
    except (ValueError, AttributeError):
        return arguments
    return task if isinstance(task, str) else arguments


def _short(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= SHOWN_CHARS else flat[: SHOWN_CHARS - 1] + "…"
