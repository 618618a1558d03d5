"""Settings of a run, as pydantic models.

A run's whole configuration is one `RunConfig`; it is stored in `state/run.json` so that `cairn resume`
uses the same model, endpoint, limits and sandbox as the run had, unless told otherwise.
"""

from __future__ import annotations

import os
import typing
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_serializer, field_validator


class Settings(BaseModel):
    """Base for every settings block: unknown keys are an error, so a typo never passes silently."""

    model_config = ConfigDict(extra="forbid")


class SandboxConfig(Settings):
    """The Docker sandbox: by default the agent is root in a container walled off from the host
    (orchestrator/sandbox/docker/profile.py says where the wall is); `lockdown` is the cage for untrusted work."""

    image: str | None = Field(None, description="Image to run; None means the image built from sandbox_image/.")
    workdir: str = Field("/workspace", description="The agent's work directory in the container, where the run's "
                         "workspace is mounted; another than /workspace starts from the image's content there.")
    network: Literal["none", "bridge"] = "none"
    memory: str = Field("2g", description="Memory limit; swap is set equal to it, so there is no swap.")
    cpus: float = Field(2.0, gt=0)
    pids_limit: int = Field(256, ge=16)
    tmp_size: str = Field("512m", description="Size of the tmpfs at /tmp (under lockdown, and for a non-root "
                                              "agent's home).")
    home_size: str = Field("512m", description="Size of the tmpfs home of a non-root agent.")
    user: str | None = Field(
        None, pattern=r"^[0-9]+:[0-9]+$",
        description="UID:GID the agent runs as. None: root (0:0); under lockdown the host user's (1000:1000 "
                    "when cairn runs as root), or with --workspace DIR the owner of DIR. 0 only without lockdown.")
    lockdown: bool = Field(False, description="The cage for untrusted work: a non-root agent, a read-only root "
                                              "filesystem, a noexec /tmp and home, no capabilities at all.")
    runtime: str | None = Field(None, description="An OCI runtime registered with the engine (e.g. runsc, "
                                                  "gVisor); None is the engine's default (runc).")
    env: dict[str, str] = Field(default_factory=dict, description="Variables set in the container.")
    pass_env: list[str] = Field(
        default_factory=list, description="Names of host variables passed into the container. None by default."
    )
    command_timeout: float = Field(120.0, gt=0, description="Default timeout of one shell command, in seconds.")
    max_command_timeout: float = Field(3600.0, gt=0)
    inline_output_bytes: int = Field(
        256 * 1024, ge=1024, description="Output above this stays in a file under /cairn/obs/, not in memory."
    )
    max_output_file_bytes: int = Field(
        200 * 1024 * 1024, ge=1024, description="Output past this is counted but not kept (the source cap)."
    )
    start_timeout: float = Field(30.0, gt=0)
    max_disk: str | None = Field(
        "20g", description="The run stops (status budget) when its workspace and container's writable layer "
                           "use more disk than this (500m, 20g, ...); None: no limit.")

    def shell_timeout(self, requested: object = None) -> float:
        """The seconds a shell command may run: the asked number when it is a positive one, else
        `command_timeout`; never past `max_command_timeout`."""
        asked = requested if isinstance(requested, (int, float)) and not isinstance(requested, bool) else 0
        return min(float(asked) if asked > 0 else self.command_timeout, self.max_command_timeout)

    @field_validator("max_disk")
    @classmethod
    def _a_size(cls, value: str | None) -> str | None:
        from orchestrator.sizes import parse_size

        if value is not None and value.strip().lower() != "none":
            parse_size(value)  # raises ValueError, which pydantic reports with the setting's name
            return value
        return None

    @field_validator("workdir")
    @classmethod
    def _workdir_of_its_own(cls, path: str) -> str:
        return check_workdir(path)


# Directories a project must not be mounted over: the system's, and cairn's own mount points.
SYSTEM_DIRS = {"/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run", "/sbin",
               "/sys", "/tmp", "/usr", "/var", "/usr/bin", "/usr/lib", "/usr/local", "/usr/sbin", "/usr/share",
               "/var/lib", "/opt/cairn", "/opt/cairn-python", "/cairn"}
