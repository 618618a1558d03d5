"""A small OpenAI-compatible server of the tests' own (as vLLM, llama.cpp or Ollama would be): it lists
one model at GET /v1/models and answers every chat request with the next of its answers, streamed or not,
and keeps the requests it got. Not cairn's scripted model: what the page's API base and `cairn doctor`
are tested against is a server cairn knows nothing of."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeOpenAI:
    def __init__(self, model: str, answers: list[dict[str, Any]]) -> None:
        """`answers`: each a message, {"content": ...} and/or {"tool_calls": [(name, arguments), ...]};
        past the last, the last again."""
        self.model, self.answers, self.requests = model, answers, []
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        server.daemon_threads = True
        server.fake = self  # type: ignore[attr-defined]
        self.server = server
        self.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(body)
        said = self.answers[min(len(self.requests), len(self.answers)) - 1]
        calls = [{"id": f"call_{len(self.requests)}_{i}", "type": "function",
                  "function": {"name": name, "arguments": json.dumps(arguments)}}
                 for i, (name, arguments) in enumerate(said.get("tool_calls", []))]
        return {"role": "assistant", "content": said.get("content"), **({"tool_calls": calls} if calls else {})}


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        if self.path.rstrip("/") != "/v1/models":
            self._json(404, {"error": {"message": "no such route"}})
            return
        self._json(200, {"object": "list", "data": [{"id": self.server.fake.model, "object": "model"}]})

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        message = self.server.fake.answer(body)
        usage = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        envelope = {"id": "chatcmpl-fake", "created": 0, "model": body.get("model")}
        if not body.get("stream"):
            self._json(200, {**envelope, "object": "chat.completion", "usage": usage,
                             "choices": [{"index": 0, "message": message, "finish_reason": finish}]})
            return
        delta = {"role": "assistant", "content": message.get("content") or ""}
        if message.get("tool_calls"):
            delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(message["tool_calls"])]
        chunks = [{**envelope, "object": "chat.completion.chunk",
                   "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                  {**envelope, "object": "chat.completion.chunk",
                   "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
                  {**envelope, "object": "chat.completion.chunk", "choices": [], "usage": usage}]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for chunk in chunks:
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")

    def _json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass
