"""A model endpoint that hangs, refuses or is misconfigured fails fast and visibly.

Real litellm against real loopback servers started here: one that takes a connection and never
answers, one whose stream stops after its first chunk, a port where nothing listens, and the
scripted server answering 503 before it answers. Time bounds are generous: they only show that a
failure takes seconds where it took minutes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from orchestrator.config import ModelConfig
from orchestrator.errors import UsageError
from orchestrator.llm import ModelError
from orchestrator.llm.client import LLM
from orchestrator.llm.preflight import preflight
from orchestrator.llm.retry import Retry
from orchestrator.llm.scripted import ScriptedServer
from tests.in_process import cairn_in_process

MESSAGES = [{"role": "user", "content": "Say hello."}]
FIRST_CHUNK = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "test",
               "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}, "finish_reason": None}]}
DONE = {"turns": [{"tool_calls": [{"name": "task_done", "arguments": {"summary": "done"}}]}]}


class Loopback:
    """A TCP server on a free loopback port, each connection handled by `handle` in its own thread."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self.stopping = threading.Event()
        self.connections = 0
        self.received = b""
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            self.handle(conn)
            self.stopping.wait()  # hold the connection open, answering nothing more

    def handle(self, conn: socket.socket) -> None:
        """Read the request whole: its headers, then Content-Length bytes of body."""
        conn.settimeout(10)
        with contextlib.suppress(OSError), conn.makefile("rb") as stream:
            head = b"".join(iter(stream.readline, b"\r\n"))
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            self.received += head + b"\r\n" + stream.read(length)

    def stop(self) -> None:
        self.stopping.set()
        self.sock.close()


class Silent(Loopback):
    """Takes the connection and the request, and never answers."""


class Stalling(Loopback):
    """Answers a streamed request with its first chunk, and then nothing."""

    def handle(self, conn: socket.socket) -> None:
        super().handle(conn)
        conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
                     + f"data: {json.dumps(FIRST_CHUNK)}\n\n".encode())


@pytest.fixture
def silent():
    server = Silent()
    yield server
    server.stop()


@pytest.fixture
def stalling():
    server = Stalling()
    yield server
    server.stop()


@pytest.fixture
def refused_url() -> str:
    """A loopback port that was free a moment ago: nothing listens there."""
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@pytest.fixture
def scripted_503():
    """cairn's scripted server as a plain OpenAI-compatible endpoint: a 503, then an answer."""
    server = ScriptedServer({"turns": [{"fail": 503}, *DONE["turns"]]})
    server.start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def _no_provider_keys(monkeypatch):
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_API_BASE", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module", autouse=True)
def _warm() -> None:
    """One answered request first, so that litellm's set-up of a process's first request (a second or
    so of imports) is not counted against the idle timeouts below, which can then be short."""
    server = ScriptedServer({"turns": [{"content": "ok"}]})
    server.start()
    try:
        LLM(ModelConfig(model="openai/test", api_base=server.url)).complete(MESSAGES, [])
    finally:
        server.stop()


def llm_for(url: str, **settings: object) -> tuple[LLM, list[Retry]]:
    llm = LLM(ModelConfig(model="openai/test", api_base=url, **settings))
    llm.retry_base_seconds = 0.01
    retries: list[Retry] = []
    llm.on_retry = retries.append
    return llm, retries


# -- the client -----------------------------------------------------------------------------------


def test_an_endpoint_that_never_answers_fails_after_its_idle_timeout_and_one_retry(silent):
    # The endpoint never answers, so however short the idle timeout, the outcome is the same.
    llm, retries = llm_for(silent.url, stream_idle_timeout=1)
    started = time.monotonic()
    with pytest.raises(ModelError) as failure:
        llm.complete(MESSAGES, [])
    assert time.monotonic() - started < 20
    assert f"{silent.url}: no answer within 1 s; gave up after 1 retry" in failure.value.message
    assert len(retries) == 1
    assert retries[0].line().startswith("retry 1/1 in ")
    assert retries[0].line().endswith(f" s: {silent.url}: no answer within 1 s")


def test_a_stream_that_stalls_after_its_first_chunk_fails_naming_the_endpoint(stalling):
    llm, retries = llm_for(stalling.url, stream_idle_timeout=2, max_retries=0)
    seen: list[str] = []
    with pytest.raises(ModelError) as failure:
        llm.complete(MESSAGES, [], on_text=seen.append)
    assert seen == ["Hel"]  # the answer had begun: this is a stall, not a silent endpoint
    assert f"{stalling.url}: the answer stalled (no byte for 2 s)" in failure.value.message


