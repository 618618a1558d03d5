"""Failed model requests: which are tried again, how soon, and how a retry or a final failure is told.

Failures come in three kinds, each with its own patience:
- an endpoint that cannot be reached (refused, unknown host, no connection within the connect
  timeout) is tried twice more, quickly: a server that is not there now is rarely there in a minute;
- an endpoint that took the request and went silent (no byte within the idle timeout) is tried once
  more: each try already cost a long wait;
- a busy or failing provider (429, 5xx, 408, 409, a connection lost mid-answer) is tried up to
  `max_retries` times, with exponential back-off and jitter, honouring Retry-After.
Each kind counts its own retries within one request. Anything else (a 4xx) is the request's fault
and fails at once; a request too long for the model's window is a failure of its own ("overflow"),
which the loop answers by compacting the context. `Failure.given_up` words the failure that ends a
request, naming the endpoint and in the provider's own words where it answered.
"""

from __future__ import annotations

import email.utils
import errno
import random
import re
import socket
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass

import httpx

from orchestrator.llm.types import ModelError, connect_hint

CONNECT_RETRIES = 2
CONNECT_WAIT = 0.5  # doubled for the second try
SILENT_RETRIES = 1
MAX_RETRY_WAIT = 60.0
# How providers word "your request is longer than the context window" in a plain 400.
OVERFLOW_WORDING = re.compile(
    r"context[ _]length|context window|maximum context|prompt is too long|input is too long|too many tokens"
    r"|exceeds? the (maximum|max) (number of )?tokens",
    re.IGNORECASE,
)
SILENT_HINT = ("a slow model may need more time: raise model.stream_idle_timeout or model.request_timeout "
               "in the run's settings")
LITELLM_PREFIXES = re.compile(r"^((litellm\.)?\w+(Error|Exception)(: | - ))+")


class NoAnswer(Exception):
    """The endpoint sent nothing for too long: before the answer began, or in the middle of it."""

    def __init__(self, seconds: float, began: bool) -> None:
        self.seconds, self.began = seconds, began
        super().__init__(self.what)

    @property
    def what(self) -> str:
        if self.began:
            return f"the answer stalled (no byte for {_seconds(self.seconds)})"
        return f"no answer within {_seconds(self.seconds)}"


def is_read_timeout(error: BaseException) -> bool:
    """httpx gave up waiting for a byte (not for a connection: that is a connect failure)."""
    import openai  # here, not at the top: only a failed request needs it, and it takes most of a second

    return _caused_by(error, (httpx.ReadTimeout, openai.APITimeoutError)) and _connect_reason(error) is None


@dataclass
class Failure:
    """One failed attempt, sorted into its kind, with the words a person reads about it."""

    kind: str  # "connect", "silent", "transient", "overflow" or "fatal"
    what: str  # "503", "connection refused", "no answer within 60 s", ...
    status: int | None = None
    error: BaseException | None = None

    def limit(self, max_retries: int) -> int:
        """How many retries this kind of failure gets."""
        return {"connect": min(CONNECT_RETRIES, max_retries), "silent": min(SILENT_RETRIES, max_retries),
                "transient": max_retries}.get(self.kind, 0)

    def at(self, endpoint: str) -> str:
        """The failure with the endpoint in it: "503 from URL", "connection refused by URL", ..."""
        if self.kind == "connect":
            return f"cannot connect to {endpoint}: {self.what}"
        if self.kind == "silent":
            return f"{endpoint}: {self.what}"
        return f"{self.what} from {endpoint}"

    def wait(self, retry: int, base: float) -> float:
        """Seconds before retry number `retry` (1-based)."""
        if self.kind == "connect":
            return CONNECT_WAIT * 2 ** (retry - 1)
        told = retry_after(self.error) if self.error is not None else None
        if told is not None:
            return min(told, MAX_RETRY_WAIT)
        # Jitter keeps many runs that failed together (cairn batch) from retrying together.
        return min(MAX_RETRY_WAIT, base * 2 ** (retry - 1)) * random.uniform(0.5, 1.0)

    def given_up(self, model: str, endpoint: str, retries: int, api_base_given: bool) -> ModelError:
        """The error that ends the request after `retries` retries, for the person and the event log."""
        said = ""  # the provider's own words, when it answered (litellm words a failed connection as a 500 too)
        if self.error is not None and (self.kind == "fatal" or (self.kind == "transient" and self.status)):
            said = one_line(self.error)
        if self.kind == "fatal":
            return ModelError(f"{model} refused the request ({self.what}) at {endpoint}: {said}", status_code=self.status)
        gave_up = f"gave up after {retries} {'retry' if retries == 1 else 'retries'}" if retries else "not retried"
        hint = {"connect": connect_hint(api_base_given), "silent": SILENT_HINT}.get(self.kind)
        return ModelError(f"{model}: {self.at(endpoint)}; {gave_up}" + (f": {said}" if said else ""),
                          status_code=self.status, hint=hint)


