"""What one model call cost in USD: by the scripted model's own `pricing`, or by litellm's price list.

The client asks once an answer is in, with the usage the provider reported (litellm's Usage object, or
the answer's fields on the direct path of openai_compat.py). No price known is None, never a made-up
0: a USD budget then cannot be enforced, and the loop says so (agent/guards.py). litellm prices the cache
reads and writes apart from the rest of the prompt, which is why its calculation is used rather than
tokens times a price.
"""

from __future__ import annotations

from orchestrator.llm.direct import usage_cost
from orchestrator.llm.facts import ModelFacts, litellm_module


def cost_usd(model: str, raw_usage: object | None, pricing: dict | None, facts: ModelFacts,
             direct: bool = False) -> float | None:
    """USD for one answer's `raw_usage`. `pricing` is a script's (`input`, `output` and optionally
    `cached_input`, per token); `facts` say whether litellm's list prices `model`, and at what linear
    prices, which an answer that came `direct` (without litellm: direct.py) is billed at."""
    if raw_usage is None or not (pricing or facts.priced):
        return None
    if direct and facts.prices is not None:
        return usage_cost(facts.prices, raw_usage)  # litellm's prices, without litellm
    custom = None
    if pricing:
        custom = {
            "input_cost_per_token": pricing["input"],
            "output_cost_per_token": pricing["output"],
            "cache_read_input_token_cost": pricing.get("cached_input", pricing["input"]),
        }
    prompt_cost, completion_cost = litellm_module().cost_per_token(
        model=model,
        prompt_tokens=getattr(raw_usage, "prompt_tokens", 0) or 0,
        completion_tokens=getattr(raw_usage, "completion_tokens", 0) or 0,
        usage_object=raw_usage,  # carries the cache reads and writes, which are priced apart
        custom_cost_per_token=custom,
    )
    return prompt_cost + completion_cost
