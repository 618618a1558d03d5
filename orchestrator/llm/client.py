"""Model calls through litellm: streaming, retries, usage, and prompt-cache breakpoints.

`LLM.complete` sends one request and gives back one `Reply`. Failures that may pass (an endpoint that
cannot be reached, one that went silent, 5xx, 429) are retried here as retry.py decides, each retry
told to `on_retry` before its wait; anything else fails at once as a `ModelError` that names the
endpoint, and a request too long for the model as `ContextOverflow`, so the loop can compact and try
again (retry.py sorts the failures and words them). The request runs in a worker thread (inflight.py),
so silence and Ctrl-C end it at once. The llm modules other than types.py are the only ones that
import litellm, and only when it is needed: a request to an OpenAI chat model that litellm would pass
on unchanged goes out through openai_compat.py instead (direct.py says which), and litellm's facts
about a model come from a cache (facts.py), so such a run never pays litellm's import (2-3 s of CPU;
bench/startup_bench.py). The scripted model's loopback servers are scripted.py's; the price of an
answer is cost.py's.
"""

from __future__ import annotations

import os

# litellm fetches its price list from the network at import unless told to use the bundled copy.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import functools  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterable  # noqa: E402
from pathlib import Path  # noqa: E402

import httpx  # noqa: E402

from orchestrator.config import ModelConfig  # noqa: E402
from orchestrator.llm.direct import direct_endpoint  # noqa: E402
from orchestrator.llm.endpoint import endpoint_of, is_openai_named, provider_of  # noqa: E402
from orchestrator.llm.facts import ModelFacts, litellm_module, model_facts  # noqa: E402
from orchestrator.llm import first_request, openai_compat  # noqa: E402
from orchestrator.llm.cost import cost_usd  # noqa: E402
from orchestrator.llm.answer import Answer  # noqa: E402
from orchestrator.llm.inflight import interruptible, pause, watched  # noqa: E402
from orchestrator.llm.retry import NoAnswer, Retry, classify, is_read_timeout, one_line  # noqa: E402
from orchestrator.llm.scripted import DEFAULT_CONTEXT_WINDOW, ScriptedServer, load_script, script_spec  # noqa: E402
from orchestrator.llm.scripted import scripted_server  # noqa: E402
from orchestrator.llm.types import ContextOverflow, Reply, assistant_message  # noqa: E402

FALLBACK_CONTEXT_WINDOW = 128_000
WATCH_GRACE = 5.0  # seconds the watch on a request allows beyond httpx's own read timeout
EPHEMERAL = {"type": "ephemeral"}


def _request_errors() -> tuple[type[BaseException], ...]:
    """What a failed request raises: the openai client's errors (litellm's derive from them) and silence.
    A function, so that openai is imported when a request fails, not at every start."""
    import openai

    return openai.APIError, NoAnswer


def is_anthropic(model: str) -> bool:
    return "anthropic/" in model or "claude" in model.lower()


def add_cache_breakpoints(messages: list[dict], history_end: int | None) -> list[dict]:
    """Copies of `messages` with Anthropic cache breakpoints at the ends of the stable parts.

    Anthropic caches tools, then system, then messages, up to each breakpoint. One breakpoint on
    the (last) leading system message covers tools and system; one on message `history_end - 1`
    covers the stored history, which only grows, so the next request reads it back. The tail after
    it (todo.md, notices) changes every step and is left uncached. Two breakpoints: Anthropic
    allows four.
    """
    marks = set()
    leading_system = 0
    while leading_system < len(messages) and messages[leading_system].get("role") == "system":
        leading_system += 1
    if leading_system:
        marks.add(leading_system - 1)
    if history_end is not None and 0 < history_end <= len(messages):
        marks.add(history_end - 1)
    return [_with_breakpoint(m) if i in marks else m for i, m in enumerate(messages)]


def _with_breakpoint(message: dict) -> dict:
    marked = dict(message)
    # The tool calls come after the text in Anthropic's blocks: the last call is marked; else the last
    # block of a content given as blocks; else the message (litellm moves it onto its text block).
    for parts in ("tool_calls", "content"):
        if isinstance(marked.get(parts), list) and marked[parts]:
            marked[parts] = [dict(part) for part in marked[parts]]
            marked[parts][-1]["cache_control"] = EPHEMERAL
            return marked
    marked["cache_control"] = EPHEMERAL
    return marked