UNDER_NONE_OF = ("/proc/", "/sys/", "/dev/", "/cairn/", "/opt/cairn/", "/opt/cairn-python/")


def check_workdir(path: str) -> str:
    """A work directory the workspace can be mounted at, normalized; ValueError (one line) otherwise."""
    if not path.startswith("/"):
        raise ValueError(f"the work directory must be an absolute path, not {path!r}")
    normal = os.path.normpath(path)
    if normal.startswith("//"):
        normal = "/" + normal.lstrip("/")
    if normal == "/":
        raise ValueError("the work directory cannot be / (the whole container); name a project directory such as /app")
    if normal in SYSTEM_DIRS or normal.startswith(UNDER_NONE_OF):
        raise ValueError(f"the work directory cannot be {normal}, a system directory; name a project directory "
                         "such as /app")
    return normal


class ModelConfig(Settings):
    model: str = Field("scripted:demo", description="A litellm model string, or scripted:PATH.")
    api_base: str | None = None
    # From an agent.json `apiKey` only: never stored (run.json, events); a resume reads the file again.
    api_key: SecretStr | None = Field(None, exclude=True)
    temperature: float | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    context_window: int | None = Field(None, ge=1024, description="Override of litellm's input window.")
    max_retries: int = Field(6, ge=0, description="Retries of a busy or failing provider (429, 5xx). An endpoint "
                             "that cannot be reached gets at most 2, quickly; one that went silent at most 1.")
    request_timeout: float = Field(600.0, gt=0, description="Seconds to wait for an answer that is not streamed; "
                                   "the stream idle timeout never exceeds it.")
    connect_timeout: float = Field(5.0, gt=0, description="Seconds to open a connection to the endpoint.")
    stream_idle_timeout: float = Field(
        60.0, gt=0, description="Seconds without a byte of a streamed answer (its start included) before the "
                                "request counts as failed (a long answer that keeps coming never does); raise it "
                                "for a model that thinks long before answering.")
    retry_base_seconds: float = Field(1.0, ge=0, description="First back-off wait; it doubles on each retry.")


class LimitsConfig(Settings):
    max_steps: int | None = Field(100, ge=1)
    max_cost: float | None = Field(None, ge=0, description="USD.")
    max_tokens: int | None = Field(None, ge=1, description="Prompt plus completion tokens over the run.")
    max_wall_seconds: float | None = Field(
        None, gt=0, description="Wall-clock time the run may take, in seconds or as a duration (90m, 1h30m; "
        "--max-time): the time its drives took, summed over resumes; the time it sat stopped does not count.")
    child_max_steps: int = Field(30, ge=1, description="Step budget of a sub-agent (agent_delegate); its "
                                 "max_steps argument can only lower it.")
    delegate_depth: int = Field(1, ge=0, description="How deep sub-agents nest: 1 lets the agent delegate but not "
                                "its sub-agents; 0 turns agent_delegate off (the tool stays listed).")

    @field_validator("max_wall_seconds", mode="before")
    @classmethod
    def _a_duration(cls, value: object) -> object:
        from orchestrator.sizes import parse_duration

        return parse_duration(value) if isinstance(value, str) else value  # ValueError: one line, with the name


