"""An OpenAI chat model whose facts are known is asked without litellm: the same body, usage and cost.

The endpoint is cairn's scripted model served as a plain OpenAI-compatible server on loopback (it
reports prompt-cache hits as OpenAI does); each comparison sends the same request through litellm,
the path every other model takes, and compares what the server received and what cairn counted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from orchestrator.config import ModelConfig
from orchestrator.llm.client import LLM
from orchestrator.llm.direct import HEADER_VARIABLES, usage_cost
from orchestrator.llm.facts import cache_file, cached_facts, model_facts
from orchestrator.llm.preflight import preflight
from orchestrator.llm.scripted import ScriptedServer

TOOLS = [{"type": "function", "function": {"name": "shell_exec", "description": "Run a command.",
                                           "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]
# Long enough (over 1,024 tokens) for the server to report a prompt-cache hit when it is sent again.
SYSTEM = "You are cairn. " + " ".join(f"Rule {n}: keep notes in files, one fact a line." for n in range(150))
MESSAGES = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "List the files."}]
TURN = {"content": "Looking.", "tool_calls": [{"name": "shell_exec", "arguments": {"command": "ls -la"}}]}


@pytest.fixture(autouse=True)
def own_settings(tmp_path, monkeypatch):
    """An empty cache of litellm's facts, and none of the OpenAI variables of whoever runs the tests."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_BASE", *HEADER_VARIABLES):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server():
    served = ScriptedServer({"turns": [TURN] * 6})
    served.start()
    yield served
    served.stop()


def model(url: str | None, name: str = "openai/gpt-4o", stream: bool = True) -> LLM:
    return LLM(ModelConfig(model=name, api_base=url, max_retries=0, temperature=0.3, max_output_tokens=500),
               stream=stream)


def through_litellm(llm: LLM) -> LLM:
    llm.__dict__["_direct"] = None
    return llm


@pytest.mark.parametrize("stream", [True, False])
def test_a_priced_openai_model_is_asked_directly_with_litellms_body_usage_and_cost(server, stream):
    direct = model(server.url, stream=stream)
    assert direct._direct is not None
    direct.complete(MESSAGES, TOOLS)  # fills the server's prompt cache: the next two are hits
    mine = direct.complete(MESSAGES, TOOLS)
    theirs = through_litellm(model(server.url, stream=stream)).complete(MESSAGES, TOOLS)
    _, sent_direct, sent_by_litellm = server.requests
    assert sent_direct == sent_by_litellm
    assert sent_direct["model"] == "gpt-4o" and sent_direct["temperature"] == 0.3 and sent_direct["max_tokens"] == 500
    assert mine.usage.cached_tokens == theirs.usage.cached_tokens > 0
    assert (mine.usage.prompt_tokens, mine.usage.completion_tokens) == (theirs.usage.prompt_tokens,
                                                                       theirs.usage.completion_tokens)
    assert mine.usage.cost_usd == pytest.approx(theirs.usage.cost_usd, rel=1e-9)
    assert mine.usage.cost_usd > 0