def test_a_long_answer_is_not_cut_by_the_idle_timeout():
    script = {"turns": [{"content": "word " * 400}]}
    server = ScriptedServer(script)
    server.start()
    try:
        llm, _ = llm_for(server.url, stream_idle_timeout=5)
        assert llm.complete(MESSAGES, []).message["content"] == "word " * 400
    finally:
        server.stop()


def test_a_refused_connection_is_retried_twice_quickly_and_named(refused_url):
    llm, retries = llm_for(refused_url)
    started = time.monotonic()
    with pytest.raises(ModelError) as failure:
        llm.complete(MESSAGES, [])
    assert time.monotonic() - started < 10
    assert failure.value.message == f"openai/test: cannot connect to {refused_url}: connection refused; gave up after 2 retries"
    assert [r.line() for r in retries] == [f"retry 1/2 in 0.5 s: cannot connect to {refused_url}: connection refused",
                                           f"retry 2/2 in 1 s: cannot connect to {refused_url}: connection refused"]


def test_a_503_is_retried_and_the_retry_is_told_before_its_wait(scripted_503):
    llm, retries = llm_for(scripted_503.url)
    reply = llm.complete(MESSAGES, [])
    assert reply.retries == 1 and reply.tool_calls[0].name == "task_done"
    assert len(retries) == 1 and retries[0].line().startswith("retry 1/6 in ")
    assert retries[0].line().endswith(f": 503 from {scripted_503.url}")


def test_each_kind_of_failure_counts_its_own_retries():
    server = ScriptedServer({"turns": [{"fail": 503}, {"fail": 429}, {"fail": "timeout"}, {"content": "ok"}]})
    server.start()
    try:
        llm, retries = llm_for(server.url, stream_idle_timeout=1)
        reply = llm.complete(MESSAGES, [])
    finally:
        server.stop()
    assert reply.message["content"] == "ok" and reply.retries == 3
    assert [r.line().split(" in ")[0] for r in retries] == ["retry 1/6", "retry 2/6", "retry 1/1"]


def test_cancel_from_another_thread_stops_a_hung_request_at_once(silent):
    llm, _ = llm_for(silent.url)
    outcome: list[BaseException] = []

    def ask() -> None:
        try:
            llm.complete(MESSAGES, [])
        except BaseException as exc:  # noqa: BLE001 - the test looks at what ended it
            outcome.append(exc)

    worker = threading.Thread(target=ask)
    worker.start()
    while not silent.received:
        time.sleep(0.05)
    cancelled = time.monotonic()
    llm.cancel()
    worker.join(5)
    assert not worker.is_alive() and time.monotonic() - cancelled < 2
    assert isinstance(outcome[0], KeyboardInterrupt)


# -- the preflight --------------------------------------------------------------------------------


def test_preflight_names_the_missing_provider_key():
    with pytest.raises(UsageError, match=r"^no ANTHROPIC_API_KEY in the environment for anthropic/claude-sonnet-4-5$"):
        preflight(ModelConfig(model="anthropic/claude-sonnet-4-5"))


def test_preflight_names_a_refused_endpoint(refused_url):
    with pytest.raises(UsageError, match=f"^cannot connect to {refused_url}: connection refused$"):
        preflight(ModelConfig(model="openai/test", api_base=refused_url))


def test_preflight_refuses_a_model_litellm_cannot_place():
    with pytest.raises(UsageError, match="litellm does not know the model 'qwen'") as failure:
        preflight(ModelConfig(model="qwen", api_base="http://127.0.0.1:9/v1"))
    assert "openai/qwen" in failure.value.hint


def test_preflight_opens_a_connection_but_sends_no_request(silent):
    preflight(ModelConfig(model="openai/test", api_base=silent.url))  # a server of one's own needs no key
    time.sleep(0.3)
    assert silent.connections == 1 and silent.received == b""


