"""A chat request to an OpenAI-compatible endpoint, sent with httpx alone (no litellm).

For an OpenAI chat model (`openai/NAME` at --api-base URL or at api.openai.com) litellm does little
besides handing the request to the openai client, which POSTs it as JSON to `URL/chat/completions`
and reads the answer (server-sent events when streamed) with httpx. Importing litellm for that costs
2-3 s of CPU at every start, more than the rest of a start together (bench/startup_bench.py), so
client.py sends such requests here, when litellm has nothing else to add (direct.py says when). The
body is the one litellm sends for that provider; the answer's chunks are read by attribute like
litellm's (`chunk.choices[0].delta`), a field the server left out reading as None; and a failure is
raised as the openai client's own exception (400 BadRequestError, 429 RateLimitError, 5xx
InternalServerError, APIConnectionError, APITimeoutError, each from the httpx error behind it), which
is what litellm raises too (its errors derive from them), so retry.py sorts both paths' failures alike.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx

# What a direct request leaves out of litellm.completion's arguments: litellm's own, and the timeout,
# which is httpx's.
LITELLM_ONLY = {"model", "timeout", "num_retries", "max_retries", "api_base", "api_key"}
# What httpx imports at the first send, not before (client.LLM.preload imports them ahead).
FIRST_REQUEST_MODULES = ("httpcore", "h11")
# What the openai client raises for each status (openai._client._make_status_error).
STATUS_ERRORS = {400: "BadRequestError", 401: "AuthenticationError", 403: "PermissionDeniedError",
                 404: "NotFoundError", 409: "ConflictError", 422: "UnprocessableEntityError", 429: "RateLimitError"}


class Fields:
    """A JSON object read by attribute, as litellm's response objects are; a missing field is None."""

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def __getattr__(self, name: str) -> Any:  # noqa: ANN401 - whatever the JSON holds
        if name.startswith("__"):
            raise AttributeError(name)
        return _wrap(self._data.get(name))

    def __repr__(self) -> str:
        return f"Fields({self._data!r})"


def _wrap(value: Any) -> Any:  # noqa: ANN401
    if isinstance(value, dict):
        return Fields(value)
    if isinstance(value, list):
        return [_wrap(v) for v in value]
    return value


class Endpoint:
    """One OpenAI-compatible endpoint, its connections kept open between requests."""

    def __init__(self, api_base: str, api_key: str | None, model: str | None = None) -> None:
        """`model`: the model's name as the server knows it, put in every body (None: the body's own)."""
        self.base = api_base
        self.url = api_base.rstrip("/") + "/chat/completions"
        self.model = model
        self.headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self._client: httpx.Client | None = None

    def complete(self, arguments: dict[str, Any]) -> Iterator[Fields]:
        """The answer's chunks (one whole response when not streaming), as the server sends them, to the
        request `arguments` (litellm.completion's) describe."""
        if self._client is None:
            self._client = httpx.Client()
        body = _body(arguments, self.model)
        request = self._client.build_request("POST", self.url, json=body, headers=self.headers,
                                             timeout=arguments["timeout"])
        try:
            response = self._client.send(request, stream=True)
        except httpx.TimeoutException as exc:
            raise _openai().APITimeoutError(request=request) from exc
        except httpx.TransportError as exc:
            raise _openai().APIConnectionError(request=request) from exc
        try:
            if response.status_code >= 400:
                response.read()
                raise _status_error(response)
            if not body.get("stream"):
                response.read()
                yield Fields(response.json())
                return
            yield from _events(response)
        except httpx.TimeoutException as exc:
            raise _openai().APITimeoutError(request=request) from exc
        except httpx.TransportError as exc:  # the connection lost mid-answer
            raise _openai().APIConnectionError(request=request) from exc
        finally:
            response.close()


def _body(arguments: dict[str, Any], model: str | None) -> dict[str, Any]:
    """The JSON body of a request, as litellm sends it: litellm.completion's arguments with the model's
    name as the server knows it (`model`, else what follows `openai/`)."""
    body = {key: value for key, value in arguments.items() if key not in LITELLM_ONLY}
    body["model"] = model or arguments["model"].partition("/")[2]
    # litellm leaves a message's null fields out (an answer of tool calls alone has a null content).
    body["messages"] = [{k: v for k, v in m.items() if v is not None} for m in arguments["messages"]]
    if not body.get("stream"):
        body.pop("stream", None)  # litellm sends no `stream` for an answer taken whole
    return body


def _events(response: httpx.Response) -> Iterator[Fields]:
    """The chunks of a server-sent event stream: `data: {...}` lines, up to `data: [DONE]`."""
    for line in response.iter_lines():
        if not line.startswith("data:"):
            continue  # comments, event names, keep-alives
        data = line[5:].strip()
        if data == "[DONE]":
            return
        if not data:
            continue
        chunk = json.loads(data)
        if isinstance(chunk, dict) and chunk.get("error"):  # vLLM and others report a failure mid-stream so
            error = chunk["error"]
            message = error.get("message") if isinstance(error, dict) else str(error)
            raise _openai().APIError(message or "the server reported an error", response.request, body=error)
        yield Fields(chunk)


def _status_error(response: httpx.Response) -> Exception:
    """The openai client's exception for a 4xx or 5xx, with the server's own words as its message."""
    openai = _openai()
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text.strip() or None
    data = body.get("error", body) if isinstance(body, dict) else body
    said = data.get("message") if isinstance(data, dict) else data
    # The server's words alone, as litellm's message reads once client._one_line drops its class names.
    message = said if isinstance(said, str) and said else response.text.strip() or response.reason_phrase
    status = response.status_code
    name = STATUS_ERRORS.get(status) or ("InternalServerError" if status >= 500 else "APIStatusError")
    return getattr(openai, name)(message, response=response, body=data)


def _openai() -> Any:  # noqa: ANN401 - the openai module
    """The openai package, imported on a failure only: its import costs most of a second."""
    import openai

    return openai
