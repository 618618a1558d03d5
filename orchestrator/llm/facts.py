"""litellm's facts about a model (its window, its prices, how litellm sends it), remembered on disk.

Asking litellm means importing it: 2-3 s of CPU at every start. Its answer for a model string only
changes when litellm (or its bundled price list) does, so the answer is kept in
`~/.cache/cairn/model-facts.json` (`$XDG_CACHE_HOME` honoured), under a key made of the model string,
the installed litellm's files (their size and time of change: an upgrade rewrites them) and
`LITELLM_LOCAL_MODEL_COST_MAP` (without it litellm reads a price list from the network, which may say
otherwise). A start that finds its model there needs litellm only if it sends through litellm
(client.py, direct.py); a cache that cannot be read or written is only a slower start.

Besides the window, the facts say what a request without litellm must reproduce: litellm's provider
and the model's name as litellm sends it, whether litellm sends an OpenAI chat request as it is given
(`chat_as_is`), and the model's prices per token, measured with litellm's own cost function and kept
only when that function is linear in the tokens for this model (no tiers, no separate reasoning price),
so that a direct request is billed to the same fraction of a cent.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import threading
from typing import Any
from dataclasses import dataclass
from pathlib import Path


VERSION = 2  # of an entry's fields: an entry of another version is asked again


@dataclass(frozen=True)
class ModelFacts:
    """What litellm's list says about a model: its input window (None: not listed) and whether it is priced.

    A listed price of 0 counts as no price: the list holds zeros for models it does not really price,
    and a local model has no price in USD anyway, so a USD budget cannot apply to it.
    """

    max_input_tokens: int | None = None
    priced: bool = False
    provider: str | None = None  # litellm's provider for the model string (None: litellm cannot tell)
    api_model: str | None = None  # the model's name in the request litellm sends
    chat_as_is: bool = False  # litellm sends an OpenAI chat request unchanged (see _sends_as_is)
    prices: dict[str, float] | None = None  # USD a token: input, cached, cache_write, output (see _linear_prices)


def model_facts(model: str) -> ModelFacts:
    """litellm's facts about `model`: from the cache when litellm has not changed, else from litellm."""
    key = _key(model)
    cached = cached_facts(model, key)
    if cached is not None:
        return cached
    facts = _ask_litellm(model)
    if key is not None:
        _remember(key, facts)
    return facts


def cached_facts(model: str, key: str | None = None) -> ModelFacts | None:
    """The facts about `model` kept from an earlier start, without asking litellm; None when there are none."""
    key = key if key is not None else _key(model)
    entry = _read().get(key) if key is not None else None
    if not isinstance(entry, dict) or entry.get("version") != VERSION:
        return None  # never asked, or asked by a cairn that kept fewer facts
    prices = entry.get("prices")
    return ModelFacts(max_input_tokens=entry.get("max_input_tokens"), priced=bool(entry.get("priced")),
                      provider=entry.get("provider"), api_model=entry.get("api_model"),
                      chat_as_is=bool(entry.get("chat_as_is")),
                      prices={k: float(v) for k, v in prices.items()} if isinstance(prices, dict) else None)


def cache_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "cairn" / "model-facts.json"


def _ask_litellm(model: str) -> ModelFacts:
    litellm = litellm_module()
    import openai

    try:
        api_model, provider, _key, _base = litellm.get_llm_provider(model=model)
    except (litellm.exceptions.BadRequestError, ValueError):
        api_model = provider = None
    try:
        info = dict(litellm.get_model_info(model))
    except (litellm.exceptions.ModelNotMappedError, openai.APIError):
        # A model litellm does not price or size; an `openai/NAME` of a server of one's own is one.
        return ModelFacts(provider=provider, api_model=api_model,
                          chat_as_is=provider is not None and _sends_as_is(litellm, api_model, provider, {}))
    window = info.get("max_input_tokens")
    priced = bool(info.get("input_cost_per_token") or info.get("output_cost_per_token"))
    return ModelFacts(max_input_tokens=int(window) if window else None, priced=priced, provider=provider,
                      api_model=api_model,
                      chat_as_is=provider is not None and _sends_as_is(litellm, api_model, provider, info),
                      prices=_linear_prices(litellm, model) if priced else None)


# litellm's chat configs for the OpenAI provider that pass cairn's parameters on unchanged (checked for
# every OpenAI chat model litellm lists: the same body as cairn's own, tests/llm/test_direct_path.py). The
# O-series and GPT-5 configs rename max_tokens and refuse temperature, so those models keep litellm.
AS_IS_CONFIGS = ("OpenAIGPTConfig", "OpenAIUnknownModelConfig")


