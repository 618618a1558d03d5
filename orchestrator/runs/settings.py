"""Where a run's settings come from: built-in defaults, the template's cairn.json, settings files (`--settings`,
a batch line's, an agent folder's cairn.json) and the options the person gave, merged in that order;
and a stored run's config, read back."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator.config import RunConfig, default_model
from orchestrator.errors import UsageError
from orchestrator.store.run_dir import RunDir

def template_names() -> list[str]:
    """The starter workspaces cairn has (workspace_templates/, package data), by name."""
    return sorted(p.name for p in _templates().iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))


def template_dir(name: str) -> Path:
    if name not in template_names():
        raise UsageError(f"no workspace template {name!r}; the templates are: {', '.join(template_names())}")
    return _templates() / name


def _templates() -> Path:
    return Path(str(resources.files("orchestrator.workspace_templates")))


def template_settings(name: str) -> dict[str, Any]:
    """The template's own settings, `workspace_templates/<name>/cairn.json` (any RunConfig fields; the
    file is never copied into a workspace). Checked alone, so that a bad one is named as the template's."""
    path = template_dir(name) / "cairn.json"
    if not path.is_file():
        return {}
    try:
        settings = json.loads(path.read_text())
        if not isinstance(settings, dict):
            raise ValueError("not a JSON object")
        settings.pop("template", None)
        RunConfig.model_validate(settings)
    except ValueError as exc:  # JSONDecodeError and pydantic's ValidationError are ValueErrors
        first = str(exc).strip().splitlines()
        raise UsageError(f"the settings of template {name!r} ({path}) are invalid: {' '.join(first[:3])}") from None
    return settings


def read_json(path: Path, label: str) -> Any:
    """A file's JSON value, or a one-line UsageError that starts with `label` (naming the file) and says
    why it cannot be read or parsed."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{label}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{label}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None


def settings_file(path: Path, what: str = "--settings") -> dict[str, Any]:
    """A JSON file of run settings (`cairn run --settings FILE`, a batch line's `settings`, an agent
    folder's cairn.json): any RunConfig fields, nested as in run.json, like a template's cairn.json.
    A bad file is a one-line UsageError that names it."""
    settings = read_json(path, f"{what} {path}")
    if not isinstance(settings, dict):
        raise UsageError(f"{what} {path}: must be a JSON object of settings, like "
                         '{"model": {"context_window": 32768}}')
    try:
        RunConfig.model_validate(settings)
    except ValidationError as exc:
        raise UsageError(f"{what} {path}: {invalid_setting(exc)}") from None
    return settings


def agent_folder_settings(config: Path) -> dict[str, Any]:
    """The `cairn.json` beside an agent folder's agent.json (`--config PATH`): cairn's own settings of that
    agent (a check, limits, the sandbox), kept out of agent.json so that the file stays tiny-agents'."""
    folder = config if config.is_dir() else config.parent
    path = folder / "cairn.json"
    return settings_file(path, "the agent folder's settings") if path.is_file() else {}


def invalid_setting(exc: ValidationError) -> str:
    """A settings error in one line, for every face that takes settings (CLI, API, Harbor's --ak)."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    message = "unknown setting (a typo?)" if first["type"] == "extra_forbidden" else first["msg"]
    return f"invalid setting {where}: {message}"


def resolve_config(options: dict[str, Any], template: str | None = None, model_elsewhere: bool = False,
                   layers: list[dict[str, Any]] | tuple[dict[str, Any], ...] = ()) -> RunConfig:
    """Built-in defaults < the template's cairn.json < `layers` (settings files, in order) < `options`,
    the settings the user gave (a nested dict like RunConfig's, holding only what was actually given: a
    None there is not a choice). A settings file may name the template; the template argument wins.

    The model is never a silent default: it comes from the options, the template, `$CAIRN_MODEL`, or
    (`model_elsewhere`) an agent folder that is applied afterwards; else this is a UsageError.
    Raises pydantic's ValidationError for a bad option."""
    name = template or options.get("template") or next(
        (layer["template"] for layer in reversed(layers) if layer.get("template")), None) or "default"
    merged = template_settings(name)
    for layer in layers:
        merged = _merge(merged, _model_block(layer))
    merged = _merge(merged, _drop_none(_model_block(options)))
    merged["template"] = name
    if not merged.get("model", {}).get("model") and not model_elsewhere:
        merged.setdefault("model", {})["model"] = default_model()
    return RunConfig.model_validate(merged)


def _model_block(settings: dict[str, Any]) -> dict[str, Any]:
    """Settings whose `model` is a plain model string (`{"model": "anthropic/..."}`, as a person writes it)
    with it as the model block it stands for (`{"model": {"model": "anthropic/..."}}`)."""
    if isinstance(settings.get("model"), str):
        return {**settings, "model": {"model": settings["model"]}}
    return settings


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in d.items():
        if isinstance(value, dict):
            value = _drop_none(value)
            if not value:
                continue
        if value is not None:
            out[key] = value
    return out


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def load_config(run: RunDir) -> RunConfig:
    """The run's stored config; an imported run's host-reaching settings only once it is trusted."""
    from orchestrator.store.trust import safe_config

    return safe_config(run.read_meta(), run.id)
