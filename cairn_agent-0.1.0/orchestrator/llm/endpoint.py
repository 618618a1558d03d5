"""Where a model's requests go: the URL a person sees in a retry line, an error and the preflight.

litellm knows the endpoint of some providers and leaves others to its provider code; this module
asks litellm first and falls back on a short table of the common providers' public hosts. An
endpoint that cannot be told (a cloud provider with regions, an unknown provider) is None: the
messages then name the provider instead, and the preflight cannot check a connection.
"""

from __future__ import annotations

import os

# The public hosts of providers whose default endpoint litellm keeps inside its provider code.
DEFAULT_HOSTS = {
    "openai": "https://api.openai.com/v1",
    "text-completion-openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
    "gemini": "https://generativelanguage.googleapis.com",
    "mistral": "https://api.mistral.ai/v1",
    "deepseek": "https://api.deepseek.com",
    "openrouter": "https://openrouter.ai/api/v1",
    "together_ai": "https://api.together.xyz/v1",
    "fireworks_ai": "https://api.fireworks.ai/inference/v1",
    "xai": "https://api.x.ai/v1",
    "cohere": "https://api.cohere.ai",
    "cohere_chat": "https://api.cohere.ai",
    "ollama": "http://localhost:11434",
    "ollama_chat": "http://localhost:11434",
}
# Variables litellm reads for a provider's endpoint, when no api_base is given.
BASE_VARIABLES = {
    "openai": ("OPENAI_API_BASE", "OPENAI_BASE_URL"),
    "anthropic": ("ANTHROPIC_API_BASE", "ANTHROPIC_BASE_URL"),
    "ollama": ("OLLAMA_API_BASE",),
    "ollama_chat": ("OLLAMA_API_BASE",),
    "hosted_vllm": ("HOSTED_VLLM_API_BASE",),
    "openrouter": ("OPENROUTER_API_BASE",),
    "mistral": ("MISTRAL_API_BASE",),
    "deepseek": ("DEEPSEEK_API_BASE",),
}


def is_openai_named(model: str) -> bool:
    """`openai/NAME`: litellm places any such string with the OpenAI-compatible provider (no import needed)."""
    provider, _, name = model.partition("/")
    return provider == "openai" and bool(name.strip())


def provider_of(model: str, api_base: str | None = None) -> str:
    """litellm's provider for a model string; raises litellm's BadRequestError when it cannot tell."""
    import litellm

    return litellm.get_llm_provider(model=model, api_base=api_base)[1]


def endpoint_of(model: str, api_base: str | None = None) -> str | None:
    """The base URL requests for `model` go to, or None when it cannot be told without sending one."""
    if api_base:
        return api_base
    import litellm

    try:
        _model, provider, _key, resolved = litellm.get_llm_provider(model=model)
    except (litellm.exceptions.BadRequestError, ValueError):
        return None
    for name in BASE_VARIABLES.get(provider, ()):
        if os.environ.get(name):
            return os.environ[name]
    return resolved or DEFAULT_HOSTS.get(provider)
