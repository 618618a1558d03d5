"""Which models are asked without litellm (through openai_compat.py), where, and what a request costs.

litellm's import costs 2-3 s of CPU at every start (bench/startup_bench.py). For a model that litellm
hands to the OpenAI chat-completions API unchanged, it adds nothing a request needs once its facts
are known (facts.py: kept from an earlier start): the body is the one cairn builds, the endpoint and
key come from the same settings and variables litellm reads, and the cost is litellm's own prices,
applied the way its cost function applies them. Such a model goes direct when:
- litellm places it with the `openai` provider and its chat config passes the request on as it is
  (`ModelFacts.chat_as_is`: not the O-series or GPT-5 configs, which rewrite parameters, and not a
  model litellm sends to the Responses API); `openai/NAME` at any --api-base, or at api.openai.com;
- it is unpriced, or its prices are linear (`ModelFacts.prices`), so its cost needs no litellm;
- nothing litellm or the openai client would add is set: an organization or project header, the
  switch that sends every OpenAI chat to the Responses API; and, for api.openai.com, there is a key
  (without one litellm's own message says what is missing).
Every other model, and the scripted model (docs/contracts.md), goes through litellm.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from orchestrator.config import ModelConfig
from orchestrator.llm.facts import ModelFacts, direct_cost
from orchestrator.llm.openai_compat import Endpoint

OPENAI_DEFAULT_BASE = "https://api.openai.com/v1"
# litellm reads the base in this order (after an api_base given), as its OpenAI chat handler does.
BASE_VARIABLES = ("OPENAI_BASE_URL", "OPENAI_API_BASE")
# Headers the openai client (or litellm) adds from these: a request without them would differ.
HEADER_VARIABLES = ("OPENAI_ORG_ID", "OPENAI_ORGANIZATION", "OPENAI_PROJECT_ID", "OPENAI_PROJECT")
RESPONSES_SWITCH = "LITELLM_ROUTE_ALL_CHAT_OPENAI_TO_RESPONSES"


def direct_endpoint(cfg: ModelConfig, facts: ModelFacts) -> Endpoint | None:
    """Where `cfg`'s requests go without litellm, or None when they need litellm (see the module's text)."""
    if facts.provider != "openai" or not facts.chat_as_is or not facts.api_model:
        return None
    if facts.priced and facts.prices is None:
        return None  # a price litellm's cost function applies in a way not reproduced here
    load_litellm_dotenv()  # the variables litellm's import would have read, read here too
    if os.environ.get(RESPONSES_SWITCH, "").lower() == "true" or any(os.environ.get(v) for v in HEADER_VARIABLES):
        return None
    key = cfg.api_key.get_secret_value() if cfg.api_key is not None else os.environ.get("OPENAI_API_KEY")
    base = cfg.api_base or next((os.environ[v] for v in BASE_VARIABLES if os.environ.get(v)), None)
    if base is None:
        if not key:
            return None
        base = OPENAI_DEFAULT_BASE
    # A server of one's own may need no key; the openai client refuses to send without one (client._request).
    return Endpoint(base, key or "none", model=facts.api_model)


def usage_cost(prices: dict[str, float], usage: Any) -> float:  # noqa: ANN401 - an answer's usage object
    """USD of one direct answer's usage (an OpenAI usage block read by attribute), as litellm bills it."""
    details = getattr(usage, "prompt_tokens_details", None)
    return direct_cost(prices,
                       prompt=getattr(usage, "prompt_tokens", None) or 0,
                       cached=getattr(details, "cached_tokens", None) or 0,
                       written=getattr(usage, "cache_creation_input_tokens", None) or 0,
                       completion=getattr(usage, "completion_tokens", None) or 0)


_dotenv_loaded = False


def load_litellm_dotenv() -> None:
    """Load the `.env` file litellm's import loads (it looks from its own package folder upward, in its
    default DEV mode), never overriding a variable already set, so a key kept there reaches a direct
    request too."""
    global _dotenv_loaded
    if _dotenv_loaded or os.environ.get("LITELLM_MODE", "DEV") != "DEV":
        return
    _dotenv_loaded = True
    spec = importlib.util.find_spec("litellm")
    if spec is None or spec.origin is None:
        return
    package = Path(spec.origin).parent
    found = next((folder / ".env" for folder in (package, *package.parents) if (folder / ".env").is_file()), None)
    if found is not None:
        import dotenv

        dotenv.load_dotenv(found, override=os.environ.get("LITELLM_DEV_ENV_HOT_RELOAD") == "True")
