"""What one model call gives back, and the errors it can raise.

These types are light on purpose (no litellm import), so the loop, the context engine and the
event log can use them without paying for litellm's import.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from orchestrator.errors import CairnError


class Usage(BaseModel):
    """Measured cost of one call: the figures a person later sees come from here."""

    prompt_tokens: int = 0
    cached_tokens: int = Field(0, description="Prompt tokens read from the provider's prefix cache.")
    cache_write_tokens: int = Field(0, description="Prompt tokens written to the cache (Anthropic).")
    completion_tokens: int = 0
    cost_usd: float | None = Field(None, description="None when the price is unknown; never a made-up 0.")
    latency_s: float = Field(0.0, description="Wall time of the call, retries and their waits included.")


class ToolCall(BaseModel):
    id: str
    name: str
    arguments: str = Field(description="Raw, as the model wrote them: may be invalid JSON.")


class Reply(BaseModel):
    message: dict = Field(description="The assistant message in OpenAI format, ready to store in history.")
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    finish_reason: str | None = None
    retries: int = Field(0, description="Failed attempts before this answer (rate limits, timeouts, 5xx).")
    reasoning: str | None = Field(None, description="The model's reasoning, where the provider gave it "
                                                    "(`reasoning_content`): recorded, never sent back.")


class ModelError(CairnError):
    """The model call failed for good: a 4xx, or transient errors that outlasted the retries."""

    def __init__(self, message: str, status_code: int | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint)
        self.status_code = status_code


class ContextOverflow(ModelError):
    """The request did not fit the model's context window: compact and try again."""


def connect_hint(api_base_given: bool) -> str:
    """What to look at when the endpoint cannot be reached (cairn reaches it from the host). Here, with
    the errors, so that the client and the preflight (which imports the client) both can name it."""
    if api_base_given:
        return "is the server running, and is --api-base right? (cairn reaches it from this machine, not the sandbox)"
    return "check this machine's network (and HTTPS_PROXY, if a proxy is needed)"


def assistant_message(content: str | None, tool_calls: list[ToolCall]) -> dict:
    """The one canonical dict for an answer, so the same answer always gives the same bytes."""
    message: dict = {"role": "assistant", "content": content or None}
    if tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in tool_calls
        ]
    return message
