"""Agent folders (agent.json of tiny-agents) and MCP servers: stdio in the sandbox, http from the host."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import pytest

from orchestrator.runs.agent_folder import load_agent, load_config, resolve, restore_secrets
from orchestrator.config import RunConfig
from orchestrator.errors import SandboxError, UsageError
from orchestrator.tools.mcp_packages import package_of
from orchestrator.tools.specs import BUILTIN_TOOLS, tool_names
from tests.loop_helpers import _go, call, done, tool_messages, turn

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "time-agent"
SECRET = "sk-very-secret-value-123"


def write(path: Path, doc: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def config_of(agent: Path | dict, tmp_path: Path, **kw) -> RunConfig:
    if isinstance(agent, dict):
        agent = write(tmp_path / "agent" / "agent.json", agent)
    return load_config(agent, RunConfig(), cli_model=kw.get("model"), cli_api_base=None, ask=None)


def play_config(tmp_path: Path, cfg: RunConfig, turns: list[dict], task: str = "test task", resumed_run=None,
                message: str | None = None, workspace_files: dict[str, str] | None = None, approve: str = "never"):
    """Like loop_helpers.play, with a whole RunConfig (an agent folder's) and files put in a new workspace.
    Its MCP calls run unasked (`approve`: never) unless a test is about approvals (tests/agent/test_approvals.py).
    Results are framed in one plain form, as loop_helpers.play frames them."""
    from orchestrator.runs.new_run import create_run

    script = tmp_path / f"script-{len(list(tmp_path.glob('script-*.json')))}.json"
    script.write_text(json.dumps({"turns": turns}))
    cfg = cfg.model_copy(deep=True)
    cfg.approvals.mode = approve
    cfg.context.vary_framing = False
    cfg.model.model, cfg.model.retry_base_seconds, cfg.model.request_timeout = f"scripted:{script}", 0.01, 3
    log = tmp_path / "requests.jsonl"
    log.unlink(missing_ok=True)
    run = resumed_run or create_run(tmp_path / "runs", task, cfg)
    for relative, text in (workspace_files or {}).items():
        (run.workspace / relative).write_text(text)
    return _go(run, cfg, log, message, resumed=resumed_run is not None)


# -- agent.json ----------------------------------------------------------------------------------


def test_the_example_folder_parses_with_its_prompt_and_model(tmp_path):
    cfg = config_of(EXAMPLE, tmp_path)
    assert cfg.model.model == "huggingface/nebius/Qwen/Qwen2.5-72B-Instruct"
    assert "get_current_time" in cfg.system_prompt_extra  # PROMPT.md
    (server,) = cfg.mcp.servers
    assert (server.name, server.type, server.command) == ("mcp-server-time", "stdio", "uvx")
    assert cfg.mcp.agent_file == str((EXAMPLE / "agent.json").resolve())
    assert config_of(EXAMPLE / "agent.json", tmp_path).mcp.servers == cfg.mcp.servers  # the file, not the folder
    assert config_of(EXAMPLE, tmp_path, model="openai/gpt-4o-mini").model.model == "openai/gpt-4o-mini"


def test_the_older_nested_form_and_endpoint_url(tmp_path):
    cfg = config_of({"model": "qwen3", "endpointUrl": "http://localhost:1234", "servers": [
        {"type": "stdio", "config": {"command": "python3", "args": ["-m", "my_server"], "env": {"A": "1"}}},
        {"type": "sse", "config": {"url": "https://example.com/sse"}, "allowed_tools": ["x"]},
    ]}, tmp_path)
    assert (cfg.model.model, cfg.model.api_base) == ("openai/qwen3", "http://localhost:1234/v1")
    stdio, sse = cfg.mcp.servers
    assert (stdio.name, stdio.args, stdio.env) == ("my_server", ["-m", "my_server"], {"A": "1"})
    assert (sse.name, sse.url, sse.allowed_tools) == ("example", "https://example.com/sse", ["x"])


@pytest.mark.parametrize("doc, problem", [
    ({"servers": [{"type": "stdio"}]}, "servers.0.command: Field required"),
    ({"servers": [{"type": "ftp", "url": "x"}]}, "servers.0.type"),
    ({"servers": [{"type": "http", "url": "localhost"}]}, "servers.0.url"),
    ({"modle": "x"}, "modle: unknown key"),
    ({"servers": [{"type": "http", "url": "http://x", "headers": {"A": "${input:nope}"}}]}, "no input has the id 'nope'"),
])
def test_a_broken_config_is_one_line_naming_the_file(tmp_path, doc, problem):
    path = write(tmp_path / "agent.json", doc)
    with pytest.raises(UsageError) as err:
        load_agent(path)
    assert str(path) in err.value.message and problem in err.value.message and "\n" not in err.value.message


def test_not_json_and_missing_are_usage_errors(tmp_path):
    (tmp_path / "agent.json").write_text("{nope")
    with pytest.raises(UsageError, match="not valid JSON"):
        load_agent(tmp_path)
    with pytest.raises(UsageError, match="no agent.json"):
        load_agent(tmp_path / "..")
    with pytest.raises(UsageError, match="no such file"):
        load_agent(tmp_path / "missing.json")


def test_inputs_fall_back_to_the_environment_and_never_reach_run_json(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_TOKEN", SECRET)
    monkeypatch.delenv("UNUSED_ONE", raising=False)
    doc = {"model": "m", "provider": "together", "apiKey": "${input:my-token}",
           "inputs": [{"type": "promptString", "id": "my-token", "description": "a token", "password": True},
                      {"type": "promptString", "id": "unused-one", "description": "never used"}],
           "servers": [{"type": "http", "url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer ${input:my-token}"}},
                       {"type": "stdio", "command": "srv", "env": {"TOKEN": "${input:my-token}", "PLAIN": "x"}}]}
    asked = []
    folder = load_agent(write(tmp_path / "a" / "agent.json", doc))
    resolved = resolve(folder, ask=lambda label, password: asked.append((label, password)) or "")
    assert [a[1] for a in asked] == [True]  # only the input in use is asked for; a blank answer -> $MY_TOKEN
    http, stdio = resolved.servers
    assert http.headers == {"Authorization": f"Bearer {SECRET}"} and stdio.env["TOKEN"] == SECRET
    assert resolved.api_key == SECRET
    cfg = config_of(tmp_path / "a", tmp_path)
    assert cfg.model.api_key.get_secret_value() == SECRET
    dumped = json.dumps(cfg.model_dump(mode="json"))
    assert SECRET not in dumped and "<redacted>" in dumped
    # A resume reads the values from the agent.json again.
    restored = restore_secrets(RunConfig.model_validate(json.loads(dumped)), ask=None)
    assert restored.mcp.servers[0].headers["Authorization"] == f"Bearer {SECRET}"
    assert restored.model.api_key.get_secret_value() == SECRET
    (tmp_path / "a" / "agent.json").unlink()
    with pytest.raises(UsageError, match="which is gone"):
        restore_secrets(RunConfig.model_validate(json.loads(dumped)), ask=None)


@pytest.mark.parametrize("command, args, expected", [
    ("uvx", ["mcp-server-time", "--local-timezone", "UTC"],
     (("mcp-server-time",), "mcp-server-time", ("--local-timezone", "UTC"))),
    ("uvx", ["mcp-server-fetch@2025.4.7"], (("mcp-server-fetch==2025.4.7",), "mcp-server-fetch", ())),
    ("uvx", ["-q", "--from", "git-mcp[cli]@1.0", "git-server", "--repo", "."],
     (("git-mcp[cli]==1.0",), "git-server", ("--repo", "."))),
    ("uvx", ["--with", "numpy", "pkg@latest"], (("pkg", "numpy"), "pkg", ())),
    ("uv", ["tool", "run", "pkg"], (("pkg",), "pkg", ())),
    ("pipx", ["run", "--spec", "pkg==2", "pkg-cmd", "a"], (("pkg==2",), "pkg-cmd", ("a",))),
])
def test_the_uvx_rule(command, args, expected):
    package = package_of(command, args)
    assert (package.requirements, package.entry, package.args) == expected
    assert package.argv[0].startswith("/opt/cairn-tools/")


@pytest.mark.parametrize("args, expected", [
    (["-y", "@modelcontextprotocol/server-filesystem", "/workspace"],
     (("@modelcontextprotocol/server-filesystem",), "", ("/workspace",), "server-filesystem")),
    (["@playwright/mcp@latest"], (("@playwright/mcp",), "", (), "playwright-mcp")),
    (["--yes", "@upstash/context7-mcp@1.0.3", "--port", "1"],
     (("@upstash/context7-mcp@1.0.3",), "", ("--port", "1"), "context7-mcp")),
    (["-p", "some-tools@2", "some-cli", "serve"], (("some-tools@2",), "some-cli", ("serve",), "some-tools")),
])
def test_the_npx_rule(args, expected):
    package = package_of("npx", args)
    assert (package.requirements, package.entry, package.args, package.label) == expected
    assert package.argv[0].startswith("/opt/cairn-tools/node/") and package.argv[0].endswith("/cairn-entry")


def test_other_commands_run_as_they_are():
    assert package_of("python3", ["-m", "server"]) is None
    assert package_of("node", ["server.js"]) is None
    with pytest.raises(UsageError, match="--unknown-flag"):
        package_of("uvx", ["--unknown-flag", "pkg"])
    with pytest.raises(UsageError, match="npx -c"):
        package_of("npx", ["-c", "echo hi"])


# -- with Docker ---------------------------------------------------------------------------------


@pytest.mark.docker
def test_the_time_server_runs_in_the_sandbox_and_its_result_reaches_the_model(tmp_path, sandbox_image):
    cfg = config_of(EXAMPLE, tmp_path)
    out = play_config(tmp_path, cfg, [turn(call("get_current_time", timezone="UTC")),
                                      turn(call("get_current_time", timezone="Not/AZone")), done()])
    assert out.status == "done"
    (started,) = out.events("run_started")
    names = tool_names(started.tools)
    assert names == tool_names(BUILTIN_TOOLS) + ["convert_time", "get_current_time"]
    assert names == [t["function"]["name"] for t in out.requests[0]["tools"]]
    result = json.loads(tool_messages(out.requests[1])[0]["content"])
    assert result["timezone"] == "UTC" and result["datetime"][:4].isdigit()
    assert "Not/AZone" in tool_messages(out.requests[2])[1]["content"]
    assert [c["error"] for s in out.doc["steps"][:2] for c in s["tool_calls"]] == [False, True]
    assert "get_current_time" in out.requests[0]["messages"][0]["content"]  # PROMPT.md


@pytest.mark.docker
def test_allowed_tools_filters_and_a_resume_keeps_the_list(tmp_path, sandbox_image):
    cfg = config_of({"servers": [{"type": "stdio", "command": "uvx", "args": ["mcp-server-time"],
                                  "allowed_tools": ["get_current_time", "no_such_tool"]}]}, tmp_path)
    out = play_config(tmp_path, cfg, [turn(call("convert_time", source_timezone="UTC", time="10:00",
                                                target_timezone="UTC"))])
    assert tool_names(out.events("run_started")[0].tools)[-1] == "get_current_time"
    assert "convert_time" not in tool_names(out.events("run_started")[0].tools)
    assert "unknown tool 'convert_time'" in tool_messages(out.requests[1])[0]["content"]
    assert any("no_such_tool" in n.text for n in out.events("notice"))
    from orchestrator.runs.settings import load_config as stored_config

    again = play_config(tmp_path, stored_config(out.run), [turn(call("get_current_time", timezone="UTC")), done()],
                        resumed_run=out.run, message="go on")
    assert again.status == "done"
    assert again.requests[0]["tools"] == out.requests[0]["tools"]  # the same bytes: the cache holds
    assert '"timezone": "UTC"' in tool_messages(again.requests[1])[-1]["content"]
    assert not any("differ" in n.text for n in again.events("notice"))


@pytest.mark.docker
def test_a_stdio_server_that_fails_to_start_is_named_with_its_stderr(tmp_path, sandbox_image):
    cfg = config_of({"servers": [{"type": "stdio", "name": "broken", "command": "python3", "args": [
        "-c", "import sys; sys.stderr.write('boom: MY_TOKEN is not set\\n'); sys.exit(3)"]}]}, tmp_path)
    with pytest.raises(SandboxError) as err:
        play_config(tmp_path, cfg, [done()])
    message = err.value.message
    assert "'broken'" in message and "did not start in the sandbox" in message
    assert "boom: MY_TOKEN is not set" in message and "exit code 3" in message
    cfg = config_of({"servers": [{"type": "stdio", "command": "no-such-mcp-server"}]}, tmp_path)
    with pytest.raises(SandboxError, match="no-such-mcp-server") as err:
        play_config(tmp_path, cfg, [done()])
    assert "`no-such-mcp-server` is not in the image" in err.value.hint


# A server with two tools: `hello` answers, `crash` makes the process exit with code 5 mid-call.
CRASHING_SERVER = r'''import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method, params = msg["method"], msg.get("params") or {}
    if method == "initialize":
        result = {"protocolVersion": params["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "fragile", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": n, "inputSchema": {"type": "object"}} for n in ("crash", "hello")]}
    elif params.get("name") == "crash":
        sys.stderr.write("fragile: out of cheese\n")
        sys.exit(5)
    else:
        result = {"content": [{"type": "text", "text": "hello back"}]}
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
'''


@pytest.mark.docker
def test_a_server_that_exits_mid_call_is_reported_with_its_exit_code_and_started_again(tmp_path, sandbox_image):
    cfg = config_of({"servers": [{"command": "python3", "args": ["-c", CRASHING_SERVER]}]}, tmp_path)
    out = play_config(tmp_path, cfg, [turn(call("crash")), turn(call("hello")), done()])
    assert out.status == "done"
    crashed = tool_messages(out.requests[1])[0]["content"]
    assert crashed.startswith("error: the MCP server python3 failed on crash")
    assert "it exited with exit code 5" in crashed and "fragile: out of cheese" in crashed
    assert "started again at the next call" in crashed
    again = tool_messages(out.requests[2])[-1]["content"]
    assert again.startswith("hello back")
    assert "[the MCP server python3 was started again before this call: it had exited with exit code 5]" in again
    assert "sandbox" not in crashed + again


@pytest.mark.docker
def test_an_npx_server_is_installed_into_a_derived_image_and_runs_without_network(tmp_path, sandbox_image):
    cfg = config_of({"servers": [{"type": "stdio", "command": "npx",
                                  "args": ["-y", "@modelcontextprotocol/server-filesystem", "/workspace"]}]}, tmp_path)
    assert cfg.sandbox.network == "none"
    out = play_config(tmp_path, cfg, [turn(call("list_directory", path="/workspace"),
                                           call("read_text_file", path="/workspace/notes.txt")), done()],
                      workspace_files={"notes.txt": "from the host\n"})
    assert out.status == "done"
    names = tool_names(out.events("run_started")[0].tools)
    assert {"list_directory", "read_text_file", "write_file"} <= set(names)
    listing, text = tool_messages(out.requests[1])
    assert "[FILE] notes.txt" in listing["content"] and text["content"].strip() == "from the host"


@pytest.mark.docker
def test_the_hint_names_node_only_when_the_image_lacks_it(tmp_path, sandbox_image):
    cfg = config_of({"servers": [{"command": "node", "args": ["server.js"]}]}, tmp_path)
    with pytest.raises(SandboxError) as err:
        play_config(tmp_path, cfg, [done()])
    assert "has no Node.js" in err.value.hint
    # An image with Node.js (the derived one the npx rule makes): the script is what is missing, not node.
    from orchestrator.tools.mcp_packages import image_for

    npx = config_of({"servers": [{"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem"]}]},
                    tmp_path).mcp.servers
    cfg.sandbox.image = image_for(sandbox_image, npx)
    with pytest.raises(SandboxError) as err:
        play_config(tmp_path, cfg, [done()])
    assert "server.js" in err.value.message and not (err.value.hint or "").count("Node.js")


# -- an http server on the host ------------------------------------------------------------------


class HttpMcp:
    """A small streamable-HTTP MCP server (the SDK's MCPServer, FastMCP in 1.x) on 127.0.0.1."""

    def __init__(self, tools: list[str], port: int | None = None, transport: str = "http") -> None:
        import uvicorn

        try:
            from mcp.server.mcpserver import MCPServer as Server
        except ImportError:  # mcp 1.x
            from mcp.server.fastmcp import FastMCP as Server
        server = Server("test")
        if "echo" in tools:
            @server.tool()
            def echo(text: str) -> str:
                """Echo the text back."""
                return f"echo: {text}"
        if "get_current_time" in tools:
            @server.tool()
            def get_current_time(timezone: str) -> str:
                """A fake clock with the same name as mcp-server-time's tool."""
                return "always noon"
        if "shell_exec" in tools:
            @server.tool()
            def shell_exec(command: str) -> str:
                """A tool whose name is a built-in's."""
                return "not a real shell"
        app = server.sse_app() if transport == "sse" else server.streamable_http_app()
        self.headers: list[dict[str, str]] = []

        async def recording(scope, receive, send):  # noqa: ANN001 - ASGI
            if scope["type"] == "http":
                self.headers.append({k.decode(): v.decode() for k, v in scope["headers"]})
            await app(scope, receive, send)

        self.port = port or _free_port()
        self.server = uvicorn.Server(uvicorn.Config(recording, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        for _ in range(100):
            if self.server.started:
                break
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{self.port}/{'sse' if transport == 'sse' else 'mcp'}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.docker
def test_an_http_server_on_the_host_with_a_secret_header_and_a_resume_that_lost_a_tool(tmp_path, sandbox_image,
                                                                                       monkeypatch):
    monkeypatch.setenv("SERVICE_KEY", SECRET)
    server = HttpMcp(["echo", "get_current_time", "shell_exec"])
    try:
        cfg = config_of({
            "inputs": [{"type": "promptString", "id": "service-key", "description": "key", "password": True}],
            "servers": [{"type": "http", "name": "clock", "url": server.url,
                         "headers": {"Authorization": "Bearer ${input:service-key}"}},
                        {"type": "stdio", "command": "uvx", "args": ["mcp-server-time"],
                         "allowed_tools": ["get_current_time"]}]}, tmp_path)
        out = play_config(tmp_path, cfg, [turn(call("echo", text="hi"), call("clock__get_current_time", timezone="UTC"),
                                               call("mcp-server-time__get_current_time", timezone="UTC")),
                                          {"content": "pausing"}])
    finally:
        server.stop()
    names = tool_names(out.events("run_started")[0].tools)
    # Server order, then the tool's own name; a shared name gets its server's prefix, as does a built-in's.
    assert names[len(BUILTIN_TOOLS):] == ["echo", "clock__get_current_time", "clock__shell_exec",
                                          "mcp-server-time__get_current_time"]
    echo, fake, real = tool_messages(out.requests[1])
    assert echo["content"] == "echo: hi" and fake["content"] == "always noon" and '"timezone": "UTC"' in real["content"]
    assert any(h.get("authorization") == f"Bearer {SECRET}" for h in server.headers)
    for path in out.run.state.iterdir():  # run.json and the event log: no secret
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path

    # The server comes back without `echo`: the run keeps its stored list and answers `echo` with an error.
    from orchestrator.runs.settings import load_config as stored_config

    server = HttpMcp(["get_current_time", "shell_exec"], port=server.port)
    try:
        again = play_config(tmp_path, stored_config(out.run), [turn(call("echo", text="again")), done()],
                            resumed_run=out.run, message="go on")
    finally:
        server.stop()
    assert again.requests[0]["tools"] == out.requests[0]["tools"]
    assert "no longer offered" in tool_messages(again.requests[1])[-1]["content"]
    assert any("echo is gone" in n.text for n in again.events("notice"))


@pytest.mark.docker
def test_an_sse_server_on_the_host_is_reached_from_the_host(tmp_path, sandbox_image):
    server = HttpMcp(["echo"], transport="sse")
    try:
        cfg = config_of({"servers": [{"type": "sse", "url": server.url}]}, tmp_path)
        out = play_config(tmp_path, cfg, [turn(call("echo", text="over sse")), done()])
    finally:
        server.stop()
    assert out.status == "done"
    assert tool_messages(out.requests[1])[0]["content"] == "echo: over sse"


@pytest.mark.docker
def test_the_waits_of_a_run_start_are_told_on_stderr_with_their_times(tmp_path, sandbox_image, capsys):
    cfg = config_of({"servers": [{"command": "python3", "args": ["-c", CRASHING_SERVER]}]}, tmp_path)
    capsys.readouterr()
    out = play_config(tmp_path, cfg, [done()])
    assert out.status == "done"
    lines = capsys.readouterr().err.splitlines()
    assert "starting the sandbox (" in lines[0] and lines[1].startswith("sandbox started in ")
    assert lines[2] == "starting 1 MCP server: python3"
    assert lines[3].startswith("MCP servers ready in ") and lines[3].endswith(" s: 2 tools")
