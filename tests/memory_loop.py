"""Running a scripted run end to end on nothing but in-memory ports: the Store (orchestrator.testing.
MemoryStore: no run directory), the scripted model without HTTP or litellm (ScriptedModel) and the
toolbox's ops over temporary folders (LocalSandbox), driven by the loop itself
(orchestrator.agent.loop.Loop). The loop's behaviour is tested here; tests/fake_loop.py drives the same
scripts through the Python API and a real run directory, tests/loop_helpers.py through litellm and Docker."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from orchestrator.agent.loop import Loop
from orchestrator.config import RunConfig
from orchestrator.ports import Unseen
from orchestrator.testing import LocalSandbox, MemoryStore, ScriptedModel
from orchestrator.ui.inspect.timeline import timeline
from tests.loop_helpers import call, done, text_of, tool_messages, turn

__all__ = ["MemoryOutcome", "call", "done", "play", "resume", "text_of", "tool_messages", "turn"]


@dataclass
class MemoryOutcome:
    run: MemoryStore  # its `cairn_dir` is the sandbox's: offloaded outputs are there
    status: str
    cfg: RunConfig
    requests: list[dict[str, Any]] = field(default_factory=list)  # bodies the scripted model received

    @property
    def doc(self) -> dict[str, Any]:
        return timeline(self.run)

    def events(self, kind: str) -> list[Any]:
        return [e for e in self.run.events.read()[0] if e.type == kind]


def play(tmp_path: Path, turns: list[dict[str, Any]], task: str = "test task", script_extra: dict | None = None,
         settings: dict | None = None, before: Callable[[MemoryStore], None] | None = None) -> MemoryOutcome:
    """Runs the script to its end on the in-memory ports and returns what happened. `before(store)`: what
    the person does before the first step (`say`, `request_stop`). Results are framed in one plain form
    unless `settings` turn `context.vary_framing` on (its forms follow the run's random seed)."""
    settings = {**(settings or {}), "context": {"vary_framing": False, **(settings or {}).get("context", {})}}
    cfg = RunConfig.model_validate(settings)
    sandbox = LocalSandbox(tmp_path / "workspace", tmp_path / "cairn", cfg=cfg.sandbox)
    store = MemoryStore(task, cfg, cairn_dir=sandbox.cairn)
    if before is not None:
        before(store)
    return _go(store, cfg, sandbox, {"turns": turns, **(script_extra or {})}, message=None, resumed=False)


def resume(outcome: MemoryOutcome, message: str | None = None, turns: list[dict[str, Any]] | None = None,
           tmp_path: Path | None = None) -> MemoryOutcome:
    """A new loop on the same store (its state rebuilt from the events; its open calls closed from the
    journal), as `cairn resume` would make it, with a new script."""
    sandbox = LocalSandbox(outcome.run.cairn_dir.parent / "workspace", outcome.run.cairn_dir, cfg=outcome.cfg.sandbox)
    return _go(outcome.run, outcome.cfg, sandbox, {"turns": turns or []}, message=message, resumed=True)


def _go(store: MemoryStore, cfg: RunConfig, sandbox: LocalSandbox, script: dict[str, Any], message: str | None,
        resumed: bool) -> MemoryOutcome:
    model = ScriptedModel(script, context_window=cfg.model.context_window)
    agent = Loop(store, cfg, sandbox, model, Unseen())
    try:
        if resumed:
            agent.recover()
        status = agent.run(message, source="answer" if resumed and message else "user")
    finally:
        sandbox.stop()
    bodies = [json.loads(json.dumps(body)) for body in model.requests]  # as the HTTP server would log them
    return MemoryOutcome(store, status, cfg, bodies)
