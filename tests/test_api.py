"""The public Python API: `import orchestrator` stays cheap, `Agent` runs on ports of one's own, and
the internal route (`resolve_config`, `create_run`, `LiveRun.go`) takes what a person would give it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import orchestrator
from orchestrator.ports import Unseen
from orchestrator.errors import UsageError
from orchestrator.runs.new_run import create_run
from orchestrator.runs.settings import resolve_config
from orchestrator import events as ev
from orchestrator.testing import LocalSandbox, ScriptedModel


def test_import_orchestrator_loads_neither_litellm_nor_docker():
    code = "import sys, orchestrator; orchestrator.Agent; print(sorted({'litellm', 'docker'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_resolve_config_takes_a_plain_model_string():
    assert resolve_config({"model": "openai/qwen2.5-coder"}).model.model == "openai/qwen2.5-coder"


def test_the_task_given_to_both_create_run_and_go_is_sent_once(tmp_path):
    from orchestrator.agent.loop import Loop
    from orchestrator.runs.compose import LiveRun

    cfg = resolve_config({"model": "scripted:demo"})
    run = create_run(tmp_path / "runs", "count to three", cfg)
    model = ScriptedModel({"turns": [{"tool_calls": [{"name": "task_done", "arguments": {"summary": "3"}}]}]})
    session = LiveRun.__new__(LiveRun)  # the LiveRun's own go(), on in-memory ports instead of Docker
    with LocalSandbox(run.workspace, run.cairn_dir) as sandbox:
        session.agent = Loop(run, cfg, sandbox, model, Unseen())
        assert session.go("count to three") == "done"
    sent = json.dumps(model.requests[0]["messages"])
    assert sent.count("count to three") == 1


def test_an_agent_runs_a_task_on_the_in_memory_ports_and_reports_its_result(tmp_path):
    model = ScriptedModel({"turns": [
        {"tool_calls": [{"name": "file_write", "arguments": {"path": "hello.txt", "content": "hi\n"}}]},
        {"tool_calls": [{"name": "task_done", "arguments": {"summary": "wrote hello.txt"}}]},
    ]})
    seen = []
    agent = orchestrator.Agent(model=model, sandbox=LocalSandbox(), runs_dir=tmp_path / "runs", on_event=seen.append)
    result = agent.run("write hello.txt")
    assert (result.status, result.result, result.ok) == ("done", "wrote hello.txt", True)
    assert (result.run_dir / "workspace" / "hello.txt").read_text() == "hi\n"
    assert result.usage["prompt_tokens"] > 0
    assert [e.status for e in seen if isinstance(e, ev.StatusChanged)] == ["running", "done"]


def test_an_agent_on_a_folder_of_ones_own_works_in_it_in_place(tmp_path):
    folder = tmp_path / "project"
    folder.mkdir()
    model = ScriptedModel({"turns": [
        {"tool_calls": [{"name": "shell_exec", "arguments": {"command": "echo made > made.txt"}}]},
        {"tool_calls": [{"name": "task_done", "arguments": {"summary": "ok"}}]},
    ]})
    result = orchestrator.Agent(model, LocalSandbox(folder), runs_dir=tmp_path / "runs").run("make a file")
    assert result.status == "done"
    assert (folder / "made.txt").read_text() == "made\n"


def test_an_agent_offered_some_tools_refuses_the_others_as_results(tmp_path):
    model = ScriptedModel({"turns": [
        {"tool_calls": [{"name": "shell_exec", "arguments": {"command": "true"}}]},
        {"tool_calls": [{"name": "task_done", "arguments": {"summary": "ok"}}]},
    ]})
    result = orchestrator.Agent(model, LocalSandbox(), tools=["file_read"], runs_dir=tmp_path / "runs").run("look")
    assert result.status == "done"
    offered = [t["function"]["name"] for t in model.requests[0]["tools"]]
    assert offered == ["file_read", "task_done"]
    assert "unknown tool 'shell_exec'" in json.dumps(model.requests[1]["messages"])


def test_an_agent_records_the_tools_it_offers_when_the_run_is_made_and_never_rewrites_the_log(tmp_path):
    model = ScriptedModel({"turns": [
        {"tool_calls": [{"name": "ask_user", "arguments": {"question": "which file?"}}]},
        {"tool_calls": [{"name": "file_read", "arguments": {"path": "missing.txt"}}]},
        {"tool_calls": [{"name": "task_done", "arguments": {"summary": "read"}}]},
    ]})
    agent = orchestrator.Agent(model, LocalSandbox(), tools=["file_read", "ask_user"], runs_dir=tmp_path / "runs")
    asked = agent.run("read a file")
    log = asked.run_dir / "state" / "events.jsonl"
    first = log.read_bytes()
    started = json.loads(first.split(b"\n")[0])
    assert started["type"] == "run_started"
    assert [t["function"]["name"] for t in started["tools"]] == ["file_read", "task_done", "ask_user"]
    answered = agent.resume("missing.txt")
    assert answered.status == "done"
    assert log.read_bytes().startswith(first)  # appended to, never rewritten


def test_an_agent_is_driven_as_cairn_run_drives_a_run(tmp_path):
    """The one drive sequence (orchestrator/runs/drive.py): the run is live while it is driven, as every
    face sees it, and let go of when the drive ends."""
    from orchestrator.store.run_dir import RunDir
    from orchestrator.view.read import read_view

    seen: list[str] = []
    runs = tmp_path / "runs"

    def look(event: object) -> None:
        if getattr(event, "type", None) == "tool_started":
            seen.append(read_view(RunDir.newest(runs)).status)

    model = ScriptedModel({"turns": [{"tool_calls": [{"name": "shell_exec", "arguments": {"command": "true"}}]},
                                     {"tool_calls": [{"name": "task_done", "arguments": {"summary": "ok"}}]}]})
    result = orchestrator.Agent(model, LocalSandbox(), runs_dir=runs, on_event=look).run("go")
    assert seen == ["running", "running"] and result.status == "done"
    assert read_view(RunDir(result.run_dir)).status == "done"  # let go of: no process drives it now


def test_resume_from_python_decides_as_cairn_resume_does(tmp_path):
    """orchestrator.resume goes through the same decisions (orchestrator/runs/resume.py): a run that waits
    for an answer needs one, and the refusal leaves the run free and as it was."""
    model = ScriptedModel({"turns": [{"tool_calls": [{"name": "ask_user", "arguments": {"question": "red?"}}]}]})
    asked = orchestrator.Agent(model, LocalSandbox(), runs_dir=tmp_path / "runs").run("pick")
    with pytest.raises(UsageError, match="waits for an answer: red[?]"):
        orchestrator.resume(asked.id, runs_dir=tmp_path / "runs")
    from orchestrator.store.run_dir import RunDir
    from orchestrator.view.read import read_view

    view = read_view(RunDir(asked.run_dir))
    assert (view.status, view.live, view.waiting) == ("waiting", False, {"kind": "question", "question": "red?"})


def test_an_agent_answers_its_question_on_resume(tmp_path):
    model = ScriptedModel({"turns": [
        {"tool_calls": [{"name": "ask_user", "arguments": {"question": "red or blue?"}}]},
        {"tool_calls": [{"name": "task_done", "arguments": {"summary": "blue it is"}}]},
    ]})
    agent = orchestrator.Agent(model, LocalSandbox(), runs_dir=tmp_path / "runs")
    asked = agent.run("pick a colour")
    assert (asked.status, asked.result, asked.exit_code) == ("waiting", "red or blue?", 1)
    answered = agent.resume("blue")
    assert (answered.status, answered.result) == ("done", "blue it is")
    assert {"role": "user", "content": "blue"} in model.requests[1]["messages"]


def test_an_unknown_tool_name_is_a_usage_error():
    with pytest.raises(UsageError, match="no built-in tool 'rm_rf'"):
        orchestrator.Agent(ScriptedModel({"turns": []}), LocalSandbox(), tools=["rm_rf"])


def test_run_refuses_a_bad_setting_before_any_run_exists(tmp_path):
    with pytest.raises(UsageError, match="invalid setting limits.max_steps"):
        orchestrator.run("x", model="scripted:demo", max_steps=0, runs_dir=tmp_path / "runs")
    assert not (tmp_path / "runs").exists()
