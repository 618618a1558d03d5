"""The agent loop end to end on the in-memory ports (tests/memory_loop.py: the Store, the Model and the
Sandbox all in this process, no run directory); the model client's retries through litellm and the
Docker sandbox."""

from __future__ import annotations

import json

import pytest

from tests.loop_helpers import play as docker_play
from tests.memory_loop import call, done, play, resume, text_of, tool_messages, turn


BIG = "python3 -c \"print('\\n'.join('line %05d ' % i + 'x' * 40 for i in range(4000)))\""


def test_task_done_ends_the_run_with_its_summary(tmp_path):
    out = play(tmp_path, [done("all good")])
    assert out.status == "done"
    assert out.doc["result"] == "all good"


def test_a_text_only_answer_stops_the_run(tmp_path):
    out = play(tmp_path, [{"content": "I think I am finished."}])
    assert out.status == "stopped"


def test_big_output_is_offloaded_and_reads_back_byte_for_byte(tmp_path):
    out = play(tmp_path, [
        turn(call("shell_exec", command=BIG)),
        turn(call("file_read", path="/cairn/obs/1-shell_exec.txt", offset=1234, limit=3)),
        done(),
    ])
    saved = out.run.cairn_dir / "obs/1-shell_exec.txt"
    expected = "".join("line %05d " % i + "x" * 40 + "\n" for i in range(4000))
    assert saved.read_text() == expected
    preview, read_back = tool_messages(out.requests[2])
    assert "/cairn/obs/1-shell_exec.txt" in preview["content"] and len(preview["content"]) < 6000
    assert read_back["content"].startswith("".join(expected.splitlines(keepends=True)[1233:1236]))
    assert out.doc["steps"][0]["tool_calls"][0]["offloaded_to"] == "/cairn/obs/1-shell_exec.txt"


def test_a_failure_stays_in_every_later_request(tmp_path):
    out = play(tmp_path, [
        turn(call("shell_exec", command="python3 -c \"raise ValueError('boom')\"")),
        turn(call("shell_exec", command="echo next")),
        done(),
    ])
    for request in out.requests[1:]:
        assert "ValueError: boom" in text_of(request) and "exit code 1" in text_of(request)
    assert out.doc["steps"][0]["tool_calls"][0]["error"] is True


def test_unknown_tools_and_malformed_arguments_are_results_the_model_sees(tmp_path):
    out = play(tmp_path, [turn(call("rm_rf", path="/")), {"fail": "malformed"}, done()])
    first, second = tool_messages(out.requests[2])
    assert "unknown tool 'rm_rf'" in first["content"]
    assert "not valid JSON" in second["content"]


def test_refused_path_is_an_error_result(tmp_path):
    out = play(tmp_path, [turn(call("file_read", path="../state/run.json")), done()])
    assert "error:" in tool_messages(out.requests[1])[0]["content"]
    assert out.doc["steps"][0]["tool_calls"][0]["error"] is True


def test_todo_is_recited_at_the_tail_and_not_stored_in_history(tmp_path):
    out = play(tmp_path, [
        turn(call("todo_write", content="- [ ] first thing\n- [ ] UNIQUE-MARKER\n")),
        turn(call("shell_exec", command="true")),
        done(),
    ])
    for request in out.requests[1:]:
        *history, tail = request["messages"]
        assert "UNIQUE-MARKER" in tail["content"]
        assert not any("UNIQUE-MARKER" in json.dumps(m) and m["role"] == "user" for m in history)


def test_the_step_limit_forces_task_done_on_the_last_step(tmp_path):
    out = play(tmp_path, [turn(call("shell_exec", command="true"))] * 5, settings={"limits": {"max_steps": 3}})
    assert out.requests[2]["tool_choice"] == {"type": "function", "function": {"name": "task_done"}}
    assert all(r.get("tool_choice") in (None, "auto") for r in out.requests[:2])
    assert out.status == "budget"


def test_the_cost_limit_stops_the_run(tmp_path):
    pricing = {"pricing": {"input": 0.001, "cached_input": 0.0001, "output": 0.002}}
    out = play(tmp_path, [turn(call("shell_exec", command="true"))] * 10, script_extra=pricing,
               settings={"limits": {"max_cost": 1.0}})
    assert out.status == "budget"
    assert 1.0 <= out.doc["usage"]["cost_usd"] < 5.0


def test_the_loop_guard_warns_then_stops(tmp_path):
    out = play(tmp_path, [turn(call("shell_exec", command="cat missing.txt"))] * 8)
    assert out.status == "looping"
    warned = [r for r in out.requests if "Loop warning" in r["messages"][-1]["content"]]
    assert len(warned) == 1
    assert len(out.requests) == 4  # three identical calls, the warning, one more: stopped


