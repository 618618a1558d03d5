"""Hugging Face's tiny-agents files run unchanged.

tests/data/tiny_agents/ holds one agent folder for every shape the published examples use (written from
the schema of huggingface_hub's tiny-agents, types.py, and the files Hugging Face ships): a server
without `type` (local-coder), `tools.include` and `tools.exclude`, `allowed_tools`, the older nested
`config` form, http and sse servers with headers from `inputs`, `apiKey`, `endpointUrl`, uvx and npx
servers, a `docker run` server, a local python server, PROMPT.md and AGENTS.md.

Every folder loads to a valid config. Those whose servers can run here (no network at run time, no
Docker inside the sandbox, no browser) run as they are with the scripted model: one tool call, then done.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.runs.agent_folder import load_agent, load_config
from orchestrator.config import RunConfig
from orchestrator.tools.specs import BUILTIN_TOOLS, tool_names
from tests.loop_helpers import call, done, tool_messages, turn
from tests.tools.test_mcp_servers import play_config

EXAMPLES = Path(__file__).resolve().parents[1] / "data" / "tiny_agents"
ALL = sorted(p.name for p in EXAMPLES.iterdir() if (p / "agent.json").is_file())

# The folders that run here: the call the scripted model makes, the tools the run offers beside the
# built-in ones, and what the call's result must hold.
RUNNABLE = {
    "clock": (call("get_current_time", timezone="UTC"), ["convert_time", "get_current_time"], '"timezone": "UTC"'),
    "clock-filtered": (call("get_current_time", timezone="Asia/Tokyo"), ["get_current_time"], "Asia/Tokyo"),
    "local-files": (call("list_directory", path="."), None, "[FILE] notes.txt"),
    "local-python": (call("word_count", text="tiny agents run unchanged"), ["word_count"], "4 words"),
}


def load(name: str) -> RunConfig:
    return load_config(EXAMPLES / name, RunConfig(), cli_model=None, cli_api_base=None, ask=None)


def test_every_example_folder_is_tested():
    assert len(ALL) >= 9 and set(RUNNABLE) <= set(ALL)


@pytest.mark.parametrize("name", ALL)
def test_every_example_loads_unchanged_to_a_valid_config(name):
    cfg = load(name)
    document = json.loads((EXAMPLES / name / "agent.json").read_text())
    assert len(cfg.mcp.servers) == len(document["servers"])
    assert cfg.model.model.endswith(document["model"])
    for server, given in zip(cfg.mcp.servers, document["servers"]):
        assert server.type == given.get("type", "stdio")
        assert server.name and server.name == server.name.strip("-_")
    RunConfig.model_validate(json.loads(json.dumps(cfg.model_dump(mode="json"))))  # run.json reads back


def test_a_server_without_type_is_stdio():
    (server,) = load("local-coder").mcp.servers
    assert (server.type, server.command, server.args) == ("stdio", "npx", ["-y", "@playwright/mcp@latest"])
    assert server.name == "playwright-mcp"


def test_tools_include_and_exclude_become_the_filter():
    (included,) = load("browser-tools").mcp.servers
    assert (included.allowed_tools, included.excluded_tools) == (["browser_navigate", "browser_snapshot"], None)
    (excluded,) = load("clock-filtered").mcp.servers
    assert (excluded.allowed_tools, excluded.excluded_tools) == (None, ["convert_time"])


def test_a_python_dash_c_server_is_named_by_its_command():
    (server,) = load("local-python").mcp.servers
    assert server.name == "python3"


def test_a_misspelt_key_inside_tools_is_still_refused(tmp_path):
    from orchestrator.errors import UsageError

    (tmp_path / "agent.json").write_text(json.dumps(
        {"servers": [{"command": "uvx", "args": ["mcp-server-time"], "tools": {"includes": ["x"]}}]}))
    with pytest.raises(UsageError, match=r"servers\.0\.tools\.includes: unknown key"):
        load_agent(tmp_path)


@pytest.mark.docker
@pytest.mark.parametrize("name", sorted(RUNNABLE))
def test_the_runnable_examples_run_unchanged(name, tmp_path, sandbox_image):
    the_call, tools, expected = RUNNABLE[name]
    cfg = load(name)
    out = play_config(tmp_path, cfg, [turn(the_call), done()], workspace_files={"notes.txt": "hello\n"})
    assert out.status == "done", out.events("status_changed")
    names = tool_names(out.events("run_started")[0].tools)
    if tools is not None:
        assert names == tool_names(BUILTIN_TOOLS) + tools
    (result,) = tool_messages(out.requests[1])
    assert expected in result["content"], result["content"]
    assert not [c for s in out.doc["steps"][:1] for c in s["tool_calls"] if c["error"]]
