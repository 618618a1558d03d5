"""The scripted model: a JSON script served on a loopback OpenAI-compatible endpoint.

cairn reaches it through litellm like any other provider (`openai/scripted` at this server's URL),
so tests and demos run the real client code: streaming, retries, usage and cost. The script format
and the turn semantics are in docs/contracts.md ("The scripted model"); in short, each request consumes
the next turn, and a turn is an answer (`content`, `tool_calls`, and `reasoning`: the model's thinking,
sent as `reasoning_content` as litellm gives a reasoning model's) or a failure (`fail`).

A run's model goes on from the turn the run had reached: the server keeps, in the run's
`state/scripted.json`, how many turns of each script it has played (an answer or a failure, as each
request takes one), so a resumed run with the same script is answered from the next turn; a script the
run has not played starts from its first.

Usage is reported like a provider with automatic prefix caching, so cache hit ratios can be tested:
`prompt_tokens` counts the request, and `cached_tokens` is the longest prefix, in 128-token blocks
and never under 1,024 tokens, that the request shares with an earlier answered request.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from orchestrator.errors import UsageError
from orchestrator.llm.tokenizer import encoding

SCRIPT_PROGRESS = "scripted.json"  # in a run's state/: how many turns each script (by its digest) played
SCRIPTED_PREFIX = "scripted:"  # `--model scripted:demo` or `--model scripted:PATH`
BUILTIN_SCRIPTS = Path(__file__).parent / "scripts"
NO_MORE_TURNS = "(the script has no more turns)"
DEFAULT_CONTEXT_WINDOW = 128_000
CACHE_BLOCK = 128
MIN_CACHED = 1024
MALFORMED_ARGUMENTS = '{"command": "ls"'  # cut off mid-object, as a model hitting its limit does
STREAM_PIECE = 16  # characters per streamed delta, so clients must really assemble pieces


def script_spec(model: str) -> str | None:
    """The script part of a `scripted:…` model string; None for any other model."""
    return model[len(SCRIPTED_PREFIX) :] if model.startswith(SCRIPTED_PREFIX) else None


def check_model(model: str) -> None:
    """Raise the script's UsageError now, for a scripted model, rather than after a run was made for it."""
    spec = script_spec(model)
    if spec is not None:
        load_script(spec)


def load_script(spec: str) -> dict:
    """A script from a JSON file path, or a built-in one by name (`demo`)."""
    path = Path(spec).expanduser()
    if not path.is_file():
        builtin = BUILTIN_SCRIPTS / f"{spec}.json"
        if "/" in spec or not builtin.is_file():
            names = ", ".join(sorted(p.stem for p in BUILTIN_SCRIPTS.glob("*.json")))
            raise UsageError(f"no script file or built-in script named {spec!r}", hint=f"built-in: {names}")
        path = builtin
    try:
        script = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise UsageError(f"script {path} is not valid JSON: {e}") from e
    if not isinstance(script, dict) or not isinstance(script.get("turns"), list):
        raise UsageError(f'script {path} must be a JSON object with a "turns" list')
    return script


def canonical_prompt(body: dict) -> str:
    """The request text that is tokenized: tools first, then messages, as a provider would lay it out."""
    dump = lambda value: json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)  # noqa: E731
    return dump(body.get("tools") or []) + dump(body.get("messages") or [])


class PrefixCache:
    """Automatic prefix caching over token blocks.

    Each block's key hashes the block together with the previous block's key, so one key stands for
    a whole prefix: a request's cached length is found in one pass, whatever the history.
    """

    def __init__(self) -> None:
        self._keys: set[int] = set()

    def lookup(self, tokens: list[int]) -> int:
        """Tokens of the longest cached prefix of `tokens`."""
        hit = 0
        for key in self._chain(tokens):
            if key not in self._keys:
                break
            hit += CACHE_BLOCK
        return hit if hit >= MIN_CACHED else 0

    def store(self, tokens: list[int]) -> None:
        self._keys.update(self._chain(tokens))

    @staticmethod
    def _chain(tokens: list[int]):  # noqa: ANN205 - a generator of ints
        key = 0
        for start in range(0, len(tokens) - CACHE_BLOCK + 1, CACHE_BLOCK):
            key = hash((key, tuple(tokens[start : start + CACHE_BLOCK])))
            yield key


@dataclass
class Response:
    """What the handler writes back: JSON, an SSE stream, or nothing at all (`hold`)."""

    status: int = 200
    body: dict | None = None
    chunks: list[dict] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    hold: bool = False


