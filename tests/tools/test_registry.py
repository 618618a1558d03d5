"""The tool registry (orchestrator/tools/registry.py): one object per tool, the specs the model sees
unchanged, arguments checked from the schema, and a tool of one's own in one file plus its registration."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from orchestrator.config import RunConfig, SandboxConfig
from orchestrator.agent.delegate import delegate_tool
from orchestrator.tools.builtin import builtin_tools
from orchestrator.tools.outcome import BadCall, Observation
from orchestrator.tools.registry import Registry, ToolContext, canonical
from orchestrator.tools.specs import BUILTIN_TOOLS

ROOT = Path(__file__).resolve().parents[2]


def example_tool():
    spec = importlib.util.spec_from_file_location("file_count_lines", ROOT / "examples/tools/file_count_lines.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FILE_COUNT_LINES


class Agentish:
    """Stands in for the loop's Agent class: the registry only hands it to agent_delegate."""


def test_the_builtin_specs_are_the_ones_the_model_has_always_seen() -> None:
    golden = json.loads((ROOT / "tests/data/builtin_tools.json").read_text())
    assert canonical(BUILTIN_TOOLS) == golden
    assert Registry(builtin_tools(delegate_tool(Agentish))).specs() == golden


def test_required_arguments_come_from_the_schema() -> None:
    registry = Registry(builtin_tools(delegate_tool(Agentish)))
    with pytest.raises(BadCall, match="file_edit needs the string argument\\(s\\): old, new"):
        registry.parse_arguments("file_edit", json.dumps({"path": "a", "old": 3}))
    assert registry.parse_arguments("file_read", '{"path": "a.txt", "limit": 2}') == {"path": "a.txt", "limit": 2}


def test_an_unknown_tool_is_named_with_the_tools_there_are() -> None:
    registry = Registry(builtin_tools(delegate_tool(Agentish)))
    with pytest.raises(BadCall, match="unknown tool 'rm_rf'; the tools are: shell_exec, file_read"):
        registry.parse_arguments("rm_rf", "{}")


def test_a_name_is_registered_once() -> None:
    registry = Registry(builtin_tools(delegate_tool(Agentish)))
    with pytest.raises(ValueError, match="already registered"):
        registry.add(builtin_tools(delegate_tool(Agentish))[0])


class OneAnswer:
    """A sandbox that answers each op with a fixed result and notes what it was asked."""

    network_enabled = False

    def __init__(self, result: dict) -> None:
        self.result, self.asked = result, []

    def call(self, op: str, **args: object) -> dict:
        self.asked.append((op, args))
        return self.result


def test_the_shell_timeout_is_decided_once_and_named_in_the_footer() -> None:
    sandbox = OneAnswer({"exit_code": 124, "output": "", "timed_out": True, "duration_ms": 5000})
    cfg = SandboxConfig(command_timeout=5, max_command_timeout=60)
    registry = Registry(builtin_tools(delegate_tool(Agentish)))
    seen = registry.run("shell_exec", {"command": "sleep 99", "timeout": 600}, ToolContext(sandbox, cfg, "/cairn/obs/1.txt"))
    assert sandbox.asked == [("shell", {"command": "sleep 99", "timeout": 60.0, "save_as": "/cairn/obs/1.txt"})]
    assert seen.error and "timed out after 60 s" in seen.footer


def test_the_example_tool_counts_lines_through_the_read_op() -> None:
    sandbox = OneAnswer({"path": "notes.txt", "content": "a\n", "start_line": 1, "end_line": 1, "total_lines": 3,
                         "truncated": True})
    seen = example_tool().run({"path": "notes.txt"}, ToolContext(sandbox, SandboxConfig(), "/cairn/obs/1.txt"))
    assert sandbox.asked == [("read", {"path": "notes.txt", "limit": 1})]
    assert seen == Observation("notes.txt: 3 lines")


@pytest.mark.docker
def test_the_scripted_model_calls_a_tool_of_the_runs_own(tmp_path: Path, sandbox_image: str) -> None:
    from orchestrator.ui.display import Quiet
    from orchestrator.runs.compose import LiveRun
    from orchestrator.runs.new_run import create_run

    tool = example_tool()
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": [
        {"tool_calls": [{"name": "file_write", "arguments": {"path": "notes.txt", "content": "a\nb\nc\n"}}]},
        {"tool_calls": [{"name": "file_count_lines", "arguments": {"path": "notes.txt"}}]},
        {"tool_calls": [{"name": "task_done", "arguments": {"summary": "counted"}}]},
    ]}))
    cfg = RunConfig.model_validate({"model": {"model": f"scripted:{script}", "request_timeout": 3}})
    run = create_run(tmp_path / "runs", "count the lines", cfg, tools=[tool])
    log = tmp_path / "requests.jsonl"
    os.environ["CAIRN_SCRIPTED_LOG"] = str(log)
    try:
        with LiveRun(run, cfg, Quiet(), tools=[tool]) as live:
            status = live.go()
    finally:
        del os.environ["CAIRN_SCRIPTED_LOG"]
    assert status == "done"
    first = json.loads(log.read_text().splitlines()[0])
    assert [t["function"]["name"] for t in first["tools"]][-1] == "file_count_lines"
    finished = [e for e in run.events.read()[0] if e.type == "tool_finished"]
    said = finished[1].output or finished[1].content  # as the tool gave it; the context frames it (framing.py)
    assert finished[1].name == "file_count_lines" and said == "notes.txt: 3 lines"
    assert not finished[1].error
