"""`cairn show RUN --atif`: a run as one ATIF trajectory (orchestrator/integrations/atif.py), checked on real
runs of the loop (the scripted model and the in-memory sandbox, tests/fake_loop.py) against Harbor's
published JSON shape, the rules of Harbor's validators, and, where a Harbor venv exists, Harbor's models."""

from __future__ import annotations

import json

import pytest

from orchestrator.integrations.atif import trajectory
from orchestrator.store import inbox
from tests.atif_rules import HARBOR_PYTHON, harbor_check, rule_errors, schema_errors
from tests.fake_loop import call, done, play, resume, turn
from tests.in_process import cairn_in_process
from tests.loop_helpers import play as docker_play

PRICING = {"pricing": {"input": 3e-06, "cached_input": 3e-07, "output": 1.5e-05}}
BIG = "python3 -c \"print('\\n'.join('line %05d ' % i + 'x' * 40 for i in range(4000)))\""
THINKING = "The output will be long: cairn saves it to a file and shows me its head and tail."
FAIL = "python3 -c \"raise ValueError('boom')\""


@pytest.fixture(scope="module")
def story(tmp_path_factory):
    """One run with everything an ATIF document has to carry: the model's reasoning, a big output offloaded
    to a file, a failed command, a question and its answer, a `cairn say` message, a sub-agent, a
    compaction, a check that failed and went back to the agent, and failed again."""
    tmp_path = tmp_path_factory.mktemp("atif")
    first = play(tmp_path, [
        {**turn(call("shell_exec", command=BIG), content="Looking at the big output first."), "reasoning": THINKING},
        turn(call("shell_exec", command=FAIL)),
        turn(call("ask_user", question="red or blue?")),
    ], task="paint the fence", script_extra=PRICING,
        settings={"context": {"keep_recent_results": 0}, "check": {"command": "false", "rounds": 1}})
    assert first.status == "waiting"
    inbox.say(first.run.state, "SAY-MARKER: use two coats")
    (tmp_path / "again").mkdir()
    out = resume(first, message="blue", tmp_path=tmp_path / "again", script_extra=PRICING, turns=[
        turn(call("agent_delegate", task="count the planks")),
        turn(call("shell_exec", command="seq 3")),  # the sub-agent's
        done("three planks"),  # the sub-agent's
        {"fail": "overflow"},  # the provider refuses the context: cairn compacts and asks again
        done("painted blue, two coats"),  # the check fails: its output goes back to the agent
        turn(call("file_write", path="painted.txt", content="blue, two coats\n")),
        done("painted, and said so in painted.txt"),  # it fails again: the run ends
    ])
    assert out.status == "done", out.doc
    return out


def agent_steps(doc):
    return [s for s in doc["steps"] if s["source"] == "agent"]


def test_each_model_request_is_one_agent_step_with_its_usage(story):
    doc = trajectory(story.run)
    requests = [e for e in story.run.events.read()[0] if e.type == "model_request" and not e.model_extra.get("child")]
    steps = agent_steps(doc)
    assert len(steps) == len(requests) == 7
    for step, request in zip(steps, requests):
        assert step["llm_call_count"] == 1
        m = step["metrics"]
        assert (m["prompt_tokens"], m["cached_tokens"], m["completion_tokens"]) == (
            request.usage["prompt_tokens"], request.usage["cached_tokens"], request.usage["completion_tokens"])
        assert m["prompt_tokens"] > 0 and m["completion_tokens"] > 0
    assert steps[0]["message"] == "Looking at the big output first."
    assert steps[0]["reasoning_content"] == THINKING  # where the provider gave it, and only there
    assert not [s for s in steps[1:] if "reasoning_content" in s]
    assert doc["agent"]["name"] == "cairn" and doc["agent"]["model_name"] == "scripted"
    assert [t["function"]["name"] for t in doc["agent"]["tool_definitions"]][:1] and \
        "shell_exec" in {t["function"]["name"] for t in doc["agent"]["tool_definitions"]}


def test_the_totals_are_the_runs_usage_as_show_json_gives_it(story):
    doc = trajectory(story.run)
    usage, final = story.doc["usage"], doc["final_metrics"]
    assert final["total_prompt_tokens"] == usage["prompt_tokens"]
    assert final["total_cached_tokens"] == usage["cached_tokens"]
    assert final["total_completion_tokens"] == usage["completion_tokens"]
    assert final["total_cost_usd"] == usage["cost_usd"] > 0
    assert final["total_steps"] == len(doc["steps"])
    # the agent's own steps and the sub-agent's trajectory add up to the run's totals
    sub = doc["subagent_trajectories"][0]
    for key in ("prompt_tokens", "cached_tokens", "completion_tokens"):
        own = sum(s["metrics"][key] for s in agent_steps(doc))
        theirs = sum(s["metrics"][key] for s in agent_steps(sub))
        assert own + theirs == usage[key] == final["extra"]["agent"][key] + final["extra"]["subagents"][key]