class ContextConfig(Settings):
    offload_tokens: int = Field(2000, ge=64, description="A tool result above this goes to /cairn/obs/.")
    # 5 lines and 750 characters: chosen with the marks by bench/context_bench.py --sweep.
    preview_lines: int = Field(5, ge=1, description="Lines of head and of tail kept in an offload preview.")
    # Chosen on real runs replayed against the raw agent (docs/compaction.md): compact every ~20% of the
    # window's growth, two results kept whole and the old digests folded, so every step reads a small cached
    # prefix and each compaction rewrites little; the growth share is as low as the synthetic workload's
    # cache-hit target (0.9 at 64k) allows.
    high_water: float = Field(0.5, gt=0, lt=1, description="Compact when a request is above this share of the window.")
    low_water: float = Field(0.15, gt=0, lt=1, description="Compaction brings the request down to this share.")
    keep_recent_results: int = Field(2, ge=0, description="Tool results never turned into pointers.")
    preview_chars: int = Field(
        750, ge=200, description="Characters of head and of tail kept in a preview: one huge line cannot blow it up."
    )
    keep_recent_turns: int = Field(1, ge=1, description="Most recent turns a written summary never replaces.")
    summary_tokens: int = Field(2000, ge=100, description="Room kept for a written summary when choosing its span.")
    compact_growth: float = Field(
        0.2, ge=0, lt=1, description="Compact also above the low-water mark once the history grew by this share "
        "of the window since the last compaction (0: only at the high-water mark).")
    digest_budget: float = Field(
        0.03, ge=0, lt=1, description="Once the digests pass this share of the window, they all fold into one "
        "line naming the file that holds them (0: never).")
    vary_framing: bool = Field(
        True, description="Vary, from one tool result to the next, how results are framed (a header, the exit "
        "line, the sentence pointing at a saved output), so the model does not copy the pattern of near-identical "
        "calls; the output itself never changes, and a resume sends the same bytes. False: one plain form.")

    @field_validator("low_water")
    @classmethod
    def _low_below_high(cls, low: float, info) -> float:  # noqa: ANN001 - pydantic's ValidationInfo
        high = info.data.get("high_water", 0.5)
        if low >= high:
            raise ValueError(f"low_water ({low}) must be below high_water ({high})")
        return low


class CheckConfig(Settings):
    """`--check CMD`: a command that says whether the task is done. It runs in the sandbox after task_done,
    in the work directory, in a fresh shell; exit code 0 means the task is done (orchestrator/agent/check.py)."""

    command: str | None = Field(None, description="The shell command; None: no check.")
    rounds: int = Field(0, ge=0, description="How often a failed check's output goes back to the agent, which "
                        "then goes on, before the run ends with the check failed.")
    timeout: float = Field(600.0, gt=0, description="Seconds the check may run; past that it is killed and fails.")

    @field_validator("command")
    @classmethod
    def _not_blank(cls, command: str | None) -> str | None:
        if command is not None and not command.strip():
            raise ValueError("the check command is empty")
        return command


class CriticConfig(Settings):
    """`--critic-every N`: every N steps, one extra model call reads the task, the plan and the last N
    steps and says what is going wrong or being missed; the next request's tail shows its answer
    (orchestrator/agent/critic.py). A sub-agent has none."""

    every: int | None = Field(None, ge=1, description="Steps between two critic calls; None: no critic.")
    model: str | None = Field(None, description="The critic's litellm model string (or scripted:PATH); None: "
                              "the run's model, through the same client.")
    api_base: str | None = Field(None, description="The critic model's endpoint; None: the run's api_base.")


class ApprovalRule(Settings):
    """One rule of `approvals.rules` (orchestrator/agent/approvals.py): the first rule that matches a call answers
    it, with no person asked. `tool` is an fnmatch pattern over the tool's name; `match` one over the
    call's subject: the command of shell_exec and shell_start, the keys of shell_send, the URL of
    web_fetch, the path of the file tools, and the arguments as compact JSON (keys sorted) for every other
    tool."""

    tool: str = Field(description="The tool's name, or an fnmatch pattern of names (shell_exec, mcp_*, *).")
    match: str = Field("*", description="An fnmatch pattern over the call's subject (e.g. \"git push*\").")
    action: Literal["allow", "deny", "ask"] = Field(description="allow: run it unasked; deny: refuse it; "
                                                    "ask: ask a person even where the mode would not.")
    reason: str | None = Field(None, description="Said to the model when the rule denies a call.")


class ApprovalsConfig(Settings):
    """Which tool calls wait for a person's yes (`--approve`, orchestrator/agent/approvals.py)."""

    mode: Literal["never", "outside", "always"] = Field(
        "outside", description="never: ask nothing; outside: ask before calls whose effects can leave the "
        "sandbox (MCP tools not declared read-only, web_fetch, and shell commands matching shell_patterns "
        "when the network is on); always: ask before every call but task_done, ask_user and todo_write.")
    rules: list[ApprovalRule] = Field(default_factory=list, description="Answer calls without asking; the first "
                                      "that matches wins. In mode never only deny rules apply.")
    shell_patterns: list[str] = Field(default_factory=list, description="Python regular expressions (searched "
                                      "in the command) of shell commands that can act outside; added to the "
                                      "built-in ones (git push, curl with data, ssh, ...).")
    default_shell_patterns: bool = Field(True, description="False: only shell_patterns count, not the built-in ones.")

    @field_validator("shell_patterns")
    @classmethod
    def _regexes(cls, patterns: list[str]) -> list[str]:
        import re

        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{pattern!r} is not a regular expression: {exc}") from None
        return patterns


