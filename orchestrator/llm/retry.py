"""Which failed model requests are tried again, how soon, and how a retry is told to a person.

Failures come in three kinds, each with its own patience:
- an endpoint that cannot be reached (refused, unknown host, no connection within the connect
  timeout) is tried twice more, quickly: a server that is not there now is rarely there in a minute;
- an endpoint that took the request and went silent (no byte within the idle timeout) is tried once
  more: each try already cost a long wait;
- a busy or failing provider (429, 5xx, 408, 409, a connection lost mid-answer) is tried up to
  `max_retries` times, with exponential back-off and jitter, honouring Retry-After.
Each kind counts its own retries within one request. Anything else (a 4xx) is the request's fault
and fails at once.
"""

from __future__ import annotations

import email.utils
import errno
import random
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass

import httpx

CONNECT_RETRIES = 2
CONNECT_WAIT = 0.5  # doubled for the second try
SILENT_RETRIES = 1
MAX_RETRY_WAIT = 60.0


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

    kind: str  # "connect", "silent", "transient" or "fatal"
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
