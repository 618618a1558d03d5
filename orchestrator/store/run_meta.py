"""The schema of a run's `state/run.json`: the fields cairn writes there, and the JSON type each must have.

A run made here holds what cairn wrote. An imported one holds what its archive said, so `cairn import`
checks it against this schema and refuses a run.json that does not fit, in one line; and every reader
(`ls`, the page's list, `show`, `report`) checks it too (a run.json edited by hand, or written by
another cairn), and shows a run whose run.json does not fit as unreadable, saying why, while the others
are shown as usual. Fields this cairn does not know are left alone.
"""

from __future__ import annotations

from typing import Any

from orchestrator.status import Status, is_status

NULL = type(None)
NUMBER = (int, float)
# field -> its JSON types; with NULL it may also be null.
FIELDS: dict[str, tuple[type, ...]] = {
    "id": (str,), "task": (str,), "status": (str,), "result": (str, NULL), "steps": (int,),
    "created": NUMBER, "updated": NUMBER, "usage": (dict, NULL), "config": (dict,), "check": (dict, NULL),
    "workspace": (str,), "workspace_before": (str, NULL), "disk_baseline": (int, NULL), "depth": (int, NULL),
    "imported": (dict,), "forked_from": (dict,), "harbor": (dict,), "machine": (dict, NULL),
    "workdir_source": (dict,),
}
# object field -> its own fields (checked when the object is there).
INSIDE: dict[str, dict[str, tuple[type, ...]]] = {
    "usage": {"prompt_tokens": (*NUMBER, NULL), "cached_tokens": (*NUMBER, NULL),
              "completion_tokens": (*NUMBER, NULL), "cost_usd": (*NUMBER, NULL),
              "cache_hit_ratio": (*NUMBER, NULL)},
    "check": {"command": (str, NULL), "passed": (bool, NULL), "exit_code": (int, NULL), "output_path": (str, NULL),
              "round": (int, NULL)},
    "config": {"model": (dict,), "check": (dict, NULL), "sandbox": (dict,)},
    "forked_from": {"run": (str,), "step": (int,)},
    "imported": {"archive": (str,), "at": NUMBER, "trusted": (bool,), "machine": (bool,), "approved": (dict,)},
    "machine": {"image": (str, NULL)},
}


def problem(meta: Any) -> str | None:  # noqa: ANN401 - whatever the file held
    """What is wrong with a run.json that parsed, in a few words (`state/run.json: check is str, not an
    object`); None when it fits the schema."""
    if not isinstance(meta, dict):
        return f"state/run.json is {_kind(meta)}, not an object"
    for field, types in FIELDS.items():
        if field in meta and not _fits(meta[field], types):
            return f"state/run.json: {field} is {_kind(meta[field])}, not {_wanted(types)}"
        inner = INSIDE.get(field)
        if inner and isinstance(meta.get(field), dict):
            for key, kinds in inner.items():
                value = meta[field].get(key)
                if key in meta[field] and not _fits(value, kinds):
                    return f"state/run.json: {field}.{key} is {_kind(value)}, not {_wanted(kinds)}"
    if not is_status(meta.get("status", Status.RUNNING)):
        return f"state/run.json: status {str(meta['status'])[:40]!r} is not a run status"
    model = (meta.get("config") or {}).get("model")
    if isinstance(model, dict) and "model" in model and not isinstance(model["model"], (str, NULL)):
        return f"state/run.json: config.model.model is {_kind(model['model'])}, not a string"
    return None


def _fits(value: Any, types: tuple[type, ...]) -> bool:  # noqa: ANN401
    return isinstance(value, types) and not (isinstance(value, bool) and bool not in types)


def _kind(value: Any) -> str:  # noqa: ANN401
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", NULL: "null",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)


def _wanted(types: tuple[type, ...]) -> str:
    names = list(dict.fromkeys(_kind(t()) if t is not NULL else "null" for t in types))
    return " or ".join(names)
