"""Model calls. Only the types live here; import `orchestrator.llm.client` for `LLM` (it loads litellm when a model needs it)."""

from orchestrator.llm.types import ContextOverflow, ModelError, Reply, ToolCall, Usage

__all__ = ["ContextOverflow", "ModelError", "Reply", "ToolCall", "Usage"]