def test_preflight_of_a_server_of_ones_own_leaves_litellm_for_later(silent):
    # litellm then loads while the container starts, not before the run exists (bench/startup_bench.py)
    code = ("import sys; from orchestrator.config import ModelConfig; from orchestrator.llm.preflight import preflight; "
            f"preflight(ModelConfig(model='openai/test', api_base={silent.url!r})); print('litellm' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False" and silent.connections == 1


# -- the command ----------------------------------------------------------------------------------


def cairn(*args: str, runs_dir: Path, env_extra: dict[str, str] | None = None) -> subprocess.Popen:
    """`cairn ARGS` in a process of its own, with no provider key unless `env_extra` gives one."""
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")}
    return subprocess.Popen([sys.executable, "-m", "orchestrator.cli", *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**env, "CAIRN_RUNS_DIR": str(runs_dir), **(env_extra or {})})


def cairn_here(*args: str, runs_dir: Path, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """As `cairn`, in this process (tests/in_process.py), to its end: for a command refused before any run."""
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")}
    return cairn_in_process(*args, env={**env, "CAIRN_RUNS_DIR": str(runs_dir), **(env_extra or {})})


def test_a_missing_key_is_a_usage_error_and_leaves_no_run(runs_dir):
    proc = cairn_here("run", "hello", "--model", "anthropic/claude-sonnet-4-5", runs_dir=runs_dir)
    err = proc.stderr
    assert proc.returncode == 2
    assert err.splitlines()[0] == "cairn: error: no ANTHROPIC_API_KEY in the environment for anthropic/claude-sonnet-4-5"
    assert not runs_dir.exists() or not any(runs_dir.iterdir())


def test_a_refused_endpoint_is_a_usage_error_and_leaves_no_run(runs_dir, refused_url):
    proc = cairn_here("run", "hello", "--model", "openai/test", "--api-base", refused_url, runs_dir=runs_dir)
    err = proc.stderr
    assert proc.returncode == 2
    assert err.splitlines()[0] == f"cairn: error: cannot connect to {refused_url}: connection refused"
    assert not runs_dir.exists() or not any(runs_dir.iterdir())


@pytest.mark.docker
def test_ctrl_c_during_a_hung_request_ends_the_run_interrupted_and_resumable(runs_dir, sandbox_image, silent, tmp_path):
    proc = cairn("run", "hello", "--model", "openai/test", "--api-base", silent.url, runs_dir=runs_dir)
    deadline = time.monotonic() + 120
    while not silent.received and time.monotonic() < deadline:  # the sandbox is up, the request hangs
        time.sleep(0.1)
    assert silent.received.startswith(b"POST /v1/chat/completions")
    time.sleep(0.5)
    interrupted = time.monotonic()
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=30)
    # Ending includes stopping the sandbox; the request itself is dropped at once.
    assert time.monotonic() - interrupted < 15
    assert proc.returncode == 130
    (run,) = runs_dir.iterdir()
    assert json.loads((run / "state" / "run.json").read_text())["status"] == "interrupted"
    script = tmp_path / "done.json"
    script.write_text(json.dumps(DONE))
    resumed = cairn("resume", run.name, "--model", f"scripted:{script}", runs_dir=runs_dir)
    resumed.communicate(timeout=180)
    assert resumed.returncode == 0


@pytest.mark.docker
def test_a_retry_is_shown_on_stderr_and_kept_in_the_runs_log(runs_dir, sandbox_image, scripted_503):
    proc = cairn("run", "hello", "--model", "openai/test", "--api-base", scripted_503.url, runs_dir=runs_dir)
    _out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    assert f": 503 from {scripted_503.url}" in err and "retry 1/6 in " in err
    (run,) = runs_dir.iterdir()
    events = [json.loads(line) for line in (run / "state" / "events.jsonl").read_text().splitlines()]
    retry = next(e for e in events if e.get("kind") == "model_retry")
    assert retry["type"] == "notice" and retry["status"] == 503 and retry["endpoint"] == scripted_503.url
    shown = cairn_here("show", run.name, "--json", runs_dir=runs_dir)
    assert retry["text"] in json.loads(shown.stdout)["steps"][0]["notices"]


def test_resume_with_a_model_whose_key_is_missing_keeps_the_run_as_it_was(runs_dir):
    from orchestrator.runs.new_run import create_run
    from orchestrator.runs.settings import resolve_config

    run = create_run(runs_dir, "hello", resolve_config({}))
    run.release()  # as when the process that made it has ended
    before = (run.state / "run.json").read_text()
    proc = cairn_here("resume", run.id, "--model", "anthropic/claude-sonnet-4-5", runs_dir=runs_dir)
    err = proc.stderr
    assert proc.returncode == 2
    assert err.splitlines()[0] == "cairn: error: no ANTHROPIC_API_KEY in the environment for anthropic/claude-sonnet-4-5"
    assert (run.state / "run.json").read_text() == before


def test_a_batch_line_with_a_refused_endpoint_stops_the_batch_before_any_run(runs_dir, tmp_path, refused_url):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"task": "a"}) + "\n" + json.dumps({"task": "b", "model": "gpt-4o"}) + "\n")
    proc = cairn_here("batch", str(tasks), runs_dir=runs_dir, env_extra={"OPENAI_API_KEY": "sk-test",
                                                                         "OPENAI_API_BASE": refused_url})
    err = proc.stderr
    assert proc.returncode == 2
    assert err.splitlines()[0] == f"cairn: error: line 2: cannot connect to {refused_url}: connection refused"
    assert not runs_dir.exists() or [p.name for p in runs_dir.iterdir() if p.name != "batches"] == []
