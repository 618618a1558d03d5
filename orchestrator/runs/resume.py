"""Resuming a run: the one place that decides how a stopped, waiting, interrupted or crashed run goes on,
for every entry point (`cairn resume`, `cairn approve --resume`, the Python API, the web page through the
CLI). An entry point parses its input into a `Resumption`, says who can answer a question (a person at a
terminal, or nobody), and shows the outcome.

What the run waits for decides what the person's words are:
- a call that waits for approval: the step it stopped in goes on first (the answer recorded by `cairn
  approve`, or asked on the terminal during the drive); a message waits in the inbox, as `cairn say`'s;
- a `cairn say` message not yet delivered: that is the instruction;
- a question of the agent: the message is its answer (asked on a terminal when none is given);
- a run that is done: a message follows it up; without one, a failed check's output goes back to the
  agent; else there is nothing to go on with;
- anything else (stopped, budget, interrupted, crashed): the message, if any, is a new instruction.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from orchestrator.config import RunConfig
from orchestrator.errors import UsageError
from orchestrator.status import Status
from orchestrator.store.run_dir import RunDir
from orchestrator.view.read import read_view

Ask = Callable[[str], "str | None"]  # asks a person a question on a terminal: their answer, or None


@dataclass
class Resumption:
    """What a person asks of a resume: a message, and the settings to change from now on."""

    message: str | None = None
    model: str | None = None
    api_base: str | None = None
    network: str | None = None
    max_steps: int | None = None
    max_cost: float | None = None
    max_seconds: float | None = None  # the time limit from now on, the run's earlier drives counted
    critic_every: int | None = None  # 0: no critic from now on
    critic_model: str | None = None
    approve: str | None = None  # never, outside or always: which calls wait for a yes from now on
    trust: bool = False  # an imported run's own host-reaching settings apply
    safe_defaults: bool = False  # an imported run goes on with cairn's defaults for those


@dataclass
class Ready:
    """A run ready to be driven again: its config, and the person's words for its first request."""

    run: RunDir
    cfg: RunConfig
    message: str | None
    source: str  # how the words reach the model: "answer", "user" or "resume"


def prepare(run: RunDir, wanted: Resumption, ask: Ask | None = None, approvals_on_terminal: bool = False) -> Ready:
    """Take the run (RunIsLive when another process drives it), decide what its next request says, and
    write the settings it goes on with. `ask`: a person at a terminal who can answer the agent's question
    now; `approvals_on_terminal`: the drive can ask a waiting approval there. A UsageError (one line, with
    what to do) when the run cannot go on as asked; the run is let go of then."""
    from orchestrator.agent.critic import preflight_critic
    from orchestrator.llm import warmup
    from orchestrator.llm.preflight import preflight
    from orchestrator.store.trust import settle

    if wanted.network is not None and wanted.network not in ("none", "bridge"):
        raise UsageError(f"--network is none or bridge, not {wanted.network!r}")
    if wanted.trust and wanted.safe_defaults:
        raise UsageError("--trust and --safe-defaults do not go together")
    if wanted.approve is not None and wanted.approve not in ("never", "outside", "always"):
        raise UsageError(f"--approve is never, outside or always, not {wanted.approve!r}")
    run.hold()  # this process drives the run from here, or another one does and it is refused
    try:
        message, source = _words(run, wanted, ask, approvals_on_terminal)
        if wanted.model:
            from orchestrator.llm.scripted import check_model

            check_model(wanted.model)  # before run.json takes it
        cfg, meta = settle(run.read_meta(), model=wanted.model or None, api_base=wanted.api_base,
                           network=wanted.network, trust=wanted.trust, safe_defaults=wanted.safe_defaults,
                           run_id=run.id)
        _override(cfg, wanted)
        if not cfg.mcp.api_key_in_file:  # else the key read at the start may send it without litellm
            warmup.begin(cfg.model)  # the model library loads from now on (llm/warmup.py)
        preflight(cfg.model, key_elsewhere=cfg.mcp.api_key_in_file)  # before the sandbox starts
        preflight_critic(cfg)
    except BaseException:
        run.release()  # refused: the run stays as it was, free for the next try
        raise
    meta["config"] = cfg.model_dump(mode="json")
    run.write_meta({**meta, "updated": time.time()})
    return Ready(run, cfg, message, source)


