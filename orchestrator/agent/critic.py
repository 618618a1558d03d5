"""The critic (`--critic-every N`): every N steps, one extra model call reads the task, the plan and
the agent's last N steps, and says in a few lines what is going wrong or being missed.

Its answer goes into the tail of the next request only (the tail is rebuilt every step and costs no
cache), is saved as a file in cairn's own files with its path beside it, and is a `CriticNote` in the
log, whose usage counts toward the run's budget. A note not yet shown when a run stops is shown in the
first request after the resume: `RunState.critic_note` holds it until a request has carried it.
"""

from __future__ import annotations

from typing import Any, Protocol

from orchestrator.config import ModelConfig, RunConfig
from orchestrator.context.offload import CAIRN_DIR
from orchestrator.agent.guards import Finished, check_budget
from orchestrator.llm.types import ModelError
from orchestrator.errors import ToolError
from orchestrator import events as ev
from orchestrator.agent.state import RunState


class Reviewed(Protocol):
    """What the critic needs of the agent it reviews (loop.Loop, which calls it: the loop imports the
    critic, never the other way round)."""

    cfg: RunConfig
    tag: str
    state: RunState
    model: Any  # ports.Model; a second client on --critic-model is the agent's `critic_model`

    def read_todo(self) -> tuple[str | None, str | None]: ...

    def save_file(self, path: str, text: str) -> None: ...

    def emit(self, event: ev._Event) -> None: ...

CRITIC_DIR = f"{CAIRN_DIR}/critic"
CRITIC_PROMPT = (
    "You review the recent work of an autonomous coding and research agent against its task. Read the task, "
    "its plan (todo.md) and its last steps. In at most 200 words, say what is going wrong or being missed: "
    "errors ignored, loops, wrong assumptions, unverified claims, steps of the task or plan left out, a "
    "simpler way. Be concrete (name files, commands, steps). If the work is on track, say so in one line. "
    "Write to the agent directly; no preamble."
)
# One message of the steps is cut to its head and tail past this: the critic reads what happened, and
# a 40k-character build log would make each review cost more than the steps it reviews.
MESSAGE_CHARS = 1500
MAX_WORDS = 300  # a critic that ignores "at most 200 words" is cut here, so the tail stays small


def steps_text(messages: list[dict[str, Any]], chars: int | None = None) -> str:
    """History messages as plain text, as the summary request sends them (some providers refuse tool
    calls in a request without tools); each cut to `chars` when given."""

    def cut(text: str) -> str:
        if chars is None or len(text) <= chars:
            return text
        half = chars // 2
        return f"{text[:half]}\n[... {len(text) - chars:,} characters left out ...]\n{text[-half:]}"

    return "\n\n".join(f"[{m['role']}] {cut(m.get('content') or '')}"
                       + "".join(f"\n  call {c['function']['name']} {cut(c['function']['arguments'])}"
                                 for c in m.get("tool_calls") or []) for m in messages)


def critic_request(task: str, todo: str | None, messages: list[dict[str, Any]], steps: int) -> list[dict[str, Any]]:
    """The critic's request: its instructions, then the task, the plan and the last `steps` steps as text."""
    plan = todo.strip() if todo and todo.strip() else "(there is no todo.md)"
    body = (f"# The task\n{task}\n\n# todo.md\n{plan}\n\n# The agent's last {steps} steps\n"
            f"{steps_text(messages, MESSAGE_CHARS)}")
    return [{"role": "system", "content": CRITIC_PROMPT}, {"role": "user", "content": body}]


def tail_text(note: ev.CriticNote) -> str:
    """What the next request's tail shows of a note."""
    where = f" (saved in {note.path})" if note.path else ""
    return f"After step {note.step}{where}:\n{note.text.strip()}"


def file_text(step: int, every: int, model: str, text: str) -> str:
    return f"# The critic's review after step {step}\n\nmodel: {model}; it read steps {max(1, step - every + 1)}-{step}.\n\n{text.strip()}\n"


def _cut_words(text: str) -> str:
    words = text.split()
    return text if len(words) <= MAX_WORDS else " ".join(words[:MAX_WORDS]) + " [cut by cairn]"


def critic_model_config(cfg: RunConfig) -> ModelConfig | None:
    """The ModelConfig of the critic's own client, or None when it uses the run's (no --critic-model)."""
    if cfg.critic.every is None or cfg.critic.model is None or cfg.critic.model == cfg.model.model and (
            cfg.critic.api_base in (None, cfg.model.api_base)):
        return None
    # An agent.json's apiKey is the run model's: another model takes its key from the environment.
    return cfg.model.model_copy(update={"model": cfg.critic.model, "api_key": None,
                                        "api_base": cfg.critic.api_base or cfg.model.api_base})


def preflight_critic(cfg: RunConfig) -> None:
    """--critic-model is checked like the run's model (llm/preflight.py), before a run or a sandbox exists."""
    from orchestrator.llm.preflight import preflight

    critic_cfg = critic_model_config(cfg)
    if critic_cfg is not None:
        preflight(critic_cfg)


def after_step(agent: Reviewed, step: int) -> None:
    """The hook at the end of a step that goes on: every `critic.every` steps, the critic's note."""
    every = agent.cfg.critic.every
    if not every or agent.tag or step % every:  # a sub-agent (agent/delegate.py) has no critic
        return
    try:
        check_budget(agent.cfg.limits, agent.state.totals, step + 1)
    except Finished:
        return  # the next step ends the run: a review nobody reads is not paid for
    critique(agent, step, every)


def critique(agent: Reviewed, step: int, every: int) -> None:
    """One critic call over the steps after `step - every`; its note is saved and logged. A failed
    critic call is a notice: the critic advises, and the run goes on without its advice."""
    model = getattr(agent, "critic_model", None) or agent.model
    name = agent.cfg.critic.model or agent.cfg.model.model
    recent = [entry.message for entry in agent.state.history if entry.step > step - every]
    todo, _cut = agent.read_todo()
    try:
        reply = model.complete(critic_request(agent.state.task, todo, recent, every), [])
    except ModelError as exc:  # after the client's retries
        agent.emit(ev.Notice(step=step, text=f"the critic's call failed: {exc.message}"))
        return
    text = _cut_words((reply.message.get("content") or "").strip()) or "(the critic gave no answer)"
    path: str | None = f"{CRITIC_DIR}/{step:03d}.md"
    try:
        agent.save_file(path, file_text(step, every, name, text))
    except ToolError as exc:  # the toolbox refused the write: the note still reaches the agent
        agent.emit(ev.Notice(step=step, text=f"the critic's note was not saved: {exc}"))
        path = None
    agent.emit(ev.CriticNote(step=step, text=text, path=path, model=name, usage=reply.usage.model_dump()))