def test_tool_calls_and_their_observations_match_by_id(story):
    doc = trajectory(story.run)
    steps = agent_steps(doc)
    for step in steps:
        ids = [c["tool_call_id"] for c in step.get("tool_calls", [])]
        results = [r["source_call_id"] for r in step.get("observation", {}).get("results", [])]
        assert results == ids  # every call ran and answered, in order
    big, failed = steps[0]["observation"]["results"][0], steps[1]["observation"]["results"][0]
    assert steps[0]["tool_calls"][0]["arguments"] == {"command": BIG}
    assert big["extra"]["offloaded_to"] == "/cairn/obs/1-shell_exec.txt"
    assert "/cairn/obs/1-shell_exec.txt" in big["content"] and len(big["content"]) < 6000
    assert (story.run.cairn_dir / "obs/1-shell_exec.txt").is_file()
    assert failed["extra"]["error"] is True and "ValueError: boom" in failed["content"]
    assert "error" not in big["extra"]


def test_the_persons_words_are_user_steps_where_they_reached_the_run(story):
    doc = trajectory(story.run)
    users = [(s["message"], s["extra"]["cairn"]["source"]) for s in doc["steps"] if s["source"] == "user"]
    assert users[0] == ("paint the fence", "task")
    assert ("blue", "answer") in users and ("SAY-MARKER: use two coats", "say") in users
    assert doc["steps"][0]["source"] == "system"  # the system prompt comes first
    ask = next(i for i, s in enumerate(doc["steps"]) if any(c["function_name"] == "ask_user" for c in s.get("tool_calls", [])))
    answer = next(i for i, s in enumerate(doc["steps"]) if s["message"] == "blue")
    assert answer > ask


def test_the_checks_are_system_steps_and_a_failed_ones_output_too(story):
    doc = trajectory(story.run)
    checks = [s for s in doc["steps"] if s.get("extra", {}).get("cairn", {}).get("source") == "check"]
    assert [s["source"] for s in checks] == ["system"] * 3
    first, told, last = checks
    assert first["message"].startswith("check failed (exit code 1) · false") and first["extra"]["cairn"]["sent_back"]
    assert "false" in told["message"] and "sent_back" not in told["extra"]["cairn"]  # what the agent was told
    assert last["message"].startswith("check failed") and last["extra"]["cairn"]["sent_back"] is False
    assert doc["steps"].index(told) < doc["steps"].index(agent_steps(doc)[-2])  # before the agent's next request


def test_the_compaction_is_a_context_management_step_holding_the_context_after_it(story):
    doc = trajectory(story.run)
    compactions = [s for s in doc["steps"] if "context_management" in s.get("extra", {})]
    assert len(compactions) == 1
    step = compactions[0]
    assert step["source"] == "system"
    cm = step["extra"]["context_management"]
    (event,) = [e for e in story.run.events.read()[0] if e.type == "compaction"]
    assert (cm["type"], cm["boundary"], cm["strategy"]) == ("compaction", "replace", event.kind)
    assert cm["tokens_after"] < cm["tokens_before"]
    # the context after it is exactly what the next request carried (before its tail)
    request = story.requests[4]["messages"][:-1]  # resumed: delegate, the sub-agent's two, refused, this one
    context = [{**r["extra"], "content": r["content"]} for r in step["observation"]["results"]]
    assert [m.get("content") or "" for m in request] == [m["content"] for m in context]
    assert [m["role"] for m in request] == [m["role"] for m in context]
    assert any("/cairn/obs/1-shell_exec.txt" in m["content"] for m in context)  # the big output's pointer
    assert doc["steps"].index(step) < doc["steps"].index(agent_steps(doc)[-1])


def test_the_sub_agent_is_an_embedded_trajectory_its_call_refers_to(story):
    doc = trajectory(story.run)
    (sub,) = doc["subagent_trajectories"]
    delegate = next(s for s in agent_steps(doc) if s.get("tool_calls", [{}])[0].get("function_name") == "agent_delegate")
    (result,) = delegate["observation"]["results"]
    (ref,) = result["subagent_trajectory_ref"]
    assert ref["trajectory_id"] == sub["trajectory_id"] and ref["extra"]["status"] == "done"
    assert sub["session_id"] == doc["session_id"] == story.run.id
    assert [s["message"] for s in sub["steps"] if s["source"] == "user"] == ["count the planks"]
    assert [c["function_name"] for s in agent_steps(sub) for c in s.get("tool_calls", [])] == ["shell_exec", "task_done"]
    assert sub["extra"]["cairn"]["status"] == "done"


