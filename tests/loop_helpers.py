"""Running a scripted run end to end, in process, with the real sandbox and the real litellm client."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.config import RunConfig
from orchestrator.ui.display import Quiet
from orchestrator.ui.inspect.timeline import timeline
from orchestrator.runs.compose import LiveRun
from orchestrator.runs.new_run import create_run
from orchestrator.store.run_dir import RunDir


@dataclass
class Outcome:
    run: RunDir
    status: str
    requests: list[dict[str, Any]] = field(default_factory=list)  # bodies the scripted model received
    session: LiveRun | None = None

    @property
    def doc(self) -> dict[str, Any]:
        return timeline(self.run)

    def events(self, kind: str) -> list[Any]:
        return [e for e in self.run.events.read()[0] if e.type == kind]


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def turn(*calls: dict[str, Any], content: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"tool_calls": list(calls)}
    if content:
        out["content"] = content
    return out


def done(summary: str = "done") -> dict[str, Any]:
    return turn(call("task_done", summary=summary))


def play(tmp_path: Path, turns: list[dict[str, Any]], task: str = "test task", script_extra: dict | None = None,
         settings: dict | None = None, message: str | None = None) -> Outcome:
    """Writes the script, runs it to its end in a real sandbox, and returns what happened. Results are framed
    in one plain form unless `settings` turn `context.vary_framing` on (its forms follow the run's random seed)."""
    script = tmp_path / f"script-{len(list(tmp_path.glob('script-*.json')))}.json"
    script.write_text(json.dumps({"turns": turns, **(script_extra or {})}))
    log = tmp_path / "requests.jsonl"
    log.unlink(missing_ok=True)
    base = {"model": {"model": f"scripted:{script}", "retry_base_seconds": 0.01, "request_timeout": 3},
            "context": {"vary_framing": False}}
    for key, value in (settings or {}).items():
        base.setdefault(key, {}).update(value) if isinstance(value, dict) else base.__setitem__(key, value)
    cfg = RunConfig.model_validate(base)
    run = create_run(tmp_path / "runs", task, cfg)
    return _go(run, cfg, log, message)


def resume(outcome: Outcome, message: str | None = None, turns: list[dict[str, Any]] | None = None,
           tmp_path: Path | None = None) -> Outcome:
    from orchestrator.runs.settings import load_config

    cfg = load_config(outcome.run)
    if turns is not None and tmp_path is not None:
        script = tmp_path / "script-resume.json"
        script.write_text(json.dumps({"turns": turns}))
        cfg.model.model = f"scripted:{script}"
    log = outcome.run.root.parent.parent / "requests.jsonl"
    log.unlink(missing_ok=True)
    return _go(outcome.run, cfg, log, message, resumed=True)


def _go(run: RunDir, cfg: RunConfig, log: Path, message: str | None, resumed: bool = False) -> Outcome:
    import os

    os.environ["CAIRN_SCRIPTED_LOG"] = str(log)
    try:
        with LiveRun(run, cfg, Quiet(), resumed=resumed) as session:
            status = session.go(message, source="answer" if resumed and message else "user")
    finally:
        del os.environ["CAIRN_SCRIPTED_LOG"]
    requests = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return Outcome(run, status, requests, session)


def tool_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in request["messages"] if m["role"] == "tool"]


def text_of(request: dict[str, Any]) -> str:
    return json.dumps(request["messages"], ensure_ascii=False)
