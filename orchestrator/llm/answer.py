"""One answer of the model, assembled from a stream's chunks (or from a whole response, one chunk so to
speak) as litellm and the openai client give them: its text, its reasoning, its tool calls put together
from their pieces, and its usage as the provider reported it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from orchestrator.llm.types import ToolCall, Usage


@dataclass
class Answer:
    """One answer assembled from a stream's chunks, or from a whole response (one chunk, so to speak)."""

    content: str = ""
    reasoning: str = ""  # litellm's `reasoning_content` (Anthropic's thinking, DeepSeek's, vLLM's parsers)
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    raw_usage: object | None = None  # litellm's Usage, kept for litellm's cost calculation

    def add(self, chunk: object, on_text: Callable[[str], None] | None) -> None:
        self.raw_usage = getattr(chunk, "usage", None) or self.raw_usage  # the last chunk's, in a stream
        for choice in getattr(chunk, "choices", None) or []:
            self.finish_reason = choice.finish_reason or self.finish_reason
            # A stream's chunk carries a delta; a whole response, the message (its calls without an index).
            delta = getattr(choice, "delta", None) or choice.message
            thought = getattr(delta, "reasoning_content", None) or getattr(delta, "reasoning", None)
            if isinstance(thought, str):  # what some servers send directly as `reasoning`
                self.reasoning += thought
            if delta.content:
                self.content += delta.content
                if on_text is not None:
                    on_text(delta.content)
            for piece in delta.tool_calls or []:
                self._add_tool_call_piece(piece)

    def _add_tool_call_piece(self, piece: object) -> None:
        index = getattr(piece, "index", None)
        if index is None:  # whole calls without an index (a whole response, some providers): one call per id
            known = [c.id for c in self.tool_calls]
            index = known.index(piece.id) if piece.id in known else len(self.tool_calls)
        while len(self.tool_calls) <= index:
            self.tool_calls.append(ToolCall(id="", name="", arguments=""))
        call = self.tool_calls[index]
        call.id = piece.id or call.id
        function = piece.function
        if function is not None:
            # Some servers repeat the name in every delta; only the first one counts.
            call.name = call.name or function.name or ""
            call.arguments += function.arguments or ""

    def usage(self, cost: float | None, latency_s: float) -> Usage:
        """The answer's usage as the provider reported it (zeros where it did not)."""
        def reported(holder: object, name: str) -> int:
            return getattr(holder, name, None) or 0

        return Usage(
            prompt_tokens=reported(self.raw_usage, "prompt_tokens"),
            cached_tokens=reported(getattr(self.raw_usage, "prompt_tokens_details", None), "cached_tokens"),
            cache_write_tokens=reported(self.raw_usage, "cache_creation_input_tokens"),
            completion_tokens=reported(self.raw_usage, "completion_tokens"),
            cost_usd=cost,
            latency_s=latency_s,
        )
