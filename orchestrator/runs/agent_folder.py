"""Agent folders: `cairn run --config PATH`, with the agent.json of Hugging Face's tiny-agents.

PATH is an `agent.json`, or a folder holding one; a `PROMPT.md` (else `AGENTS.md`) beside it extends the
system prompt. The schema is tiny-agents' (huggingface_hub/inference/_mcp/types.py and cli.py):

    {"model": "Qwen/Qwen2.5-72B-Instruct", "provider": "nebius",    # or "endpointUrl": "http://…/v1"
     "apiKey": "${input:hf-token}",                                   # optional
     "inputs": [{"type": "promptString", "id": "hf-token", "description": "…", "password": true}],
     "servers": [{"type": "stdio", "command": "uvx", "args": ["mcp-server-time"], "env": {}, "cwd": "…"},
                 {"type": "http", "url": "https://…/mcp", "headers": {"Authorization": "Bearer ${input:hf-token}"}},
                 {"type": "sse", "url": "https://…/sse", "allowed_tools": ["search"]}]}

Also accepted, as Hugging Face's published examples use them:
- a server without `type` (local-coder's `{"command": "npx", "args": [...]}`): it is stdio (a server with
  a `url` and no `command` is http, the streamable HTTP of today's MCP);
- `"tools": {"include": [...], "exclude": [...]}` of a server (tiny-agents' tool filter before it became
  `allowed_tools`): only the included tools are offered, and never the excluded ones;
- the older nested form `{"type": "stdio", "config": {"command": …}}` that earlier tiny-agents read;
- an optional `name` of a server (cairn's addition).

Inputs, as tiny-agents does them: each `${input:ID}` used in a server's `env` or `headers`, or in
`apiKey`, is asked for on the terminal (a password without echo); a blank answer, or no terminal, falls
back to the environment variable named by the id upper-cased (`-` becomes `_`): `hf-token` → `HF_TOKEN`.

The model: `--model` on the command line wins. Otherwise the agent.json's model becomes a litellm model:
with `endpointUrl`, `openai/<model>` at that endpoint (an OpenAI-compatible server; `/v1` is added when
the URL has none); with a `provider` other than `auto`, `huggingface/<provider>/<model>`; without one,
`huggingface/<model>` (Hugging Face's router picks the provider). With neither, cairn's default
(`scripted:demo`, or the template's) is used, and cairn says so.

Secrets: `apiKey` and the values of `env` and `headers` never enter the context, the event log or
run.json (there they read "<redacted>"; see McpServerConfig). `cairn resume` reads the agent.json again
(its absolute path is stored) and resolves its inputs again; if the file is gone, a run whose servers
need those values cannot resume and says so.
"""

from __future__ import annotations

import getpass
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator

from orchestrator.config import McpServerConfig, ModelConfig, RunConfig, default_model
from orchestrator.errors import UsageError
from orchestrator.runs.settings import read_json

FILENAME = "agent.json"
PROMPT_FILENAMES = ("PROMPT.md", "AGENTS.md")
_INPUT = re.compile(r"\$\{input:([^}]+)\}")
_NAME_CHARS = re.compile(r"[^a-zA-Z0-9_-]+")

# Asks for one input: (label, password) -> the answer, or None when there is no one to ask.
Ask = Callable[[str, bool], Optional[str]]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class InputSpec(_Strict):
    type: str = "promptString"  # tiny-agents knows only prompt strings, and does not check the type
    id: str = Field(min_length=1)
    description: str = ""
    password: bool = False


class ToolFilter(_Strict):
    include: Optional[list[str]] = None
    exclude: Optional[list[str]] = None


class _Server(_Strict):
    name: Optional[str] = None  # cairn's addition; tiny-agents servers have none
    allowed_tools: Optional[list[str]] = None
    tools: Optional[ToolFilter] = None

    def allowed(self) -> Optional[list[str]]:
        """The tools to offer, or None for all: allowed_tools and tools.include both narrow the list."""
        lists = [names for names in (self.allowed_tools, self.tools and self.tools.include) if names is not None]
        if not lists:
            return None
        return [name for name in lists[0] if all(name in other for other in lists[1:])]

    def excluded(self) -> Optional[list[str]]:
        return list(self.tools.exclude) if self.tools and self.tools.exclude is not None else None


