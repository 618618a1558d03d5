"""A server of one's own (`openai/NAME --api-base URL`) is asked without litellm, with the same result.

The server is cairn's scripted model served as a plain OpenAI-compatible endpoint; the comparison runs
the same requests through litellm (the path every other provider and `scripted:PATH` take).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from orchestrator.config import ModelConfig
from orchestrator.llm import ContextOverflow, ModelError
from orchestrator.llm.client import LLM
from orchestrator.llm.facts import cache_file, model_facts
from orchestrator.llm.scripted import ScriptedServer

TOOLS = [{"type": "function", "function": {"name": "shell_exec", "description": "Run a command.",
                                           "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]
MESSAGES = [{"role": "system", "content": "You are cairn."}, {"role": "user", "content": "List the files."}]
TURN = {"content": "Looking.", "tool_calls": [{"name": "shell_exec", "arguments": {"command": "ls -la"}}]}


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """Each test starts with an empty cache of litellm's facts."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.fixture
def server():
    served = ScriptedServer({"turns": [TURN] * 4})
    served.start()
    yield served
    served.stop()


def own_server(url: str, stream: bool = True, model: str = "openai/my-model") -> LLM:
    llm = LLM(ModelConfig(model=model, api_base=url, max_retries=1), stream=stream)
    llm.retry_base_seconds = 0.01
    return llm


def through_litellm(llm: LLM) -> LLM:
    llm.__dict__["_direct"] = None  # as a priced model would go
    return llm


def without_ids(message: dict) -> dict:
    calls = [{**call, "id": call["id"].rsplit("_", 2)[0]} for call in message.get("tool_calls", [])]
    return {**message, "tool_calls": calls}


def test_a_server_of_ones_own_is_asked_without_litellm_once_its_facts_are_known(server, tmp_path):
    # The first run learns litellm's facts about the model and keeps them (here, in this process, which
    # has litellm loaded anyway); a fresh process then answers without importing litellm at all.
    first = own_server(server.url)
    assert first.complete(MESSAGES, TOOLS).tool_calls[0].arguments == '{"command": "ls -la"}'
    assert first.context_window() == 128000
    assert "openai/my-model" in cache_file().read_text()
    code = ("import sys; from orchestrator.config import ModelConfig; from orchestrator.llm.client import LLM; "
            f"llm = LLM(ModelConfig(model='openai/my-model', api_base={server.url!r})); "
            "reply = llm.complete([{'role': 'user', 'content': 'hi'}], []); "
            "print(reply.tool_calls[0].arguments, llm.context_window(), 'litellm' in sys.modules)")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    again = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert again.stdout.split() == ['{"command":', '"ls', '-la"}', "128000", "False"]


@pytest.mark.parametrize("stream", [True, False])
def test_the_direct_answer_is_the_one_litellm_gives(server, stream):
    direct = own_server(server.url, stream).complete(MESSAGES, TOOLS)
    via_litellm = through_litellm(own_server(server.url, stream)).complete(MESSAGES, TOOLS)
    assert without_ids(direct.message) == without_ids(via_litellm.message)  # the server numbers its calls
    assert direct.finish_reason == via_litellm.finish_reason == "tool_calls"
    assert direct.usage.prompt_tokens == via_litellm.usage.prompt_tokens > 0
    assert direct.usage.completion_tokens == via_litellm.usage.completion_tokens > 0


def test_the_server_receives_the_body_litellm_sends(server):
    answered = [{"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "shell_exec", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"}]
    own_server(server.url).complete(MESSAGES + answered, TOOLS, tool_choice="required")
    through_litellm(own_server(server.url)).complete(MESSAGES + answered, TOOLS, tool_choice="required")
    direct, via_litellm = server.requests
    for key in ("model", "messages", "tools", "tool_choice", "stream", "stream_options"):
        assert direct[key] == via_litellm[key], key
    assert direct["model"] == "my-model"


def test_the_scripted_model_and_a_model_litellm_rewrites_keep_litellm(server, tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": [TURN]}))
    assert LLM(ModelConfig(model=f"scripted:{script}"))._direct is None  # docs/contracts.md: through litellm
    assert LLM(ModelConfig(model="openai/my-model"))._direct is None  # api.openai.com without a key
    assert own_server(server.url, model="openai/o3-mini")._direct is None  # litellm renames max_tokens
    assert own_server(server.url)._direct is not None
    assert own_server(server.url, model="openai/gpt-4o")._direct is not None  # priced: see test_direct.py


def test_an_overflow_from_the_server_is_a_context_overflow():
    served = ScriptedServer({"turns": [{"fail": "overflow"}]})
    served.start()
    try:
        with pytest.raises(ContextOverflow, match="maximum context length"):
            own_server(served.url).complete(MESSAGES, TOOLS)
    finally:
        served.stop()


def test_a_bad_request_fails_at_once_in_the_servers_words():
    served = ScriptedServer({"turns": [{"fail": 400, "message": "tools[0].function.name:\nbad name"}]})
    url = served.start()
    try:
        with pytest.raises(ModelError) as failure:
            own_server(served.url).complete(MESSAGES, TOOLS)
    finally:
        served.stop()
    assert failure.value.status_code == 400 and len(served.requests) == 1
    assert failure.value.message == f"openai/my-model refused the request (400) at {url}: tools[0].function.name: bad name"


def test_litellms_facts_are_kept_per_litellm_and_setting(monkeypatch):
    assert model_facts("openai/gpt-4o").priced and model_facts("openai/gpt-4o").max_input_tokens
    assert not model_facts("openai/my-model").priced
    kept = json.loads(cache_file().read_text())
    assert [json.loads(key)[0] for key in kept] == ["openai/gpt-4o", "openai/my-model"]
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "False")  # litellm would read another price list
    from orchestrator.llm import facts

    assert facts._key("openai/gpt-4o") not in kept