def test_the_document_fits_harbors_published_shape_and_rules(story):
    doc = trajectory(story.run)
    assert schema_errors(doc) == []
    assert rule_errors(doc) == []
    assert doc["schema_version"].startswith("ATIF-v1.")


def test_the_rules_catch_what_harbor_would_refuse(story):
    doc = json.loads(json.dumps(trajectory(story.run)))
    doc["steps"][3]["step_id"] = 9
    doc["steps"][0]["metrics"] = {"prompt_tokens": 1}
    agent_steps(doc)[0]["observation"]["results"][0]["source_call_id"] = "nobody"
    errors = rule_errors(doc)
    assert len(errors) == 3, errors
    doc["steps"][1]["source"] = "robot"
    assert schema_errors(doc)


def test_the_same_log_gives_the_same_document(story):
    assert json.dumps(trajectory(story.run), sort_keys=True) == json.dumps(trajectory(story.run), sort_keys=True)


@pytest.mark.skipif(not HARBOR_PYTHON.is_file(), reason="no Harbor venv (.venv-harbor/: Python 3.12 with harbor 0.26, "
                    "docs/atif.md says how): validated against Harbor's JSON schema and rules only")
def test_harbors_own_models_accept_the_document_unchanged(story):
    doc = trajectory(story.run)
    checked = harbor_check(doc)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert json.loads(checked.stdout) == json.loads(json.dumps(doc))


def test_show_atif_prints_the_document_on_stdout(story):
    env = {"CAIRN_RUNS_DIR": str(story.run.root.parent), "PATH": "/usr/bin:/bin", "HOME": str(story.run.root.parent)}
    shown = cairn_in_process("show", story.run.id, "--atif", env=env)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == json.loads(json.dumps(trajectory(story.run)))
    refused = cairn_in_process("show", story.run.id, "--atif", "--step", "1", env=env)
    assert refused.returncode == 2 and "--step" in refused.stderr and len(refused.stderr.strip().splitlines()) <= 2


def test_a_run_that_failed_before_any_request_is_still_a_valid_document(tmp_path):
    out = play(tmp_path, [{"fail": 401}])
    doc = trajectory(out.run)
    assert out.status == "failed" and agent_steps(doc) == []
    assert doc["extra"]["cairn"]["status"] == "failed" and "401" in doc["extra"]["cairn"]["error"]
    assert schema_errors(doc) == [] and rule_errors(doc) == []


def test_summaries_are_context_management_steps_and_their_requests_count_in_the_totals(tmp_path):
    window = 4000  # small, so that old turns are summarized by the model (context/compaction.py, move 3)
    turns = [turn(call("shell_exec", command=f"echo step {i} of the long walk along the fence"), content=f"Note {i}.")
             for i in range(20)]  # some are taken by the summaries' requests; then the script runs out
    out = play(tmp_path, turns, script_extra={"context_window": window, **PRICING}, settings={
        "model": {"context_window": window},
        "context": {"keep_recent_results": 0, "keep_recent_turns": 1, "summary_tokens": 100,
                    "high_water": 0.6, "low_water": 0.45}})
    assert out.status == "stopped", out.doc
    summaries = [e for e in out.events("compaction") if e.kind == "summary"]
    assert summaries and all(e.usage for e in summaries)
    doc = trajectory(out.run)
    assert schema_errors(doc) == [] and rule_errors(doc) == []
    if HARBOR_PYTHON.is_file():  # Harbor's own models too, where they can be had (the story's test says when not)
        checked = harbor_check(doc)
        assert checked.returncode == 0, checked.stdout + checked.stderr
    steps = [s for s in doc["steps"] if s.get("extra", {}).get("context_management", {}).get("strategy") == "summary"]
    assert [s["extra"]["cairn"]["summary_path"] for s in steps] == [e.summary_path for e in summaries]
    # the context after each summary is what the agent's next request carried; a summary's own request
    # (the agent's request with the instruction appended, no tool callable) is no agent step
    agent_requests = [r for r in out.requests if r.get("tool_choice") != "none"]
    assert len(agent_steps(doc)) == len(agent_requests) == len(out.events("model_request"))
    for step in steps:
        after = sum(1 for s in doc["steps"][: doc["steps"].index(step)] if s["source"] == "agent")
        context = [r["content"] for r in step["observation"]["results"]]
        assert context == [m.get("content") or "" for m in agent_requests[after]["messages"][:-1]]
        assert any(e.summary_path in text for text in context for e in summaries)
    # the run's usage (show --json and run.json alike) is the steps' plus the summaries' requests
    usage, final = out.doc["usage"], doc["final_metrics"]
    stored = out.run.read_meta()["usage"]
    for key in ("prompt_tokens", "cached_tokens", "completion_tokens"):
        steps_sum = sum(s["metrics"][key] for s in agent_steps(doc))
        summed = sum(e.usage[key] for e in summaries)
        assert steps_sum + summed == usage[key] == stored[key] == final[f"total_{key}"]
        assert final["extra"]["summaries"][key] == summed
    assert final["total_cost_usd"] == usage["cost_usd"] == pytest.approx(stored["cost_usd"], abs=1e-6)  # rounded to 6 places