@dataclass
class Retry:
    """A retry about to wait: what the live display, stderr and the event log say about it."""

    number: int
    limit: int
    wait: float
    failure: Failure
    endpoint: str

    def line(self) -> str:
        return f"retry {self.number}/{self.limit} in {_seconds(self.wait)}: {self.failure.at(self.endpoint)}"


def classify(error: BaseException) -> Failure:
    """The kind of a failed attempt. litellm's errors derive from openai's, but it reports a connection
    that failed as a 500 ("Connection error."): the chain of causes tells what really happened."""
    if isinstance(error, NoAnswer):
        return Failure("silent", error.what, error=error)
    if _is_overflow(error):
        return Failure("overflow", "the request is too long for the model", status=400, error=error)
    import openai

    reason = _connect_reason(error)
    if reason is not None:
        return Failure("connect", reason, error=error)
    if _caused_by(error, (openai.APITimeoutError, httpx.TimeoutException)):
        return Failure("silent", "no answer within the timeout", error=error)
    if _caused_by(error, (openai.APIConnectionError, httpx.TransportError)):
        return Failure("transient", "connection lost", error=error)
    status = getattr(error, "status_code", None)
    if isinstance(error, openai.RateLimitError) or status in (408, 409, 429) or (status is not None and status >= 500):
        return Failure("transient", str(status or 429), status=status or 429, error=error)
    return Failure("fatal", str(status) if status else type(error).__name__, status=status, error=error)


def _is_overflow(error: BaseException) -> bool:
    litellm = sys.modules.get("litellm")  # only litellm's own errors can be its ContextWindowExceededError
    if litellm is not None and isinstance(error, litellm.ContextWindowExceededError):
        return True
    return getattr(error, "status_code", None) == 400 and bool(OVERFLOW_WORDING.search(str(error)))


def one_line(error: BaseException) -> str:
    """The provider's message on one line, short enough for a terminal and an event."""
    text = " ".join(str(getattr(error, "message", None) or error).split())
    # litellm prefixes its class names ("litellm.BadRequestError: OpenAIException - "): the
    # person wants the provider's words.
    text = LITELLM_PREFIXES.sub("", text)
    return text if len(text) <= 500 else text[:497] + "..."


def _causes(error: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    seen: BaseException | None = error
    while seen is not None and seen not in chain:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    return chain


def _caused_by(error: BaseException, kinds: tuple[type[BaseException], ...]) -> bool:
    return any(isinstance(e, kinds) for e in _causes(error))


def _connect_reason(error: BaseException) -> str | None:
    """Why no connection could be opened, from the chain of causes; None when one was open."""
    for seen in _causes(error):
        if isinstance(seen, ConnectionRefusedError) or getattr(seen, "errno", None) == errno.ECONNREFUSED:
            return "connection refused"
        if isinstance(seen, socket.gaierror):
            return "unknown host"
        if isinstance(seen, httpx.ConnectTimeout):
            return "no connection within the connect timeout"
        if isinstance(seen, httpx.ConnectError):
            text = str(seen).lower()
            if "refused" in text:
                return "connection refused"
            if "name or service" in text or "nodename" in text or "name resolution" in text:
                return "unknown host"
            return " ".join(str(seen).split()) or "connection failed"
    return None


def retry_after(error: BaseException) -> float | None:
    """Seconds the provider asked us to wait (Retry-After, or retry-after-ms), if it said."""
    response = getattr(error, "response", None)
    headers = getattr(error, "litellm_response_headers", None) or getattr(response, "headers", None)
    if not isinstance(headers, Mapping):
        return None
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    if "retry-after-ms" in lowered:
        millis = _number(lowered["retry-after-ms"])
        return None if millis is None else max(0.0, millis / 1000)
    if "retry-after" not in lowered:
        return None
    seconds = _number(lowered["retry-after"])
    if seconds is None:  # the other form Retry-After may take: an HTTP date
        try:
            seconds = email.utils.parsedate_to_datetime(lowered["retry-after"]).timestamp() - time.time()
        except (TypeError, ValueError):
            return None
    return max(0.0, seconds)


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _seconds(value: float) -> str:
    """8 s, 0.5 s, 60 s: whole seconds unless under ten."""
    if value >= 10:
        return f"{value:.0f} s"
    return f"{value:.1f}".rstrip("0").rstrip(".") + " s" if value >= 0.05 else "0 s"
