"""The model client, end to end: the real litellm client against the real loopback scripted model."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from orchestrator.config import ModelConfig
from orchestrator.errors import UsageError
from orchestrator.llm import ContextOverflow, ModelError
from orchestrator.llm.client import FALLBACK_CONTEXT_WINDOW, LLM, add_cache_breakpoints
from orchestrator.llm.scripted import NO_MORE_TURNS, canonical_prompt, load_script, stop_scripted_servers
from orchestrator.llm.tokenizer import encoding

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "shell_exec",
            "description": "Run a shell command in the sandbox.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        },
    }
]
SYSTEM = {"role": "system", "content": "You are cairn, a careful agent."}
TASK = {"role": "user", "content": "List the files."}


@pytest.fixture(autouse=True)
def _stop_servers():
    yield
    stop_scripted_servers()


@pytest.fixture
def scripted(tmp_path: Path):
    """Makes an LLM that plays the given turns (and script-level options), with fast retries."""

    def make(turns: list[dict], stream: bool = True, **options: object) -> LLM:
        cfg = {k: options.pop(k) for k in ("max_retries", "request_timeout") if k in options}
        path = tmp_path / f"script-{len(list(tmp_path.iterdir()))}.json"
        path.write_text(json.dumps({"turns": turns, **options}))
        llm = LLM(ModelConfig(model=f"scripted:{path}", **cfg), stream=stream)
        llm.retry_base_seconds = 0.01
        return llm

    return make


def long_text(words: int) -> str:
    return " ".join(f"word{i}" for i in range(words))


def test_streaming_text_is_assembled_and_passed_to_on_text(scripted):
    llm = scripted([{"content": "The workspace is empty, so there is nothing to list yet."}])
    pieces: list[str] = []
    reply = llm.complete([SYSTEM, TASK], TOOLS, on_text=pieces.append)
    assert reply.message == {"role": "assistant", "content": "The workspace is empty, so there is nothing to list yet."}
    assert len(pieces) > 1 and "".join(pieces) == reply.message["content"]
    assert reply.tool_calls == [] and reply.finish_reason == "stop"


def test_streaming_tool_calls_are_assembled_with_exact_arguments(scripted):
    calls = [
        {"name": "shell_exec", "arguments": {"command": "ls -la /workspace && echo 'done'", "timeout": 30}},
        {"name": "file_read", "arguments": {"path": "notes/ünïcode.md", "offset": 3}},
    ]
    llm = scripted([{"content": "Looking.", "tool_calls": calls}])
    reply = llm.complete([SYSTEM, TASK], TOOLS)
    prefix = llm.scripted.id_prefix
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [
        (f"call_{prefix}_0_0", "shell_exec", json.dumps(calls[0]["arguments"], sort_keys=True)),
        (f"call_{prefix}_0_1", "file_read", json.dumps(calls[1]["arguments"], sort_keys=True)),
    ]
    assert reply.message["tool_calls"][1] == {
        "id": f"call_{prefix}_0_1",
        "type": "function",
        "function": {"name": "file_read", "arguments": json.dumps(calls[1]["arguments"], sort_keys=True)},
    }
    assert reply.finish_reason == "tool_calls"


def test_non_streaming_answer_gives_the_same_message_as_streaming(scripted):
    turn = {"content": "Running it.", "tool_calls": [{"name": "shell_exec", "arguments": {"command": "ls"}}]}
    streamed = scripted([turn]).complete([SYSTEM, TASK], TOOLS)
    whole = scripted([turn], stream=False).complete([SYSTEM, TASK], TOOLS)
    assert whole.message == streamed.message
    assert whole.usage.prompt_tokens == streamed.usage.prompt_tokens > 0


@pytest.mark.parametrize("stream", [True, False])
def test_the_models_reasoning_comes_back_beside_the_message_never_in_it(scripted, stream):
    thinking = "The workspace may be empty; listing it costs nothing. " * 3
    llm = scripted([{"reasoning": thinking, "content": "Listing.", "tool_calls": [{"name": "shell_exec",
                                                                                  "arguments": {"command": "ls"}}]}],
                   stream=stream)
    reply = llm.complete([SYSTEM, TASK], TOOLS)
    assert reply.reasoning == thinking
    assert reply.message["content"] == "Listing." and "reasoning_content" not in reply.message  # never sent back
    assert scripted([{"content": "Listing."}], stream=stream).complete([SYSTEM, TASK], TOOLS).reasoning is None


def test_the_reasoning_of_a_direct_request_comes_back_too():
    from orchestrator.llm.scripted import ScriptedServer

    server = ScriptedServer({"turns": [{"reasoning": "Think first.", "content": "Done thinking."}]})
    try:
        llm = LLM(ModelConfig(model="openai/scripted", api_base=server.start()))
        assert llm._direct is not None  # sent without litellm (orchestrator/llm/openai_compat.py)
        reply = llm.complete([SYSTEM, TASK], TOOLS)
    finally:
        server.stop()
    assert (reply.reasoning, reply.message["content"]) == ("Think first.", "Done thinking.")


def test_text_only_answer_has_no_tool_calls_key(scripted):
    reply = scripted([{"content": "Nothing to do."}]).complete([SYSTEM, TASK], TOOLS)
    assert "tool_calls" not in reply.message


def test_malformed_arguments_come_back_raw(scripted):
    reply = scripted([{"fail": "malformed"}]).complete([SYSTEM, TASK], TOOLS)
    assert reply.tool_calls[0].name == "shell_exec"
    assert reply.tool_calls[0].arguments == '{"command": "ls"'
    with pytest.raises(json.JSONDecodeError):
        json.loads(reply.tool_calls[0].arguments)


def test_rate_limit_is_retried_honouring_retry_after(scripted):
    llm = scripted([{"fail": 429, "retry_after": 1}, {"content": "ok"}])
    llm.retry_base_seconds = 30  # were Retry-After ignored, the wait would be 15 s or more
    started = time.monotonic()
    reply = llm.complete([SYSTEM, TASK], TOOLS)
    assert 0.9 <= time.monotonic() - started < 10
    assert reply.message["content"] == "ok" and reply.retries == 1
    assert len(llm.scripted.requests) == 2


def test_server_error_is_retried(scripted):
    llm = scripted([{"fail": 500, "retry_after": None}, {"fail": 503}, {"content": "ok"}])
    reply = llm.complete([SYSTEM, TASK], TOOLS)
    assert reply.message["content"] == "ok" and reply.retries == 2


def test_timeout_is_retried(scripted):
    llm = scripted([{"fail": "timeout"}, {"content": "ok"}], request_timeout=1)
    reply = llm.complete([SYSTEM, TASK], TOOLS)
    assert reply.message["content"] == "ok" and reply.retries == 1
    assert reply.usage.latency_s >= 1


def test_retries_give_up_after_max_retries(scripted):
    llm = scripted([{"fail": 503}] * 3 + [{"content": "too late"}], max_retries=2)
    with pytest.raises(ModelError, match="gave up after 2 retries") as failure:
        llm.complete([SYSTEM, TASK], TOOLS)
    assert failure.value.status_code == 503
    assert len(llm.scripted.requests) == 3


def test_bad_request_fails_at_once_with_the_message_on_one_line(scripted):
    llm = scripted([{"fail": 400, "message": "tools[0].function.name:\nbad name"}, {"content": "never"}])
    with pytest.raises(ModelError) as failure:
        llm.complete([SYSTEM, TASK], TOOLS)
    assert not isinstance(failure.value, ContextOverflow)
    assert "tools[0].function.name: bad name" in failure.value.message
    assert "\n" not in failure.value.message and failure.value.status_code == 400
    assert len(llm.scripted.requests) == 1


def test_overflow_raises_context_overflow(scripted):
    llm = scripted([{"fail": "overflow"}])
    with pytest.raises(ContextOverflow, match="maximum context length"):
        llm.complete([SYSTEM, TASK], TOOLS)
    assert len(llm.scripted.requests) == 1


def test_request_longer_than_script_window_overflows_without_using_a_turn(scripted):
    llm = scripted([{"content": "fits"}], context_window=2000)
    assert llm.context_window() == 2000 and llm.context_window_source == "script"
    with pytest.raises(ContextOverflow):
        llm.complete([SYSTEM, {"role": "user", "content": long_text(3000)}], TOOLS)
    assert llm.complete([SYSTEM, TASK], TOOLS).message["content"] == "fits"


def test_shared_prefix_is_reported_cached_in_128_token_blocks(scripted):
    llm = scripted([{"content": "one"}, {"content": "two"}])
    system = {"role": "system", "content": long_text(1500)}
    first = llm.complete([system, {"role": "user", "content": "first question"}], TOOLS)
    second = llm.complete([system, {"role": "user", "content": "second question"}], TOOLS)
    assert first.usage.cached_tokens == 0
    a, b = (encoding().encode(canonical_prompt(body)) for body in llm.scripted.requests)
    shared = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    cached = second.usage.cached_tokens
    assert cached % 128 == 0 and 1024 <= cached <= shared and shared - cached < 128


def test_shared_prefix_under_1024_tokens_is_not_cached(scripted):
    llm = scripted([{"content": "one"}, {"content": "two"}])
    system = {"role": "system", "content": long_text(300)}
    llm.complete([system, {"role": "user", "content": "first question"}], TOOLS)
    second = llm.complete([system, {"role": "user", "content": "second question"}], TOOLS)
    assert second.usage.prompt_tokens > 128 and second.usage.cached_tokens == 0


def test_cost_is_none_when_the_price_is_unknown(scripted):
    reply = scripted([{"content": "ok"}]).complete([SYSTEM, TASK], TOOLS)
    assert reply.usage.prompt_tokens > 0 and reply.usage.cost_usd is None


def test_cost_follows_the_script_pricing_with_cached_tokens_cheaper(scripted):
    pricing = {"input": 1e-6, "cached_input": 1e-7, "output": 2e-6}
    llm = scripted([{"content": "one"}, {"content": "two"}], pricing=pricing)
    system = {"role": "system", "content": long_text(1500)}
    llm.complete([system, TASK], TOOLS)
    usage = llm.complete([system, TASK, {"role": "user", "content": "more"}], TOOLS).usage
    assert usage.cached_tokens > 0
    expected = (usage.prompt_tokens - usage.cached_tokens) * 1e-6 + usage.cached_tokens * 1e-7
    expected += usage.completion_tokens * 2e-6
    assert usage.cost_usd == pytest.approx(expected)


def test_turns_running_out_give_text_only(scripted):
    llm = scripted([{"content": "the only turn"}])
    llm.complete([SYSTEM, TASK], TOOLS)
    reply = llm.complete([SYSTEM, TASK], TOOLS)
    assert reply.message == {"role": "assistant", "content": NO_MORE_TURNS} and reply.tool_calls == []


def test_tools_and_tool_choice_reach_the_model(scripted):
    llm = scripted([{"content": "ok"}])
    forced = {"type": "function", "function": {"name": "shell_exec"}}
    llm.complete([SYSTEM, TASK], TOOLS, tool_choice=forced)
    request = llm.scripted.requests[0]
    assert request["tools"] == TOOLS and request["tool_choice"] == forced
    assert request["stream"] is True and request["stream_options"] == {"include_usage": True}


def test_scripted_log_gets_one_json_line_per_request(scripted, tmp_path, monkeypatch):
    log = tmp_path / "requests.jsonl"
    monkeypatch.setenv("CAIRN_SCRIPTED_LOG", str(log))
    llm = scripted([{"fail": 429}, {"content": "ok"}])
    llm.complete([SYSTEM, TASK], TOOLS)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(lines) == 2 and lines[1]["messages"] == [SYSTEM, TASK]


def test_cache_breakpoints_go_on_system_and_on_the_end_of_history():
    history = [
        SYSTEM,
        TASK,
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "shell_exec", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"name": "shell_exec", "arguments": "{}"}},
        ]},
        {"role": "tool", "tool_call_id": "b", "content": "file.txt"},
    ]
    tail = {"role": "user", "content": "todo.md:\n- [ ] list files"}
    marked = add_cache_breakpoints(history + [tail], history_end=len(history))
    ephemeral = {"type": "ephemeral"}
    assert marked[0]["cache_control"] == ephemeral
    assert marked[3]["cache_control"] == ephemeral
    assert [m for i, m in enumerate(marked) if i not in (0, 3)] == [TASK, history[2], tail]
    assert "cache_control" not in history[0] and "cache_control" not in history[3]  # copies, not edits


def test_cache_breakpoints_leave_a_system_notice_in_the_tail_alone():
    notice = {"role": "system", "content": "Budget left: $0.10"}
    marked = add_cache_breakpoints([SYSTEM, TASK, notice], history_end=2)
    assert [i for i, m in enumerate(marked) if "cache_control" in m] == [0, 1]


def test_cache_breakpoint_on_a_tool_call_message_goes_on_its_last_call():
    calls = [{"id": "a", "type": "function", "function": {"name": "x", "arguments": "{}"}}] * 2
    assistant = {"role": "assistant", "content": "Two calls.", "tool_calls": calls}
    marked = add_cache_breakpoints([SYSTEM, TASK, assistant], history_end=3)
    assert "cache_control" not in marked[2]
    assert marked[2]["tool_calls"][1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in marked[2]["tool_calls"][0]


def test_cache_breakpoint_on_list_content_goes_on_its_last_block():
    system = {"role": "system", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    marked = add_cache_breakpoints([system, TASK], history_end=None)
    assert marked[0]["content"][1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in marked[0]["content"][0] and marked[1] == TASK


def test_context_window_falls_back_and_says_so():
    llm = LLM(ModelConfig(model="openai/a-model-litellm-does-not-know"))
    assert llm.context_window() == FALLBACK_CONTEXT_WINDOW and llm.context_window_source == "fallback"


def test_context_window_from_config_wins():
    llm = LLM(ModelConfig(model="openai/a-model-litellm-does-not-know", context_window=32_000))
    assert llm.context_window() == 32_000 and llm.context_window_source == "config"


def test_builtin_demo_script_loads_and_unknown_script_is_a_usage_error():
    assert load_script("demo")["turns"]
    with pytest.raises(UsageError):
        load_script("no-such-script")


def test_cache_breakpoints_survive_litellms_translation_to_anthropic():
    from litellm.llms.anthropic.chat.transformation import AnthropicConfig

    call = {"id": "a", "type": "function", "function": {"name": "shell_exec", "arguments": '{"command": "ls"}'}}
    history = [SYSTEM, TASK, {"role": "assistant", "content": None, "tool_calls": [call]}]
    tail = {"role": "user", "content": "todo.md"}
    marked = add_cache_breakpoints([*history, tail], history_end=len(history))
    body = AnthropicConfig().transform_request(
        model="claude-sonnet-4-5", messages=marked, optional_params={"max_tokens": 10}, litellm_params={}, headers={}
    )
    assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
    blocks = [block for message in body["messages"] for block in message["content"]]
    assert [b["type"] for b in blocks if "cache_control" in b] == ["tool_use"]


def test_an_agent_folders_api_key_goes_with_the_request_and_nowhere_else():
    llm = LLM(ModelConfig(model="openai/gpt-4o-mini", api_key="sk-from-agent-json"))
    request = llm._request([SYSTEM, TASK], TOOLS, "auto", None)
    assert request["api_key"] == "sk-from-agent-json"
    assert "sk-from-agent-json" not in ModelConfig(model="m", api_key="sk-from-agent-json").model_dump_json()
    assert "api_key" not in LLM(ModelConfig(model="openai/gpt-4o-mini"))._request([SYSTEM, TASK], TOOLS, "auto", None)


def test_a_request_with_tools_leaves_litellms_mcp_gateway_unloaded(tmp_path):
    # litellm's check for its proxy's MCP tools costs half a second of imports; cairn's tools are never such.
    # Asked in this process: no path of cairn loads the gateway, so it is absent unless this request loads it.
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": [{"content": "ok"}]}))
    reply = LLM(ModelConfig(model=f"scripted:{script}")).complete([{"role": "user", "content": "hi"}], TOOLS)
    assert reply.message["content"] == "ok"
    assert "litellm.responses.mcp.chat_completions_handler" not in sys.modules