"""A batch file: one JSON object a line, each checked and turned into a run's settings (`Job`).

One JSON object a line (docs/contracts.md): `task` (required), `model`, `api_base`, `template`, `image`,
`workdir`, `check` (a command, or an object of check settings: `{"command": ..., "rounds": 2}`),
`settings` (a JSON file of run settings, as `cairn run --settings`; relative to the batch file),
`max_steps`, `max_cost`, `approve` (never, outside or always: which tool calls wait for a person; a
run that waits is left `waiting`, answered by `cairn approve RUN`). A line's settings: built-in
defaults < its template's cairn.json < `cairn batch --api-base` < its settings file < its own keys.
Blank lines are ignored. Every line is checked before
anything starts; a bad one is a usage error that names its line number.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator.config import RunConfig
from orchestrator.errors import UsageError

LINE_KEYS = {"task", "model", "api_base", "template", "image", "workdir", "check", "settings", "max_steps", "max_cost",
             "approve"}


@dataclass
class Job:
    line: int  # 1-based line number in the file
    key: str  # hash of the line's content, with its occurrence
    task: str
    cfg: RunConfig


def parse_file(path: Path, api_base: str | None = None) -> list[Job]:
    """Every line checked; raises UsageError naming the first bad line. Nothing is started here.
    `api_base` (`cairn batch --api-base`) is the endpoint of the lines that name none."""

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read the batch file {path}: {exc}") from None
    jobs: list[Job] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        where = f"{path.name} line {number}"
        try:
            item = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{where}: not JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(item, dict):
            raise UsageError(f"{where}: must be a JSON object, like {{\"task\": \"...\"}}")
        unknown = sorted(set(item) - LINE_KEYS)
        if unknown:
            raise UsageError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(LINE_KEYS))})")
        task = item.get("task")
        if not isinstance(task, str) or not task.strip():
            raise UsageError(f"{where}: \"task\" is required and must be a non-empty string")
        cfg = _line_config(item, path.parent, where, api_base)
        digest = hashlib.sha256(json.dumps(item, sort_keys=True).encode()).hexdigest()[:16]
        seen[digest] = seen.get(digest, 0) + 1
        jobs.append(Job(number, f"{digest}#{seen[digest]}", task, cfg))
    if not jobs:
        raise UsageError(f"the batch file {path} has no tasks")
    return jobs


def _line_config(item: dict[str, Any], base: Path, where: str, api_base: str | None) -> RunConfig:
    """The run settings of one line (its layers are in this module's docstring)."""
    from orchestrator.runs.settings import resolve_config, settings_file

    layers = [{"model": {"api_base": api_base}}] if api_base else []
    check = item.get("check")
    if not isinstance(item.get("template", ""), str):
        raise UsageError(f"{where}: \"template\" must be the name of a workspace template")
    try:
        if item.get("settings") is not None:
            if not isinstance(item["settings"], str) or not item["settings"].strip():
                raise UsageError("\"settings\" must be the path of a JSON file of settings")
            layers.append(settings_file(base / item["settings"], "settings file"))
        cfg = resolve_config({
            "model": {"model": item.get("model"), "api_base": item.get("api_base")},
            "limits": {"max_steps": item.get("max_steps"), "max_cost": item.get("max_cost")},
            "sandbox": {"image": item.get("image"), "workdir": item.get("workdir")},
            "check": check if isinstance(check, dict) else {"command": check},
            "approvals": {"mode": item.get("approve")},
        }, template=item.get("template"), layers=layers)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise UsageError(f"{where}: invalid {'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from None
    except UsageError as exc:  # a bad template or settings file, or no model anywhere
        raise UsageError(f"{where}: {exc.message}", hint=exc.hint) from None
    if cfg.model.model.startswith("scripted:"):
        cfg.model.model = _scripted_model(cfg.model.model, base, where)
    return cfg


def _scripted_model(model: str, base: Path, where: str) -> str:
    """A relative script path is relative to the batch file; the run stores it absolute, for resume."""
    from orchestrator.llm.scripted import load_script

    spec = model[len("scripted:"):]
    beside = base / spec
    if not Path(spec).is_absolute() and beside.is_file():
        spec = str(beside.resolve())
    try:
        load_script(spec)
    except UsageError as exc:
        raise UsageError(f"{where}: {exc.message}") from None
    return f"scripted:{spec}"