class ScriptedServer:
    def __init__(self, script: dict, progress: Path | None = None) -> None:
        """`progress`: the file that keeps how many turns the script played for a run (SCRIPT_PROGRESS);
        the server starts at the turn it names when it names this script."""
        self.script = script
        self.turns: list[dict] = list(script.get("turns", []))
        self.requests: list[dict] = []
        self.digest = hashlib.sha256(json.dumps(script, sort_keys=True).encode()).hexdigest()
        self.progress = progress
        self._next_turn = played(progress, self.digest) if progress is not None else 0
        self._cache = PrefixCache()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self.url: str | None = None
        # Call ids differ between scripts, so a run resumed with a new script never reuses an id.
        self.id_prefix = self.digest[:6]

    def start(self) -> str:
        """Serve on a free loopback port in a daemon thread; returns the base URL (…/v1)."""
        if self.url is not None:
            return self.url
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        httpd.daemon_threads = True
        httpd.scripted = self  # type: ignore[attr-defined] - how the handler finds us
        # A short poll interval keeps stop() quick; the loop is idle between requests anyway.
        serve = lambda: httpd.serve_forever(poll_interval=0.05)  # noqa: E731
        threading.Thread(target=serve, name="cairn-scripted-model", daemon=True).start()
        self._httpd = httpd
        self.url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
        return self.url

    def stop(self) -> None:
        self._stopping.set()  # releases requests held by a "timeout" turn
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        self.url = None

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def respond(self, body: dict) -> Response:
        """Play the next turn for one request. Thread-safe: turns are consumed in arrival order."""
        with self._lock:
            self.requests.append(body)
            _log_request(body)
            tokens = encoding().encode(canonical_prompt(body), disallowed_special=())
            window = self.script.get("context_window")
            # Too long a request never reaches the model, so it consumes no turn.
            if window is not None and len(tokens) > window:
                return _overflow(window, len(tokens))
            index = self._next_turn
            self._next_turn += 1
            if self.progress is not None:
                _keep_progress(self.progress, self.digest, self._next_turn)
            turn = self.turns[index] if index < len(self.turns) else {"content": NO_MORE_TURNS}
            fail = turn.get("fail")
            if fail == "timeout":
                return Response(hold=True)
            if fail == "overflow":
                return _overflow(window or DEFAULT_CONTEXT_WINDOW, len(tokens))
            if isinstance(fail, int):
                return _failure(fail, turn)
            cached = self._cache.lookup(tokens)
            self._cache.store(tokens)
        content, tool_calls = _answer(f"{self.id_prefix}_{index}", turn)
        reasoning = turn.get("reasoning") or ""
        usage = {
            "prompt_tokens": len(tokens),
            "completion_tokens": _count_answer(reasoning + content, tool_calls),
            "prompt_tokens_details": {"cached_tokens": cached},
        }
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        answer_id = f"chatcmpl-scripted-{index}"
        finish = "tool_calls" if tool_calls else "stop"
        if not body.get("stream"):
            message = {"role": "assistant", "content": content or None}
            if reasoning:
                message["reasoning_content"] = reasoning
            if tool_calls:
                message["tool_calls"] = tool_calls
            choice = {"index": 0, "message": message, "finish_reason": finish}
            return Response(body=_envelope(answer_id, "chat.completion", choices=[choice], usage=usage))
        chunks = _stream_chunks(answer_id, content, tool_calls, finish, reasoning)
        if (body.get("stream_options") or {}).get("include_usage"):
            chunks.append(_envelope(answer_id, "chat.completion.chunk", choices=[], usage=usage))
        return Response(chunks=chunks)


_servers: dict[str, ScriptedServer] = {}
_servers_lock = threading.Lock()


def scripted_server(spec: str, progress: Path | None = None) -> ScriptedServer:
    """The running server for a script (`demo` or a path) and a run (`progress`: its SCRIPT_PROGRESS
    file): started on first use, one per process for each."""
    key = f"{spec}\0{progress or ''}"
    with _servers_lock:
        if key not in _servers:
            server = ScriptedServer(load_script(spec), progress)
            server.start()
            _servers[key] = server
        return _servers[key]


_progress_lock = threading.Lock()  # a run's model and its critic may play two scripts into one file


def played(progress: Path, digest: str) -> int:
    """How many turns of the script with this digest a run's models have played (0 for a script it never
    played)."""
    turns = _played(progress).get(digest)
    return turns if isinstance(turns, int) and not isinstance(turns, bool) and turns >= 0 else 0


def _played(progress: Path) -> dict:
    """The file's {script digest: turns played}; empty when it is missing or is not one."""
    try:
        with open(progress, "rb") as f:
            kept = json.loads(f.read(64 * 1024))
    except (OSError, ValueError):
        return {}
    return kept if isinstance(kept, dict) else {}


def _keep_progress(progress: Path, digest: str, turns: int) -> None:
    """Best effort: a run whose state cannot be written starts its script again on a resume, no worse."""
    with _progress_lock:
        try:
            tmp = progress.with_name(f".{progress.name}.tmp")
            tmp.write_text(json.dumps({**_played(progress), digest: turns}))
            os.replace(tmp, progress)
        except OSError:
            pass


