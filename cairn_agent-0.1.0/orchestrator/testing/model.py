"""The scripted model in memory: the same script and turns as `--model scripted:PATH`, with no HTTP server
and no litellm.

The turns are played by the very code that serves them over HTTP (`ScriptedServer.respond` in
orchestrator/llm/scripted.py), so a script means the same here as there: each request consumes the next
turn, usage is counted with the same tokenizer and prefix cache, a request longer than the script's
`context_window` is refused without consuming a turn. What the litellm client would do with the answer
is done here in a few lines; what it would do with a failure is not:

- a `fail` turn with an HTTP status raises `ModelError` at once: this model never retries (retries,
  back-off and Retry-After belong to the litellm client, orchestrator/llm/client.py, and are tested with it);
- `"overflow"`, and a request too long for the script's window, raise `ContextOverflow`, as the client does;
- `"timeout"` raises `ModelError` (no answer), without waiting;
- `"malformed"` answers a tool call whose arguments are not JSON, as over HTTP.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.llm.scripted import DEFAULT_CONTEXT_WINDOW, ScriptedServer, load_script, script_spec
from orchestrator.llm.types import ContextOverflow, ModelError, Reply, ToolCall, Usage, assistant_message


class ScriptedModel:
    """A model port (`complete`, `context_window`) that plays a script in this process.

    `script` is a script dict (`{"turns": [...]}`), a path to a JSON file, a built-in script's name
    (`demo`), or a `scripted:…` model string. `requests` holds every request body it received, in the
    shape the HTTP server would have seen (`messages`, `tools`, `tool_choice`)."""

    def __init__(self, script: dict[str, Any] | str | Path, context_window: int | None = None) -> None:
        if isinstance(script, Path):
            script = str(script)
        if isinstance(script, str):
            script = load_script(script_spec(script) or script)
        self.script = script
        self.server = ScriptedServer(script)  # never started: only its `respond` is used
        self._window = context_window
        self.name = "scripted"

    @property
    def requests(self) -> list[dict[str, Any]]:
        return self.server.requests

    def context_window(self) -> int:
        return int(self._window or self.script.get("context_window") or DEFAULT_CONTEXT_WINDOW)

    def complete(self, messages: list[dict], tools: list[dict], tool_choice: str | dict = "auto",
                 history_end: int | None = None, on_text: Callable[[str], None] | None = None) -> Reply:
        body: dict[str, Any] = {"model": self.name, "messages": messages, "stream": False}
        if tools:  # as the litellm client sends it: no empty tool list, no tool_choice without tools
            body["tools"], body["tool_choice"] = tools, tool_choice
        response = self.server.respond(body)
        if response.hold:
            raise ModelError(f"{self.name}: the script's turn gives no answer (a \"timeout\" turn)")
        if response.status != 200:
            error = (response.body or {}).get("error") or {}
            message = f"{self.name}: HTTP {response.status}: {error.get('message', 'no message')}"
            if error.get("code") == "context_length_exceeded":
                raise ContextOverflow(message, status_code=400)
            raise ModelError(message, status_code=response.status)
        return self._reply(response.body or {}, on_text)

    def _reply(self, body: dict[str, Any], on_text: Callable[[str], None] | None = None) -> Reply:
        choice = body["choices"][0]
        message = choice["message"]
        content = message.get("content") or ""
        if content and on_text is not None:
            on_text(content)
        calls = [ToolCall(id=c["id"], name=c["function"]["name"], arguments=c["function"]["arguments"])
                 for c in message.get("tool_calls") or []]
        raw = body.get("usage") or {}
        usage = Usage(prompt_tokens=raw.get("prompt_tokens", 0),
                      cached_tokens=(raw.get("prompt_tokens_details") or {}).get("cached_tokens", 0),
                      completion_tokens=raw.get("completion_tokens", 0), cost_usd=self._cost(raw))
        return Reply(message=assistant_message(content, calls), tool_calls=calls, usage=usage,
                     finish_reason=choice.get("finish_reason"), reasoning=message.get("reasoning_content") or None)

    def _cost(self, usage: dict[str, Any]) -> float | None:
        """USD from the script's `pricing` (per token: `input`, `output`, `cached_input`), as litellm prices
        it: cached prompt tokens at the cached price; None without pricing (an unknown price, never 0)."""
        pricing = self.script.get("pricing")
        if not pricing:
            return None
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        fresh = usage.get("prompt_tokens", 0) - cached
        return (fresh * pricing["input"] + cached * pricing.get("cached_input", pricing["input"])
                + usage.get("completion_tokens", 0) * pricing["output"])