def test_without_an_api_base_the_endpoint_and_key_come_from_the_variables_litellm_reads(server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    direct = model(None, name="gpt-4o-mini")  # litellm places a bare OpenAI name with the openai provider
    assert direct._direct is not None and direct.endpoint == server.url
    assert direct._direct.headers["Authorization"] == "Bearer sk-test"
    direct.complete(MESSAGES, TOOLS)  # the prompt cache filled, so that both answers below are hits
    mine = direct.complete(MESSAGES, TOOLS)
    theirs = through_litellm(model(None, name="gpt-4o-mini")).complete(MESSAGES, TOOLS)
    assert server.requests[1] == server.requests[2]
    assert mine.usage.cached_tokens == theirs.usage.cached_tokens > 0
    assert mine.usage.cost_usd == pytest.approx(theirs.usage.cost_usd, rel=1e-9)


def test_api_openai_com_is_asked_directly_only_with_a_key(monkeypatch):
    assert model(None)._direct is None  # litellm's own message says the key is missing
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert model(None)._direct.url == "https://api.openai.com/v1/chat/completions"


@pytest.mark.parametrize("name", ["openai/gpt-5", "openai/o3-mini", "anthropic/claude-sonnet-4-5",
                                  "gemini/gemini-2.5-pro", "deepseek/deepseek-chat"])
def test_a_model_litellm_translates_or_rewrites_keeps_litellm(name, server):
    assert model(server.url, name=name)._direct is None


@pytest.mark.parametrize("variable", ["OPENAI_ORG_ID", "OPENAI_PROJECT_ID", "LITELLM_ROUTE_ALL_CHAT_OPENAI_TO_RESPONSES"])
def test_a_setting_litellm_or_the_openai_client_would_add_keeps_litellm(variable, server, monkeypatch):
    monkeypatch.setenv(variable, "true")
    assert model(server.url)._direct is None


@pytest.mark.parametrize("name", ["openai/gpt-4o", "gpt-4o-mini", "openai/gpt-4.1", "openai/gpt-3.5-turbo"])
def test_the_direct_cost_is_litellms_cost_for_every_kind_of_token(name):
    from orchestrator.llm.facts import litellm_module
    from orchestrator.llm.openai_compat import Fields

    prices = model_facts(name).prices
    assert prices is not None
    for prompt, cached, completion, reasoning in [(1, 0, 1, 0), (12_345, 0, 678, 0), (90_000, 65_536, 4_000, 1_500)]:
        usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
                 "prompt_tokens_details": {"cached_tokens": cached},
                 "completion_tokens_details": {"reasoning_tokens": reasoning}}
        litellm = litellm_module()
        expected = sum(litellm.cost_per_token(model=name, prompt_tokens=prompt, completion_tokens=completion,
                                              usage_object=litellm.Usage(**usage)))
        assert usage_cost(prices, Fields(usage)) == pytest.approx(expected, rel=1e-9)


def test_a_price_that_depends_on_the_size_of_the_request_keeps_litellm():
    facts = model_facts("gemini/gemini-2.5-pro")  # its price doubles above 200k tokens
    assert facts.priced and facts.prices is None


def test_facts_kept_by_an_older_cairn_are_asked_again():
    model_facts("openai/gpt-4o")
    kept = json.loads(cache_file().read_text())
    key = next(iter(kept))
    cache_file().write_text(json.dumps({key: {"max_input_tokens": 128000, "priced": True}}))
    assert cached_facts("openai/gpt-4o") is None
    assert model_facts("openai/gpt-4o").prices is not None


def test_a_known_openai_model_is_checked_and_asked_without_importing_litellm(server, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    cfg = ModelConfig(model="openai/gpt-4o")
    preflight(cfg)  # the first time, litellm is asked for the model's facts, which are kept
    assert LLM(cfg).complete([{"role": "user", "content": "hi"}], []).usage.cost_usd > 0
    code = ("import sys; from orchestrator.config import ModelConfig; from orchestrator.llm.client import LLM; "
            "from orchestrator.llm.preflight import preflight; "
            "cfg = ModelConfig(model='openai/gpt-4o'); preflight(cfg); llm = LLM(cfg); "
            "reply = llm.complete([{'role': 'user', 'content': 'hi'}], []); "
            "print(reply.usage.cost_usd > 0, llm.context_window(), 'litellm' in sys.modules)")
    again = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ)
    assert again.stdout.split() == ["True", "128000", "False"]  # the kept facts: litellm is never imported


def test_the_facts_of_another_installed_litellm_are_kept_and_those_of_a_replaced_one_dropped(tmp_path):
    model_facts("openai/gpt-4o")
    kept = json.loads(cache_file().read_text())
    [(key, entry)] = kept.items()
    _model, package, stamps, local = json.loads(key)
    elsewhere = tmp_path / "other-venv" / "litellm"  # another virtualenv's litellm, still installed
    elsewhere.mkdir(parents=True)
    other = json.dumps(["openai/gpt-4o", str(elsewhere), stamps, local])
    replaced = json.dumps(["openai/gpt-4o", package, ["1:1", "1:1"], local])  # this litellm before an upgrade
    gone = json.dumps(["openai/gpt-4o", str(tmp_path / "removed" / "litellm"), stamps, local])
    cache_file().write_text(json.dumps({other: entry, replaced: entry, gone: entry}))
    model_facts("gpt-4o-mini")
    assert set(json.loads(cache_file().read_text())) == {other, json.dumps(["gpt-4o-mini", package, stamps, local])}