class StdioServer(_Server):
    type: Literal["stdio"]
    command: str = Field(min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: Optional[str] = None


class HttpServer(_Server):
    type: Literal["http", "sse"]
    url: str = Field(pattern=r"^https?://")
    headers: dict[str, str] = Field(default_factory=dict)
    # Read by tiny-agents' MCPClient; cairn accepts and ignores them (it has its own timeouts).
    timeout: Optional[float] = None
    sse_read_timeout: Optional[float] = None
    terminate_on_close: Optional[bool] = None


class AgentFile(_Strict):
    model: Optional[str] = None
    provider: Optional[str] = None
    endpointUrl: Optional[str] = None
    apiKey: Optional[str] = None
    inputs: list[InputSpec] = Field(default_factory=list)
    servers: list[Annotated[Union[StdioServer, HttpServer], Field(discriminator="type")]] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _flatten_servers(cls, data: Any) -> Any:
        """The older nested form {"type": …, "config": {…}} becomes the flat one; a server without a type
        is stdio (http when it has only a url); an unknown type gets a clearer message than pydantic's."""
        if not (isinstance(data, dict) and isinstance(data.get("servers"), list)):
            return data
        servers = []
        for i, server in enumerate(data["servers"]):
            if not isinstance(server, dict):
                raise ValueError(f"servers.{i}: must be an object")
            if isinstance(server.get("config"), dict):
                outer = dict(server)
                server = {**outer.pop("config"), **outer}
            if "type" not in server:
                server = {**server, "type": "http" if "url" in server and "command" not in server else "stdio"}
            if server.get("type") not in ("stdio", "http", "sse"):
                raise ValueError(f"servers.{i}.type: must be \"stdio\", \"http\" or \"sse\", not {server.get('type')!r}")
            servers.append(server)
        return {**data, "servers": servers}


@dataclass
class AgentFolder:
    file: Path  # the agent.json, absolute
    spec: AgentFile
    prompt: str | None = None  # PROMPT.md or AGENTS.md beside it


@dataclass
class Resolved:
    """The agent.json with its inputs filled in. Holds secrets: never write it out as it is."""

    servers: list[McpServerConfig] = field(default_factory=list)
    api_key: str | None = None
    unset: list[str] = field(default_factory=list)  # inputs that got no value at all


def load_agent(path: str | Path) -> AgentFolder:
    """Read an agent.json (or the one in a folder) and the prompt beside it. UsageError on any problem."""
    given = Path(path).expanduser()
    if given.is_dir():
        file = given / FILENAME
        if not file.is_file():
            raise UsageError(f"{given}: no {FILENAME} in this folder")
    elif given.is_file():
        file = given
    else:
        raise UsageError(f"{given}: no such file or folder (--config takes an agent.json or a folder with one)")
    file = file.resolve()
    data = read_json(file, str(file))
    if not isinstance(data, dict):
        raise UsageError(f"{file}: the top level must be a JSON object")
    try:
        spec = AgentFile.model_validate(data)
    except ValidationError as exc:
        raise UsageError(f"{file}: {_one_line(exc)}") from None
    _check_inputs(file, spec)
    folder = AgentFolder(file=file, spec=spec)
    for name in PROMPT_FILENAMES:
        candidate = file.parent / name
        if candidate.is_file():
            folder.prompt = candidate.read_text(encoding="utf-8")
            break
    return folder


def _check_inputs(file: Path, spec: AgentFile) -> None:
    ids = [i.id for i in spec.inputs]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise UsageError(f"{file}: inputs: the id {duplicates[0]!r} is defined twice")
    for where, text in _placeholder_sites(spec):
        for ref in _INPUT.findall(text):
            if ref not in ids:
                raise UsageError(f"{file}: {where} uses ${{input:{ref}}}, but no input has the id {ref!r}")


def _placeholder_sites(spec: AgentFile) -> list[tuple[str, str]]:
    """(where, text) of every string in which tiny-agents substitutes inputs."""
    sites = [("apiKey", spec.apiKey)] if spec.apiKey else []
    for i, server in enumerate(spec.servers):
        values = server.env if isinstance(server, StdioServer) else server.headers
        kind = "env" if isinstance(server, StdioServer) else "headers"
        sites += [(f"servers[{i}].{kind}.{key}", value) for key, value in values.items()]
    return sites


def resolve(folder: AgentFolder, ask: Ask | None = None, say: Callable[[str], None] | None = None) -> Resolved:
    """Fill in the inputs (asking for those in use, else their environment variable) and name the servers."""
    say = say or (lambda line: print(line, file=sys.stderr))
    spec = folder.spec
    used = {ref for _, text in _placeholder_sites(spec) for ref in _INPUT.findall(text)}
    values: dict[str, str] = {}
    unset = []
    for item in spec.inputs:
        if item.id not in used:
            continue  # tiny-agents skips an input nothing uses, and so does cairn
        variable = item.id.replace("-", "_").upper()
        answer = ask(f"{item.id}: {item.description} (blank: from ${variable})", item.password) if ask else None
        value = (answer or "").strip() or os.environ.get(variable, "")
        if not value:
            unset.append(item.id)
            say(f"cairn: input {item.id!r} has no value (no answer and ${variable} is not set); it is left empty")
        values[item.id] = value

    def fill(text: str) -> str:
        return _INPUT.sub(lambda m: values.get(m.group(1), ""), text)

    servers = []
    names: set[str] = set()
    for server in spec.servers:
        name = _unique(_server_name(server), names)
        if isinstance(server, StdioServer):
            servers.append(McpServerConfig(
                name=name, type="stdio", command=server.command, args=list(server.args),
                env={k: fill(v) for k, v in server.env.items()}, cwd=server.cwd, allowed_tools=server.allowed(),
                excluded_tools=server.excluded()))
        else:
            servers.append(McpServerConfig(
                name=name, type=server.type, url=server.url, headers={k: fill(v) for k, v in server.headers.items()},
                allowed_tools=server.allowed(), excluded_tools=server.excluded()))
    api_key = fill(spec.apiKey) if spec.apiKey else None
    return Resolved(servers=servers, api_key=api_key or None, unset=unset)


def litellm_model(spec: AgentFile) -> tuple[str | None, str | None]:
    """(litellm model, api_base) for the agent.json's model; (None, None) when it names none."""
    if not spec.model:
        return None, None
    if spec.endpointUrl:
        base = spec.endpointUrl.rstrip("/")
        if not re.search(r"/v\d+(/|$)", base):
            base += "/v1"  # as huggingface_hub's InferenceClient does with a bare base_url
        model = spec.model if spec.model.startswith("openai/") else f"openai/{spec.model}"
        return model, base
    if spec.provider and spec.provider != "auto":
        return f"huggingface/{spec.provider}/{spec.model}", None
    return f"huggingface/{spec.model}", None


def apply_agent(cfg: RunConfig, folder: AgentFolder, resolved: Resolved, *, cli_model: str | None,
                cli_api_base: str | None, say: Callable[[str], None] | None = None) -> RunConfig:
    """The run's config with the agent folder in it: model, endpoint, key, prompt and MCP servers."""
    say = say or (lambda line: print(line, file=sys.stderr))
    cfg = cfg.model_copy(deep=True)
    model, api_base = litellm_model(folder.spec)
    if cli_model:
        cfg.model.model = cli_model
        if model and cli_model != model:
            say(f"cairn: model {cli_model} (from --model; {folder.file.name} names {folder.spec.model})")
    elif model:
        cfg.model.model = model
        say(f"cairn: model {model} (from {folder.file})")
    else:  # the template's model, else $CAIRN_MODEL
        if cfg.model.model == ModelConfig().model:
            cfg.model.model = default_model()
        say(f"cairn: {folder.file} names no model and --model was not given: using {cfg.model.model}")
    if cli_api_base:
        cfg.model.api_base = cli_api_base
    elif api_base and not cli_model:
        cfg.model.api_base = api_base
    if resolved.api_key and not cfg.model.model.startswith("scripted:"):
        cfg.model.api_key = SecretStr(resolved.api_key)
    if folder.prompt and folder.prompt.strip():
        cfg.system_prompt_extra = "\n\n".join(p for p in (cfg.system_prompt_extra.strip(), folder.prompt.strip()) if p)
    cfg.mcp.agent_file = str(folder.file)
    cfg.mcp.servers = resolved.servers
    cfg.mcp.api_key_in_file = bool(folder.spec.apiKey)
    return cfg


def load_config(path: str | Path, cfg: RunConfig, *, cli_model: str | None, cli_api_base: str | None,
                ask: Ask | None | Literal["terminal"] = "terminal") -> RunConfig:
    """`cairn run --config PATH`: read, resolve and apply the agent folder."""
    folder = load_agent(path)
    resolved = resolve(folder, ask=terminal_ask if ask == "terminal" else ask)
    return apply_agent(cfg, folder, resolved, cli_model=cli_model, cli_api_base=cli_api_base)


def restore_secrets(cfg: RunConfig, ask: Ask | None | Literal["terminal"] = "terminal") -> RunConfig:
    """For a resume: the servers' env and headers and the API key, which run.json does not hold, read again
    from the run's agent.json. Servers and model stay as stored; a changed agent.json only lends values."""
    needs = cfg.mcp.api_key_in_file or any(s.redacted for s in cfg.mcp.servers)
    if not needs:
        return cfg
    path = cfg.mcp.agent_file
    if not path or not Path(path).is_file():
        raise UsageError(f"this run's MCP servers or API key come from {path or 'an agent.json'}, which is gone; "
                         "their secret values are never stored, so it cannot be resumed without that file")
    folder = load_agent(path)
    resolved = resolve(folder, ask=terminal_ask if ask == "terminal" else ask)
    fresh = {s.name: s for s in resolved.servers}
    cfg = cfg.model_copy(deep=True)
    for i, server in enumerate(cfg.mcp.servers):
        if server.redacted:
            match = fresh.get(server.name)
            if match is None or match.type != server.type or set(match.env) != set(server.env) \
                    or set(match.headers) != set(server.headers):
                raise UsageError(f"{folder.file}: the server {server.name!r} of this run is not in it any more "
                                 "(or changed its env or headers); cairn cannot fill in its stored values")
            cfg.mcp.servers[i] = server.model_copy(update={"env": dict(match.env), "headers": dict(match.headers)})
    if cfg.mcp.api_key_in_file and resolved.api_key and not cfg.model.model.startswith("scripted:"):
        cfg.model.api_key = SecretStr(resolved.api_key)
    return cfg


def terminal_ask(label: str, password: bool) -> str | None:
    """Ask on the terminal; None when there is none (then the environment variable is used)."""
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        return None
    try:
        if password:
            return getpass.getpass(f"  {label}: ", stream=sys.stderr)
        sys.stderr.write(f"  {label}: ")
        sys.stderr.flush()
        return sys.stdin.readline()
    except (EOFError, KeyboardInterrupt):
        return None


def _server_name(server: StdioServer | HttpServer) -> str:
    """A short name: the `name` given, else the package a stdio server runs, else the URL's host."""
    if server.name:
        raw = server.name
    elif isinstance(server, StdioServer):
        from orchestrator.tools.mcp_packages import package_of  # the same rule that installs it

        found = package_of(server.command, server.args)
        raw = found.label if found else _command_name(server.command, server.args)
    else:
        from urllib.parse import urlparse

        url = urlparse(server.url)
        host = url.hostname or "server"
        labels = host.split(".")
        if host == "localhost" or host.replace(".", "").isdigit() or ":" in host:  # an address: add the port
            raw = f"{host}_{url.port}" if url.port else host
        else:  # the registered name: mcp.deepwiki.com -> deepwiki, huggingface.co -> huggingface
            raw = labels[-2] if len(labels) >= 2 else labels[0]
    return _NAME_CHARS.sub("_", raw).strip("_")[:40] or "server"


def _command_name(command: str, args: list[str]) -> str:
    """What a user would call the server: the npm package, the python module or script, else the command.
    Options are never a name: `python3 -c CODE` is `python3`."""
    base = Path(command).name
    if base.startswith("python") and len(args) >= 2 and args[0] == "-m":
        return args[1].split(".")[0]
    if base.startswith(("node", "python", "deno", "bun")) and args and not args[0].startswith("-"):
        return Path(args[0]).stem
    return base


def _unique(name: str, taken: set[str]) -> str:
    candidate, n = name, 2
    while candidate in taken:
        candidate, n = f"{name}-{n}", n + 1
    taken.add(candidate)
    return candidate


def _one_line(exc: ValidationError) -> str:
    """The first problems (two at most: a misspelt key also makes a required one missing), on one line."""
    parts = []
    for error in exc.errors()[:2]:
        where = ".".join(str(p) for p in error["loc"] if p not in ("stdio", "http", "sse"))
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown key (a typo?)"
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)