def _sends_as_is(litellm: Any, api_model: str | None, provider: str, info: dict) -> bool:  # noqa: ANN401
    """Whether litellm sends this model's chat request to /chat/completions as cairn builds it."""
    if provider != "openai" or not api_model or info.get("mode") not in (None, "chat"):
        return False  # another provider's translation, or a model litellm sends to /responses
    try:
        config = litellm.ProviderConfigManager.get_provider_chat_config(model=api_model,
                                                                        provider=litellm.LlmProviders.OPENAI)
    except Exception:  # noqa: BLE001 - a litellm without this lookup: then litellm keeps the model
        return False
    return type(config).__name__ in AS_IS_CONFIGS


# Token counts the prices are measured at: small, and past every tier a price list uses (128k, 200k...).
PROBE_SIZES = (1_000, 1_000_000)


def _linear_prices(litellm: Any, model: str) -> dict[str, float] | None:  # noqa: ANN401
    """USD a token of each kind, from litellm.cost_per_token; None when its cost is not linear in them.

    Each price is the cost of a usage of that kind alone, divided by its tokens, at two sizes; a sum
    of such usages must then cost the sum, reasoning tokens priced as other output. Any other shape
    (a tier above some size, a reasoning price of its own) keeps the model's cost with litellm.
    """
    from litellm.types.utils import CompletionTokensDetailsWrapper, PromptTokensDetailsWrapper, Usage

    def cost(prompt: int = 0, cached: int = 0, written: int = 0, completion: int = 0, reasoning: int = 0) -> float:
        usage = Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion,
                      prompt_tokens_details=PromptTokensDetailsWrapper(cached_tokens=cached),
                      completion_tokens_details=CompletionTokensDetailsWrapper(reasoning_tokens=reasoning),
                      cache_creation_input_tokens=written)
        prompt_cost, completion_cost = litellm.cost_per_token(model=model, prompt_tokens=prompt,
                                                              completion_tokens=completion, usage_object=usage)
        return prompt_cost + completion_cost

    try:
        per_size = [{"input": cost(prompt=n) / n, "cached": cost(prompt=n, cached=n) / n,
                     "cache_write": cost(prompt=n, written=n) / n, "output": cost(completion=n) / n}
                    for n in PROBE_SIZES]
        prices = per_size[0]
        if any(not _close(prices[k], other[k]) for other in per_size[1:] for k in prices):
            return None  # a price that changes with the size of the request
        mixed = dict(prompt=5_000, cached=3_000, written=1_000, completion=700, reasoning=300)
        if not _close(cost(**mixed), direct_cost(prices, 5_000, 3_000, 1_000, 700)):
            return None
    except Exception:  # noqa: BLE001 - litellm cannot price such a usage: it keeps the model's cost
        return None
    return prices


def direct_cost(prices: dict[str, float], prompt: int, cached: int, written: int, completion: int) -> float:
    """USD of one request at linear `prices`: as litellm.cost_per_token bills it (checked by _linear_prices).
    `prompt` includes the cached and written tokens, as providers report it."""
    fresh = max(prompt - cached - written, 0)
    return (fresh * prices["input"] + cached * prices["cached"] + written * prices["cache_write"]
            + completion * prices["output"])


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1e-12)


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
    # Answers of a litellm since replaced are dropped; those of another installed litellm (another
    # virtualenv on the machine shares this file) are kept, or each install would evict the other's.
    data = {k: v for k, v in _read().items() if _still_valid(k, current)}
    data[key] = {"version": VERSION, **dataclasses.asdict(facts)}
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")  # a batch's runs are threads
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(data), encoding="utf-8")
        os.replace(tmp, path)  # whole or not at all, even with runs starting side by side
    except OSError:
        tmp.unlink(missing_ok=True)  # a read-only home: the next start asks litellm again


def _still_valid(key: str, current: list) -> bool:
    """Whether a kept answer's litellm is still installed as it was (the current one, or another)."""
    try:
        _model, package, stamps, _local = json.loads(key)
    except (ValueError, TypeError):
        return False
    if package == current[0]:
        return stamps == current[1]
    return Path(package).is_dir()


def litellm_module() -> Any:  # noqa: ANN401 - the litellm module
    """litellm, imported on first use (2-3 s) and set up for cairn."""
    import litellm

    litellm.suppress_debug_info = True  # no "Give Feedback / Get Help" banners on the user's terminal
    return litellm