@pytest.mark.docker
def test_transient_model_errors_are_retried(tmp_path, sandbox_image):
    out = docker_play(tmp_path, [{"fail": 429}, {"fail": 500}, {"fail": "timeout"}, done()])
    assert out.status == "done"


@pytest.mark.docker
def test_a_client_error_fails_the_run_with_the_providers_message(tmp_path, sandbox_image):
    out = docker_play(tmp_path, [{"fail": 401}])
    assert out.status == "failed"
    assert out.session.agent.error is not None


def test_a_model_that_fails_for_good_fails_the_run_saying_why(tmp_path):
    out = play(tmp_path, [{"fail": 401}])
    assert out.status == "failed"
    assert "401" in out.doc["error"]["reason"]


def test_context_overflow_compacts_and_retries_once(tmp_path):
    out = play(tmp_path, [
        turn(call("shell_exec", command="seq 1 400")),
        turn(call("shell_exec", command="seq 401 800")),
        {"fail": "overflow"},
        done(),
    ], settings={"context": {"keep_recent_results": 0, "keep_recent_turns": 4, "low_water": 0.25}})
    assert out.status == "done"
    assert [c.kind for c in out.events("compaction")] == ["pointers"]
    before, after = tool_messages(out.requests[-2])[0], tool_messages(out.requests[-1])[0]
    assert "\n399\n400\n" in before["content"]
    assert "\n399\n400\n" not in after["content"] and "/cairn/obs/" in after["content"]


def test_compaction_keeps_requests_under_the_window_and_pointers_resolve(tmp_path):
    window = 12000
    noisy = "python3 -c \"import random; random.seed({n}); print(' '.join(str(random.random()) for _ in range(400)))\""
    turns = [turn(call("shell_exec", command=noisy.format(n=n))) for n in range(14)] + [done()]
    out = play(tmp_path, turns, script_extra={"context_window": window},
               settings={"model": {"context_window": window}, "context": {"keep_recent_results": 2}})
    assert out.status == "done", out.doc
    assert not [n for n in out.events("notice") if "too long" in n.text]  # the model never overflowed
    compactions = out.events("compaction")
    assert compactions and all(c.tokens_after < c.tokens_before for c in compactions)
    for c in compactions:
        for content in c.replacements.values():
            path = content.split("/cairn/obs/")[1].split()[0].rstrip(";,.)]")
            assert (out.run.cairn_dir / "obs" / path).is_file()


def test_ask_user_waits_and_resume_delivers_the_answer(tmp_path):
    out = play(tmp_path, [turn(call("ask_user", question="red or blue?"))])
    assert out.status == "waiting"
    again = resume(out, message="blue", turns=[done("chose blue")], tmp_path=tmp_path)
    assert again.status == "done"
    assert again.requests[0]["messages"][-2] == {"role": "user", "content": "blue"}


def test_same_events_give_the_same_request_bytes_after_resume(tmp_path):
    out = play(tmp_path, [turn(call("shell_exec", command=BIG)), turn(call("shell_exec", command="echo hi")),
                          {"content": "pausing"}])
    again = resume(out, message="go on", turns=[done()], tmp_path=tmp_path)
    before, after = out.requests[-1]["messages"][:-1], again.requests[0]["messages"][:-1]
    # The history before the stop is a byte-identical prefix of the first request after the resume.
    assert json.dumps(after[: len(before)], sort_keys=True) == json.dumps(before, sort_keys=True)
    assert json.dumps(out.requests[-1]["tools"], sort_keys=True) == json.dumps(again.requests[0]["tools"], sort_keys=True)


def test_a_cost_limit_on_a_model_without_a_price_is_said_once(tmp_path):
    out = play(tmp_path, [turn(call("shell_exec", command="true")), done()], settings={"limits": {"max_cost": 1.0}})
    assert out.status == "done"
    assert len([n for n in out.events("notice") if "cost limit cannot be enforced" in n.text]) == 1


def test_the_persons_message_reaches_the_next_request_through_the_store(tmp_path):
    out = play(tmp_path, [turn(call("shell_exec", command="true")), done()], before=lambda s: s.say("use tabs"))
    assert out.requests[0]["messages"][2] == {"role": "user", "content": "use tabs"}
    assert [e.text for e in out.events("user_message")] == ["use tabs"]
    assert out.run.checkpoints == [1, 2]  # the workspace is committed after every step


def test_a_stop_request_ends_the_run_after_the_step_it_came_in(tmp_path):
    out = play(tmp_path, [turn(call("shell_exec", command="true")), done()], before=lambda s: s.request_stop())
    assert out.status == "interrupted" and len(out.requests) == 1
    assert out.doc["error"]["reason"] == "stopped by cairn stop"
