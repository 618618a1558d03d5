"""A run that stopped for an approval: the question it waits on, and a person's answer written into its
log (`cairn approve`, the web page's buttons); `cairn resume` then runs the rest of that step
(orchestrator/agent/approvals.py decides what is asked)."""

from __future__ import annotations

import fcntl
from typing import Any

from orchestrator import events as ev
from orchestrator.agent.approvals import Ledger
from orchestrator.errors import UsageError


def record_answer(run: Any, approved: bool, reason: str | None = None, always: bool = False) -> ev.ApprovalAnswered:
    """Answers the question a waiting run asks, in its event log; `cairn resume` then goes on. Exactly
    once: a run that waits for no approval, or whose question was answered already, is a UsageError, and
    a lock keeps two `cairn approve` at once from both answering. (The caller has made sure the run is
    not live: a live run asks on its own terminal, or stops to wait.)"""
    with open(run.state / "approve.lock", "a") as lock:  # held until the answer is written
        fcntl.flock(lock, fcntl.LOCK_EX)
        asked, answered = approval_wait(run)
        if asked is None:
            status = run.read_meta().get("status", "?")
            raise UsageError(f"run {run.id} waits for no approval (its status is {status})")
        if answered:
            raise UsageError(f"run {run.id}'s approval of {asked.name} is answered already",
                             hint=f"cairn resume {run.id} goes on")
        answer = ev.ApprovalAnswered(step=asked.step, call_id=asked.call_id, name=asked.name, approved=approved,
                                     by="cairn approve", reason=reason, always=always, grant=asked.grant)
        run.events.append(answer)
        return answer


def approval_wait(run: Any) -> tuple[ev.ApprovalAsked | None, bool]:
    """The question a run stopped for (its status `waiting`, its reason `approval: ...`) and whether it is
    answered now; (None, False) for a run that did not stop for one."""
    events, _torn = run.events.read()
    ledger = Ledger()
    last_status = None
    for event in events:
        ledger.apply(event)
        if isinstance(event, ev.StatusChanged):
            last_status = event
    if last_status is None or last_status.status != "waiting" or not last_status.reason.startswith("approval"):
        return None, False
    if ledger.asked is None:
        return None, False
    return ledger.asked, ledger.answer_for(ledger.asked.call_id) is not None