class LLM:
    """One configured model. `complete` may be called from several threads at once (sub-agents working
    side by side, agent/parallel.py): each request keeps its state to itself, and `cancel` stops them all."""

    def __init__(self, cfg: ModelConfig, *, stream: bool = True, script_progress: Path | None = None) -> None:
        """`script_progress`: for a scripted model, the run's file of the turns its script played, so a
        resumed run goes on from the next turn (llm/scripted.py)."""
        self.cfg = cfg
        self._script_progress = script_progress
        self.stream = stream
        self.context_window_source = ""  # "config", "script", "litellm" or "fallback": for `cairn doctor`
        self._script_spec = script_spec(cfg.model)
        self._script = load_script(self._script_spec) if self._script_spec is not None else None
        self.retry_base_seconds = cfg.retry_base_seconds  # the first backoff wait, doubled each retry
        # Told of each retry before its wait (the LiveRun records it as an event the display shows).
        self.on_retry: Callable[[Retry], None] | None = None
        self._cancelled = threading.Event()

    def cancel(self) -> None:
        """Stop the request in flight now (or the next one), from any thread: it raises KeyboardInterrupt.
        Ctrl-C does this by itself in the main thread; a batch calls it for runs in worker threads."""
        self._cancelled.set()

    @functools.cached_property
    def endpoint(self) -> str:
        """Where requests go, for messages: the URL, or the provider's name when it cannot be told."""
        if self._script_spec is not None:
            return self.scripted.url
        if self._direct is not None:
            return self._direct.base
        return endpoint_of(self.cfg.model, self.cfg.api_base) or f"the provider of {self.cfg.model}"

    @property
    def scripted(self) -> ScriptedServer | None:
        """The loopback server playing the script, when the model is `scripted:…`."""
        return scripted_server(self._script_spec, self._script_progress) if self._script_spec is not None else None

    def context_window(self) -> int:
        """Input tokens the model accepts; `context_window_source` says where the figure came from."""
        if self.cfg.context_window:
            self.context_window_source, window = "config", self.cfg.context_window
        elif self._script is not None:
            self.context_window_source, window = "script", self._script.get("context_window") or DEFAULT_CONTEXT_WINDOW
        elif self._facts.max_input_tokens:
            self.context_window_source, window = "litellm", self._facts.max_input_tokens
        else:
            self.context_window_source, window = "fallback", FALLBACK_CONTEXT_WINDOW
        return int(window)

    def complete(
        self,
        messages: list[dict],
        tools: list[dict],
        tool_choice: str | dict = "auto",
        history_end: int | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> Reply:
        """One answer from the model, retrying the failures that may pass as retry.py decides.

        `history_end` is the index just past the stored history (the tail after it is rebuilt every
        step); it places the cache breakpoint for Anthropic. `on_text` receives text as it streams;
        after a failed attempt is retried it may receive the start of the answer again.
        """
        request = self._request(messages, tools, tool_choice, history_end)
        started = time.monotonic()
        retried: dict[str, int] = {}  # by kind of failure: each kind has its own patience (retry.py)
        with interruptible():
            while True:
                try:
                    answer = self._send(request, on_text)
                    break
                except _request_errors() as e:  # litellm's exceptions all derive from openai's
                    failure = classify(e)
                    if failure.kind == "overflow":
                        raise ContextOverflow(one_line(e), status_code=400) from e
                    limit, done = failure.limit(self.cfg.max_retries), retried.get(failure.kind, 0)
                    if done >= limit:
                        raise failure.given_up(self.cfg.model, self.endpoint, done, bool(self.cfg.api_base)) from e
                    retried[failure.kind] = done + 1
                    retry = Retry(done + 1, limit, failure.wait(done + 1, self.retry_base_seconds), failure,
                                  self.endpoint)
                    if self.on_retry is not None:
                        self.on_retry(retry)
                    pause(retry.wait, self._cancelled)
        cost = cost_usd(self.cfg.model, answer.raw_usage, (self._script or {}).get("pricing"), self._facts,
                        direct=self._direct is not None)
        return Reply(
            message=assistant_message(answer.content, answer.tool_calls),
            tool_calls=answer.tool_calls,
            usage=answer.usage(cost, latency_s=time.monotonic() - started),
            finish_reason=answer.finish_reason,
            retries=sum(retried.values()),
            reasoning=answer.reasoning or None,
        )

    def _request(
        self, messages: list[dict], tools: list[dict], tool_choice: str | dict, history_end: int | None
    ) -> dict:
        """litellm.completion's arguments. API keys are litellm's business (it reads the provider's env
        vars), except the apiKey of an agent.json, which only this request carries."""
        request: dict = {
            "model": self.cfg.model,
            "messages": messages,
            "stream": self.stream,
            # httpx's read timeout is the idle timeout: no byte for that long, at the socket, fails.
            "timeout": httpx.Timeout(self._idle, connect=self.cfg.connect_timeout),
            "num_retries": 0,  # retries are ours: litellm's and the openai client's would stack
            "max_retries": 0,
        }
        if self.stream:
            request["stream_options"] = {"include_usage": True}
        if tools:  # an empty tool list is an error at some providers
            request["tools"] = tools
            request["tool_choice"] = tool_choice
        if self.cfg.temperature is not None:
            request["temperature"] = self.cfg.temperature
        if self.cfg.max_output_tokens is not None:
            request["max_tokens"] = self.cfg.max_output_tokens
        if self.cfg.api_base:
            request["api_base"] = self.cfg.api_base
        if self.cfg.api_key is not None:  # an agent.json's apiKey; else litellm reads the provider's variables
            request["api_key"] = self.cfg.api_key.get_secret_value()
        elif self._keyless_server:
            request["api_key"] = "none"  # the openai client refuses to send without one; the server ignores it
        if self._script_spec is not None:
            request.update(model="openai/scripted", api_base=self.scripted.url, api_key="scripted")
        elif is_anthropic(self.cfg.model):
            request["messages"] = add_cache_breakpoints(messages, history_end)
        return request

    @functools.cached_property
    def _keyless_server(self) -> bool:
        """An OpenAI-compatible server of one's own (--api-base) with no OPENAI_API_KEY set: vLLM,
        llama.cpp and Ollama need none, and the preflight lets it pass."""
        if not self.cfg.api_base or os.environ.get("OPENAI_API_KEY"):
            return False
        if is_openai_named(self.cfg.model):
            return True
        litellm = litellm_module()
        try:
            return provider_of(self.cfg.model, self.cfg.api_base) == "openai"
        except litellm.exceptions.BadRequestError:
            return False

    @functools.cached_property
    def _direct(self) -> openai_compat.Endpoint | None:
        """The endpoint, when requests go out through openai_compat.py instead of litellm (direct.py
        says which models may); never for the scripted model, which docs/contracts.md sends through litellm."""
        if self._script_spec is not None:
            return None
        return direct_endpoint(self.cfg, self._facts)

    @functools.cached_property
    def _facts(self) -> ModelFacts:
        return ModelFacts() if self._script is not None else model_facts(self.cfg.model)

    def preload(self) -> None:
        """Do now the work a first request would do before it is sent (llm/first_request.py). A start calls
        it while the container starts (LiveRun), so the first request goes out at once when it is ready."""
        first_request.preload(direct=self._direct is not None)

    @property
    def _idle(self) -> float:
        """Seconds without a byte before a request counts as failed. A non-streamed answer comes whole,
        so it gets request_timeout; a stream, its idle timeout (never above request_timeout)."""
        if not self.stream:
            return self.cfg.request_timeout
        return min(self.cfg.stream_idle_timeout, self.cfg.request_timeout)

    def _send(self, request: dict, on_text: Callable[[str], None] | None) -> Answer:
        def open_answer() -> Iterable[object]:
            if self._direct is not None:
                return self._direct.complete(request)
            response = litellm_module().completion(**request, **first_request.without_mcp_gateway())
            return response if self.stream else [response]

        answer, began = Answer(), False
        try:
            # The watch is a backstop to httpx's read timeout, a little later: httpx's clock starts at
            # the socket, this one before litellm has even built the request.
            for piece in watched(open_answer, idle=self._idle + WATCH_GRACE, cancelled=self._cancelled):
                began = True
                answer.add(piece, on_text)
        except NoAnswer:
            raise NoAnswer(self._idle, began) from None
        except _request_errors()[0] as e:
            if is_read_timeout(e):  # litellm words it as a timeout, or as a 503 mid-stream
                raise NoAnswer(self._idle, began) from e
            raise
        return answer