def stop_scripted_servers() -> None:
    """Stop every scripted server this process started (tests; the end of a CLI command)."""
    with _servers_lock:
        for server in _servers.values():
            server.stop()
        _servers.clear()


def _log_request(body: dict) -> None:
    """Tests that run `cairn` in a subprocess read the requests from this file."""
    log = os.environ.get("CAIRN_SCRIPTED_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(json.dumps(body, sort_keys=True) + "\n")


def _answer(turn_id: str, turn: dict) -> tuple[str, list[dict]]:
    """The turn's text and its tool calls in OpenAI format, with ids `call_<script>_<turn>_<n>`."""
    if turn.get("fail") == "malformed":
        calls = [(turn.get("name", "shell_exec"), MALFORMED_ARGUMENTS)]
    else:
        calls = [(c["name"], json.dumps(c.get("arguments", {}), sort_keys=True)) for c in turn.get("tool_calls", [])]
    tool_calls = [
        {"id": f"call_{turn_id}_{n}", "type": "function", "function": {"name": name, "arguments": arguments}}
        for n, (name, arguments) in enumerate(calls)
    ]
    return turn.get("content") or "", tool_calls


def _count_answer(content: str, tool_calls: list[dict]) -> int:
    text = content + "".join(c["function"]["name"] + c["function"]["arguments"] for c in tool_calls)
    return len(encoding().encode(text, disallowed_special=()))


def _envelope(answer_id: str, kind: str, **fields: object) -> dict:
    return {"id": answer_id, "object": kind, "created": int(time.time()), "model": "scripted", **fields}


def _stream_chunks(answer_id: str, content: str, tool_calls: list[dict], finish: str, reasoning: str = "") -> list[dict]:
    def chunk(delta: dict, finish_reason: str | None = None) -> dict:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
        return _envelope(answer_id, "chat.completion.chunk", choices=[choice])

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"reasoning_content": piece}) for piece in _pieces(reasoning)]  # as litellm streams thinking
    chunks += [chunk({"content": piece}) for piece in _pieces(content)]
    for i, call in enumerate(tool_calls):
        function = {"name": call["function"]["name"], "arguments": ""}
        chunks.append(chunk({"tool_calls": [{"index": i, "id": call["id"], "type": "function", "function": function}]}))
        for piece in _pieces(call["function"]["arguments"]):
            chunks.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}))
    chunks.append(chunk({}, finish))
    return chunks


def _pieces(text: str) -> list[str]:
    return [text[i : i + STREAM_PIECE] for i in range(0, len(text), STREAM_PIECE)]


def _failure(status: int, turn: dict) -> Response:
    kind = "server_error" if status >= 500 else "rate_limit_error" if status == 429 else "invalid_request_error"
    message = turn.get("message") or f"The script answers this request with HTTP {status}."
    headers = {}
    retry_after = turn.get("retry_after", 0)  # 0 by default, so tests that go through retries stay fast
    if (status == 429 or status >= 500) and retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    error = {"message": message, "type": kind, "param": None, "code": str(status)}
    return Response(status=status, body={"error": error}, headers=headers)


def _overflow(window: int, tokens: int) -> Response:
    message = (
        f"This model's maximum context length is {window} tokens. However, your messages resulted in "
        f"{tokens} tokens. Please reduce the length of the messages."
    )
    error = {
        "message": message,
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
    return Response(status=400, body={"error": error})


class _Handler(BaseHTTPRequestHandler):
    server_version = "cairn-scripted"

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})
            return
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError:
            self._send_json(400, {"error": {"message": "request body is not JSON", "type": "invalid_request_error"}})
            return
        response = self.server.scripted.respond(body)  # type: ignore[attr-defined]
        if response.hold:
            self._hold()
        elif response.chunks:
            self._send_stream(response.chunks)
        else:
            self._send_json(response.status, response.body or {}, response.headers)

    def _send_json(self, status: int, body: dict, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_stream(self, chunks: list[dict]) -> None:
        # HTTP/1.0 without a length: closing the connection ends the stream.
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        for chunk in chunks:
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def _hold(self) -> None:
        """Answer nothing until the client gives up (closes) or the server stops."""
        sock: socket.socket = self.connection
        while not self.server.scripted.stopping:  # type: ignore[attr-defined]
            readable, _, _ = select.select([sock], [], [], 0.05)
            try:
                if readable and not sock.recv(1, socket.MSG_PEEK):
                    return  # the client closed the connection
            except ConnectionError:
                return

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's signature
        pass  # the scripted model is quiet; its requests are in `requests` and CAIRN_SCRIPTED_LOG