def fork(source: RunDir, step: int, message: str | None, runs_dir: Path) -> RunDir:
    """`resume --from-step N`: a new run that starts where `source` was at the end of step N (store/fork.py).
    A fork of a step that asked the person needs the answer."""
    from orchestrator.store.fork import fork_run, plan_fork

    plan = plan_fork(source, step)
    if plan.status == Status.WAITING and not message:
        raise UsageError(f"at step {step}, run {source.id} waits for an answer: {plan.result}",
                         hint=f'cairn resume {source.id} --from-step {step} --message "ANSWER"')
    return fork_run(plan, runs_dir)


def _words(run: RunDir, wanted: Resumption, ask: Ask | None, approvals_on_terminal: bool) -> tuple[str | None, str]:
    """The person's words for the run's next request, and how they reach it."""
    from orchestrator.agent.approval_answers import approval_wait

    message = wanted.message
    view = read_view(run, holding=True)
    asked, answered = approval_wait(run)
    if asked is not None:
        if not answered and wanted.approve is None and not approvals_on_terminal:
            raise UsageError(f"run {run.id} waits for approval of {asked.name} {_what(asked.name, asked.arguments)}",
                             hint=f"cairn approve {run.id} --resume (or --deny REASON, --always); or resume it "
                                  "on a terminal, which asks")
        if message:
            # The step it stopped in goes on first, and may stop for another approval before the model is
            # asked again: the message waits in the inbox, as `cairn say`'s does, for the model's next step.
            from orchestrator.store.inbox import say

            say(run.state, message)
        return None, "user"
    if not message and _has_said(run):
        return None, "user"  # a `cairn say` message waits to be delivered: that is the instruction
    if view.status == Status.WAITING:
        question = (view.waiting or {}).get("question") or view.result or ""
        if not message and ask is not None:
            message = ask(question)
        if not message:
            raise UsageError(f"run {run.id} waits for an answer: {question}",
                             hint=f'cairn resume {run.id} --message "ANSWER"')
        return message, "answer"
    if view.status == Status.DONE and not message:
        from orchestrator.agent.check import feedback, last_failed
        from orchestrator.runs.settings import load_config

        failed = last_failed(run.events.read()[0])
        if failed is None:
            raise UsageError(f"run {run.id} is done; to go on, give it a new instruction with --message")
        # Its check failed: the agent goes on from the check's output, as a round of --check-rounds would.
        return feedback(failed, load_config(run).sandbox.workdir), "resume"
    return message, "user"


def _override(cfg: RunConfig, wanted: Resumption) -> None:
    if wanted.max_steps:
        cfg.limits.max_steps = wanted.max_steps
    if wanted.max_cost is not None:
        cfg.limits.max_cost = wanted.max_cost
    if wanted.max_seconds is not None:
        cfg.limits.max_wall_seconds = wanted.max_seconds
    if wanted.critic_every is not None:
        cfg.critic.every = wanted.critic_every or None
    if wanted.critic_model is not None:
        cfg.critic.model = wanted.critic_model
    if wanted.approve is not None:
        cfg.approvals.mode = wanted.approve


def _has_said(run: RunDir) -> bool:
    from orchestrator.store.inbox import delivered_offset, pending

    return bool(pending(run.state, delivered_offset(run.events.read()[0])))


def _what(name: str, arguments: str | None) -> str:
    from orchestrator.agent.approvals import subject

    try:
        what = subject(name, json.loads(arguments or "{}"))
    except (ValueError, AttributeError):
        what = arguments or ""
    return " ".join(what.split())
