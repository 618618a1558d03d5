"""litellm's facts about a model (its context window, whether it has a price), remembered on disk.

Asking litellm means importing it: 2-3 s of CPU at every start. Its answer for a model string only
changes when litellm (or its bundled price list) does, so the answer is kept in
`~/.cache/cairn/model-facts.json` (`$XDG_CACHE_HOME` honoured), under a key made of the model string,
the installed litellm's files (their size and time of change: an upgrade rewrites them) and
`LITELLM_LOCAL_MODEL_COST_MAP` (without it litellm reads a price list from the network, which may say
otherwise). A start that finds its model there needs litellm only if it sends through litellm
(client.py); a cache that cannot be read or written is only a slower start.
"""

from __future__ import annotations

import importlib.util
import json
import os
import threading
from typing import Any
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ModelFacts:
    """What litellm's list says about a model: its input window (None: not listed) and whether it is priced.

    A listed price of 0 counts as no price: the list holds zeros for models it does not really price,
    and a local model has no price in USD anyway, so a USD budget cannot apply to it.
    """

    max_input_tokens: int | None = None
    priced: bool = False


def model_facts(model: str) -> ModelFacts:
    """litellm's facts about `model`: from the cache when litellm has not changed, else from litellm."""
    key = _key(model)
    cached = _read().get(key) if key is not None else None
    if isinstance(cached, dict):
        return ModelFacts(max_input_tokens=cached.get("max_input_tokens"), priced=bool(cached.get("priced")))
    facts = _ask_litellm(model)
    if key is not None:
        _remember(key, facts)
    return facts


def cache_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "cairn" / "model-facts.json"


def _ask_litellm(model: str) -> ModelFacts:

    litellm = litellm_module()
    import openai

    try:
        info = dict(litellm.get_model_info(model))
    except (litellm.exceptions.ModelNotMappedError, openai.APIError):
        return ModelFacts()  # a model litellm does not know
    window = info.get("max_input_tokens")
    return ModelFacts(max_input_tokens=int(window) if window else None,
                      priced=bool(info.get("input_cost_per_token") or info.get("output_cost_per_token")))


def _key(model: str) -> str | None:
    """The model string with what litellm's answer depends on; None when litellm cannot be found."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    package = Path(next(iter(spec.submodule_search_locations)))
    stamps = []
    for name in ("__init__.py", "model_prices_and_context_window_backup.json"):
        try:
            stat = (package / name).stat()
        except OSError:
            return None
        stamps.append(f"{stat.st_size}:{stat.st_mtime_ns}")
    local = os.environ.get("LITELLM_LOCAL_MODEL_COST_MAP", "").lower() == "true"
    return json.dumps([model, str(package), stamps, local])


def _read() -> dict:
    try:
        data = json.loads(cache_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _remember(key: str, facts: ModelFacts) -> None:
    path = cache_file()
    current = json.loads(key)[1:]
    # Answers of a litellm since replaced are dropped: the file holds one version's answers.
    data = {k: v for k, v in _read().items() if _same_litellm(k, current)}
    data[key] = {"max_input_tokens": facts.max_input_tokens, "priced": facts.priced}
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")  # a batch's runs are threads
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(data), encoding="utf-8")
        os.replace(tmp, path)  # whole or not at all, even with runs starting side by side
    except OSError:
        tmp.unlink(missing_ok=True)  # a read-only home: the next start asks litellm again


def _same_litellm(key: str, current: list) -> bool:
    try:
        return json.loads(key)[1:] == current
    except (ValueError, TypeError):
        return False


def litellm_module() -> Any:  # noqa: ANN401 - the litellm module
    """litellm, imported on first use (2-3 s) and set up for cairn."""
    import litellm

    litellm.suppress_debug_info = True  # no "Give Feedback / Get Help" banners on the user's terminal
    return litellm