REDACTED = "<redacted>"


class McpServerConfig(Settings):
    """One MCP server of an agent.json (orchestrator/runs/agent_folder.py). stdio servers run in the sandbox;
    http and sse servers are reached from the host. `env` and `headers` values may be secrets: they are
    written out as "<redacted>" (run.json), so a resume takes them from the agent.json again."""

    name: str = Field(description="Prefix of its tools when two servers offer the same tool name.")
    type: Literal["stdio", "http", "sse"]
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    allowed_tools: list[str] | None = None  # tiny-agents' allowed_tools, or tools.include
    excluded_tools: list[str] | None = None  # tools.exclude

    @field_serializer("env", "headers")
    def _redact(self, values: dict[str, str]) -> dict[str, str]:
        return {key: REDACTED for key in values}

    @property
    def redacted(self) -> bool:
        """True when the values were read back from a redacted dump, not from the agent.json."""
        return any(v == REDACTED for v in [*self.env.values(), *self.headers.values()])


class McpConfig(Settings):
    agent_file: str | None = Field(None, description="The agent.json given with --config (absolute path).")
    servers: list[McpServerConfig] = Field(default_factory=list)
    api_key_in_file: bool = Field(False, description="The agent.json sets apiKey: a resume must read it again.")
    start_timeout: float = Field(120.0, gt=0, description="Seconds for a server to start and list its tools.")
    call_timeout: float = Field(300.0, gt=0, description="Seconds for one MCP tool call.")


class RunConfig(Settings):
    model: ModelConfig = Field(default_factory=ModelConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    context: ContextConfig = Field(default_factory=ContextConfig)
    template: str = "default"
    system_prompt_extra: str = ""
    mcp: McpConfig = Field(default_factory=McpConfig)
    check: CheckConfig = Field(default_factory=CheckConfig)
    critic: CriticConfig = Field(default_factory=CriticConfig)
    approvals: ApprovalsConfig = Field(default_factory=ApprovalsConfig)


def stored_config(data: dict) -> RunConfig:
    """A run's config as stored in its run.json, by this or another version of cairn.

    Settings are strict about unknown keys, so that a typo in a person's config is an error; a stored
    config is not a person's input, and a setting an older or newer cairn had is dropped, not an error.
    """
    return RunConfig.model_validate(_known(RunConfig, data))


def _known(model: type[BaseModel], data: dict) -> dict:
    out = {}
    for key, value in data.items():
        field = model.model_fields.get(key)
        if field is None:
            continue
        inner = _settings_type(field.annotation)
        if inner is not None and isinstance(value, dict):
            value = _known(inner, value)
        elif inner is not None and isinstance(value, list):
            value = [_known(inner, item) if isinstance(item, dict) else item for item in value]
        out[key] = value
    return out


def _settings_type(annotation: object) -> type[BaseModel] | None:
    """The settings model a field holds, directly or as the items of a list."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def default_runs_dir() -> Path:
    """`$CAIRN_RUNS_DIR`, else `~/.cairn/runs` (docs/contracts.md)."""
    return Path(os.environ.get("CAIRN_RUNS_DIR") or Path.home() / ".cairn" / "runs")


def default_model() -> str:
    """`$CAIRN_MODEL`, for runs that name no model: the model is never a silent default."""
    from orchestrator.errors import UsageError

    model = os.environ.get("CAIRN_MODEL")
    if not model:
        raise UsageError("no model given: pass --model M (a litellm model string such as "
                         "anthropic/claude-sonnet-4-5, or scripted:PATH) or set CAIRN_MODEL",
                         hint="cairn demo runs offline on a built-in scripted model")
    return model