def test_the_critics_notes_are_system_steps_and_its_requests_count_in_the_totals(tmp_path):
    note = "CRITIC: you never ran the tests you wrote."
    echo = [turn(call("shell_exec", command=f"echo step {n}")) for n in (1, 2, 3)]
    out = play(tmp_path, [echo[0], echo[1], {"content": note}, echo[2], done()], settings={"critic": {"every": 2}},
               script_extra=PRICING)
    assert out.status == "done", out.doc
    doc = trajectory(out.run)
    assert schema_errors(doc) == [] and rule_errors(doc) == []
    (critic,) = [s for s in doc["steps"] if s.get("extra", {}).get("cairn", {}).get("source") == "critic"]
    assert critic["source"] == "system" and critic["message"] == note
    assert critic["extra"]["cairn"]["path"] == "/cairn/critic/002.md"
    agents = agent_steps(doc)
    assert len(agents) == 4 and agents[1]["step_id"] < critic["step_id"] < agents[2]["step_id"]
    final, usage = doc["final_metrics"], out.doc["usage"]
    assert final["extra"]["critic"]["requests"] == 1
    for key in ("prompt_tokens", "cached_tokens", "completion_tokens"):
        assert sum(s["metrics"][key] for s in agents) + final["extra"]["critic"][key] == usage[key] == final[f"total_{key}"]


def test_an_approvals_question_and_answer_go_with_the_call_they_were_about(tmp_path):
    rules = {"shell_patterns": [r"^echo deploy"],
             "rules": [{"tool": "shell_exec", "match": "echo deploy*", "action": "deny", "reason": "staging only"}]}
    out = play(tmp_path, [turn(call("shell_exec", command="echo hello"), call("shell_exec", command="echo deploy prod")),
                          done()], settings={"sandbox": {"network": "bridge"}, "approvals": rules})
    assert out.status == "done"
    doc = trajectory(out.run)
    hello, deploy = agent_steps(doc)[0]["tool_calls"]
    assert "extra" not in hello
    assert deploy["extra"]["approval"]["answer"].startswith("✗ denied by")
    assert "staging only" in deploy["extra"]["approval"]["answer"]
    denied = agent_steps(doc)[0]["observation"]["results"][1]
    assert denied["source_call_id"] == deploy["tool_call_id"] and denied["extra"]["error"] is True
    assert schema_errors(doc) == [] and rule_errors(doc) == []


@pytest.mark.docker
def test_a_run_in_the_docker_sandbox_through_litellm_exports_the_same_way(tmp_path, sandbox_image):
    """The real client (litellm, streamed, with the reasoning) and the real sandbox: the document has what
    the in-memory runs above have."""
    out = docker_play(tmp_path, [
        {**turn(call("shell_exec", command=BIG), content="Big output ahead."), "reasoning": THINKING},
        turn(call("shell_exec", command=FAIL)),
        done("looked"),
    ], script_extra=PRICING)
    assert out.status == "done"
    doc = trajectory(out.run)
    assert schema_errors(doc) == [] and rule_errors(doc) == []
    if HARBOR_PYTHON.is_file():
        checked = harbor_check(doc)
        assert checked.returncode == 0, checked.stdout + checked.stderr
    steps = agent_steps(doc)
    assert len(steps) == len(out.requests) == 3
    assert steps[0]["reasoning_content"] == THINKING and steps[0]["message"] == "Big output ahead."
    big, failed = steps[0]["observation"]["results"][0], steps[1]["observation"]["results"][0]
    assert big["extra"]["offloaded_to"] == "/cairn/obs/1-shell_exec.txt" and failed["extra"]["error"] is True
    usage = out.doc["usage"]
    assert [doc["final_metrics"][f"total_{k}"] for k in ("prompt_tokens", "cached_tokens", "completion_tokens")] == \
        [usage[k] for k in ("prompt_tokens", "cached_tokens", "completion_tokens")]
    assert doc["final_metrics"]["total_cost_usd"] == usage["cost_usd"] > 0
