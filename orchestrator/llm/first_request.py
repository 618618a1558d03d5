"""What a model's first request costs before it is sent, and doing it ahead.

litellm and the openai client import a good part of themselves on the first request with tools, not at
their own import: about 1 s of CPU (measured with python -X importtime on a one-step run). A start does
that work while the container starts (`preload`, called by LLM.preload from runs/compose.py), and the
request itself skips litellm's MCP check (`without_mcp_gateway`), which would import more.
"""

from __future__ import annotations

import functools
import importlib

from orchestrator.llm import openai_compat
from orchestrator.llm.facts import litellm_module
from orchestrator.llm.tokenizer import encoding

# What litellm and the openai client import on the first request with tools, not before: about 1 s of
# CPU (measured with python -X importtime on a one-step run; litellm's MCP check is skipped).
FIRST_REQUEST_MODULES = ("openai.resources", "litellm.proxy.openai_files_endpoints.common_utils",
                         "litellm._service_logger", "httpcore",
                         "litellm.types.litellm_core_utils.streaming_chunk_builder_utils")


def preload(direct: bool) -> None:
    """Import what the first request imports lazily and load the tokenizer. `direct`: the run's requests
    go out through openai_compat.py, never litellm, so litellm is not loaded at all."""
    if not direct:
        litellm_module()
    for name in openai_compat.FIRST_REQUEST_MODULES if direct else FIRST_REQUEST_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            pass  # a library laid out otherwise: its first request imports what it needs, a little later
    encoding()


@functools.cache
def without_mcp_gateway() -> dict:
    """litellm.completion's flag to skip its MCP gateway, where this litellm has one.

    Given tools, litellm first checks whether any is a tool of its proxy's MCP gateway, and importing
    that check's code (the mcp package, the proxy's types) costs about half a second of CPU on the
    first request. cairn's tools are plain functions and never such tools, so the check is skipped with
    the flag litellm sets on its own inner calls. It is passed only to a litellm whose completion()
    reads it (litellm keeps it out of the provider's request): an older one would send it on.
    """
    import inspect

    completion = inspect.unwrap(litellm_module().completion)
    code = getattr(completion, "__code__", None)
    reads_it = code is not None and "_skip_mcp_handler" in code.co_consts
    return {"_skip_mcp_handler": True} if reads_it else {}
