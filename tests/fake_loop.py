"""Running a scripted run end to end in process on the in-memory ports: the scripted model without HTTP
or litellm (orchestrator.testing.ScriptedModel) and the toolbox's own ops over the run's directories
(orchestrator.testing.LocalSandbox). No Docker engine is needed; the loop, the context engine, the event
log, checkpoints, resume and sub-agents are the real ones. The same names as tests/loop_helpers.py, whose
`play` goes through litellm and the Docker sandbox instead: a behaviour of the loop is tested here, one of
the sandbox or the client there."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator.api import Agent
from orchestrator.config import RunConfig
from orchestrator.runs.settings import load_config
from orchestrator.store.run_dir import RunDir
from orchestrator.testing import LocalSandbox, ScriptedModel
from tests.loop_helpers import Outcome, call, done, text_of, tool_messages, turn

__all__ = ["Outcome", "call", "done", "play", "resume", "text_of", "tool_messages", "turn"]


def play(tmp_path: Path, turns: list[dict[str, Any]], task: str = "test task", script_extra: dict | None = None,
         settings: dict | None = None) -> Outcome:
    """Runs the script to its end on the in-memory ports and returns what happened. Results are framed in
    one plain form unless `settings` turn `context.vary_framing` on (its forms follow the run's random seed)."""
    base: dict[str, Any] = {"context": {"vary_framing": False}}
    for key, value in (settings or {}).items():
        base.setdefault(key, {}).update(value) if isinstance(value, dict) else base.__setitem__(key, value)
    cfg = RunConfig.model_validate(base)
    model = ScriptedModel({"turns": turns, **(script_extra or {})}, context_window=cfg.model.context_window)
    sandbox = LocalSandbox(cfg=cfg.sandbox)
    agent = Agent(model, sandbox, runs_dir=tmp_path / "runs", settings=base)
    try:
        result = agent.run(task)
    finally:
        sandbox.stop()
    return Outcome(RunDir(result.run_dir), result.status, _bodies(model))


def resume(outcome: Outcome, message: str | None = None, turns: list[dict[str, Any]] | None = None,
           tmp_path: Path | None = None, script_extra: dict | None = None) -> Outcome:
    """Resumes the run (as `cairn resume` does: its journal read, its open calls closed) with a new script."""
    cfg = load_config(outcome.run)
    model = ScriptedModel({"turns": turns or [], **(script_extra or {})}, context_window=cfg.model.context_window)
    sandbox = LocalSandbox(cfg=cfg.sandbox)
    agent = Agent(model, sandbox, runs_dir=outcome.run.root.parent)
    agent.run_dir = outcome.run
    try:
        result = agent.resume(message)
    finally:
        sandbox.stop()
    return Outcome(outcome.run, result.status, _bodies(model))


def _bodies(model: ScriptedModel) -> list[dict[str, Any]]:
    """The requests as the HTTP server would have logged them (JSON round trip: no shared objects)."""
    return [json.loads(json.dumps(body)) for body in model.requests]
