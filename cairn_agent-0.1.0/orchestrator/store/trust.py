"""Trust of a run made elsewhere: which of its settings reach this machine, and when they apply.

`cairn import` marks a run `"imported": {"archive", "at", "trusted": false}` in its run.json. Until the
user trusts it (`cairn resume --trust`), its settings that reach the host are not applied: the
endpoint the user's API key would be sent to, host variables passed into the sandbox, the image and
runtime that run, the sandbox user, the network, MCP servers (commands, env, URLs) and the agent.json
they come from, a workspace folder outside the run, and a machine it carries (`export --with-machine`:
an image that would be loaded into the engine). A setting equal to cairn's safe default needs
no trust. `cairn resume` names the others and refuses, unless the user gives their own values
(`--api-base`, `--model`, `--network`), resumes with cairn's defaults (`--safe-defaults`) or trusts
the run. Values the user gave are remembered (`imported.approved`), so they are not asked again.

Every other reader of a run's config (`load_config`: `cairn shell`, batches, sub-agents) gets the
untrusted settings replaced by the defaults, so no path applies them by accident.
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import dataclass
from typing import Any

from orchestrator.config import RunConfig, stored_config
from orchestrator.errors import UsageError

# (setting, its safe default, what it would do here). Settings absent from a cairn's RunConfig are
# dropped when the config is read, so naming one here (sandbox.runtime) is harmless.
HOST_SETTINGS: tuple[tuple[str, Any, str], ...] = (
    ("model.api_base", None, "your API key would be sent to this endpoint"),
    ("sandbox.pass_env", [], "these variables of yours would be passed into the sandbox"),
    ("sandbox.env", {}, "these variables would be set in the sandbox"),
    ("sandbox.image", None, "this image would run on your machine"),
    ("sandbox.runtime", None, "this container runtime would run the sandbox"),
    ("sandbox.user", None, "the agent would run as this uid:gid"),
    ("sandbox.network", "none", "the agent would reach the network"),
    ("mcp.servers", [], "these MCP servers would be started or reached from your machine"),
    ("mcp.agent_file", None, "this file of yours would be read for MCP servers and an API key"),
)
# Reset along with a setting above: it means nothing without it.
_ALONG = {"mcp.agent_file": ("mcp.api_key_in_file", False)}


@dataclass(frozen=True)
class HostSetting:
    name: str
    value: Any
    why: str

    def line(self) -> str:
        shown = json.dumps(self.value, ensure_ascii=False, sort_keys=True)
        if len(shown) > 120:
            shown = shown[:117] + "..."
        return f"{self.name} = {shown} ({self.why})"


def may_load_machine(meta: dict[str, Any]) -> bool:
    """Whether the machine a run carried (`export --with-machine`) may be loaded: a run made here, or a
    trusted one; `--safe-defaults` goes on in a fresh container instead."""
    return not is_untrusted(meta)


def is_untrusted(meta: dict[str, Any]) -> bool:
    """An imported run the user has not trusted."""
    if "imported" not in meta:
        return False
    imported = meta["imported"]
    return not (isinstance(imported, dict) and imported.get("trusted") is True)


def host_settings(meta: dict[str, Any]) -> list[HostSetting]:
    """The settings of an untrusted run that would reach this machine: not cairn's default, and not a
    value the user gave on an earlier resume. Empty for a run made here or trusted."""
    if not is_untrusted(meta):
        return []
    imported = meta["imported"] if isinstance(meta["imported"], dict) else {}
    approved = imported.get("approved") if isinstance(imported.get("approved"), dict) else {}
    found = []
    if imported.get("machine") is True and not approved.get("machine"):
        found.append(HostSetting("machine", "state/machine.tar", "this container image from the archive would be "
                                 "loaded into your Docker engine, and the agent would run in it"))
    if meta.get("workspace"):
        found.append(HostSetting("workspace", meta["workspace"], "a folder of your machine the agent would read and write"))
    config = meta.get("config") if isinstance(meta.get("config"), dict) else {}
    for name, default, why in HOST_SETTINGS:
        value = _get(config, name, default)
        if value in (None, default):
            continue
        if name == "mcp.servers" and isinstance(value, list):
            value = [_server(s) for s in value]
        if name in approved and approved[name] == value:
            continue
        found.append(HostSetting(name, value, why))
    return found


def safe_config(meta: dict[str, Any], run_id: str = "") -> RunConfig:
    """The run's config with every setting `host_settings` names replaced by cairn's default."""
    config = _config_of(meta, run_id)
    for setting in host_settings(meta):
        _reset(config, setting.name)
    return _validated(config, run_id)


def _config_of(meta: dict[str, Any], run_id: str) -> dict[str, Any]:
    config = meta.get("config", {})
    if not isinstance(config, dict):
        raise UsageError(f"run {run_id} has no readable config in its state/run.json")
    return copy.deepcopy(config)


def _validated(config: dict[str, Any], run_id: str) -> RunConfig:
    try:
        return stored_config(config)
    except ValueError as exc:  # pydantic's ValidationError: a run.json edited or made by hand
        first = str(exc).strip().splitlines()
        raise UsageError(f"run {run_id} has an invalid config in its state/run.json: {' '.join(first[:3])}") from None


def settle(meta: dict[str, Any], *, model: str | None = None, api_base: str | None = None,
           network: str | None = None, trust: bool = False, safe_defaults: bool = False,
           run_id: str = "") -> tuple[RunConfig, dict[str, Any]]:
    """The config a resume runs with, and the run.json `meta` to write (trust and approvals recorded).

    Raises UsageError, naming one setting a line, while an untrusted run has a host-reaching setting the
    user neither gave a value for, nor trusted, nor asked to reset (`safe_defaults`)."""
    meta = copy.deepcopy(meta)
    config = _config_of(meta, run_id)
    untrusted = is_untrusted(meta) and not trust
    if is_untrusted(meta) and trust:
        meta["imported"] = {**(meta["imported"] if isinstance(meta["imported"], dict) else {}),
                            "trusted": True, "trusted_at": time.time()}
    if untrusted:
        given = {"model.api_base": api_base is not None or model is not None, "sandbox.network": network is not None}
        pending = [s for s in host_settings(meta) if not given.get(s.name)]
        if pending and not safe_defaults:
            raise _refusal(meta, pending, run_id)
        for setting in pending:
            _reset(config, setting.name)
            if setting.name == "workspace":
                meta.pop("workspace", None)
            if setting.name == "machine":  # the run goes on in a fresh container of cairn's image
                meta["imported"]["machine"] = False
        if model is not None and api_base is None:
            _reset(config, "model.api_base")  # another model never goes to the archive's endpoint
    cfg = _validated(config, run_id)
    if model is not None:
        cfg.model.model = model
    if api_base is not None:
        cfg.model.api_base = api_base
    if network is not None:
        cfg.sandbox.network = network  # type: ignore[assignment] - checked by the command line
    meta["config"] = cfg.model_dump(mode="json")
    if untrusted:  # what is left differing from the defaults is the user's own choice: not asked again
        meta["imported"] = {**meta["imported"], "approved": {
            s.name: s.value for s in host_settings({**meta, "imported": {"trusted": False}})}}
    return cfg, meta


def _refusal(meta: dict[str, Any], pending: list[HostSetting], run_id: str) -> UsageError:
    imported = meta["imported"] if isinstance(meta["imported"], dict) else {}
    source = f" from {imported['archive']}" if imported.get("archive") else ""
    lines = [f"run {run_id} was imported{source} and is not trusted; these settings of it reach your "
             f"machine and are not applied:"] + [f"  {s.line()}" for s in pending]
    own = [option for name, option in (("model.api_base", "--api-base URL or --model M"),
                                       ("sandbox.network", "--network none")) if any(s.name == name for s in pending)]
    hint = (f"cairn resume {run_id} --trust applies them; --safe-defaults resumes with cairn's defaults instead"
            + (f"; or give your own: {', '.join(own)}" if own else ""))
    return UsageError("\n".join(lines), hint=hint)


def _get(config: dict[str, Any], name: str, default: Any) -> Any:
    node: Any = config
    for key in name.split("."):
        if not isinstance(node, dict) or key not in node:
            return default
        node = node[key]
    return node


def _reset(config: dict[str, Any], name: str) -> None:
    defaults = {n: d for n, d, _why in HOST_SETTINGS}
    if name not in defaults:
        return
    for setting, default in ((name, defaults[name]), *([_ALONG[name]] if name in _ALONG else [])):
        section, key = setting.split(".")
        if isinstance(config.get(section), dict):
            config[section][key] = copy.deepcopy(default)


def _server(server: Any) -> Any:
    """An MCP server as the user should see it: what runs or is reached, and the names of its env."""
    if not isinstance(server, dict):
        return server
    keep = {k: server[k] for k in ("name", "type", "command", "args", "url") if server.get(k)}
    if server.get("env"):
        keep["env"] = sorted(server["env"]) if isinstance(server["env"], dict) else server["env"]
    return keep
