"""The ports: what the loop and the tools need of the world, as Protocols in one place.

The loop (agent/loop.py) and the tools (tools/) depend on these and on nothing of Docker, litellm or the run
directory's layout; the composition root (session/compose.py) plugs in the real parts: `llm.client.LLM` for
`Model`, `sandbox.Sandbox` (Docker) for `Sandbox`, `store.runs.RunDir` for `Store`, `display.Live` or
`Quiet` for `Display`, and `tools.registry.Tool` objects for `Tool`. A second sandbox backend is one new
class with the methods of `Sandbox`; a test's fake is one too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol

if TYPE_CHECKING:
    from orchestrator.config import SandboxConfig
    from orchestrator.llm.types import Reply, ToolCall
    from orchestrator.store import events as ev
    from orchestrator.agent.state import RunState
    from orchestrator.tools.dispatch import Observation


class ToolError(Exception):
    """An op failed in a way the model should see and can act on: a path outside the workspace, no such
    file, an edit that is not unique. The message is one line. (Raised by every Sandbox; `sandbox`
    re-exports it.)"""


class Model(Protocol):
    """A chat model with tools: one request, one reply (text, tool calls, usage)."""

    def complete(self, messages: list[dict], tools: list[dict], tool_choice: Any = "auto",
                 history_end: int | None = None, on_text: Callable[[str], None] | None = None) -> Reply: ...

    def context_window(self) -> int: ...


class ToolSandbox(Protocol):
    """What a tool's handler uses: one toolbox op (PROTOCOL.md) at a time. A journal's replay of a
    finished call (store/journal.py) is one too."""

    network_enabled: bool

    def call(self, op: str, **args: Any) -> dict[str, Any]:
        """The op's result; raises sandbox.ToolError (one line) when the op fails."""


class ExecStream(Protocol):
    """A process started in the sandbox with its stdin attached (an MCP stdio server): bytes to its
    stdin, bytes from its stdout; its stderr is kept, a tail of it, to explain its end."""

    def recv(self) -> bytes:
        """The next bytes of its stdout; b"" once it ended. Blocks."""

    def send(self, data: bytes) -> None: ...

    def close_stdin(self) -> None: ...

    def close(self) -> None: ...

    def note(self, line: bytes) -> None:
        """Keep a line with the stderr (something the process wrote that explains its end)."""

    def stderr_tail(self, lines: int = 5) -> str: ...

    def exit_code(self) -> int | None:
        """Its exit code once it has one (None while it runs, or when the backend lost it)."""


class Sandbox(ToolSandbox, Protocol):
    """The agent's computer: started, called, kept between sessions, and its files given back."""

    cfg: Any  # config.SandboxConfig
    image: str
    reused: bool  # what was installed outside the workspace survived the last start
    replaced: str | None  # why a kept machine was not used, if it was not
    call_key: str | None  # the journal key of the next op: the tool call it carries out

    def start(self) -> None: ...

    def stop(self) -> None:
        """Stop and keep (a run's sandbox) or remove; calling it twice is fine."""

    def give_back_files(self) -> list[str]:
        """The agent's files in the mounted directories go back to their owners (before a checkpoint)."""

    def disk_usage(self) -> int | None:
        """Bytes written outside the mounted workspace, when the backend can say."""

    @property
    def instance(self) -> str | None:
        """Names the running machine: it changes when the sandbox is started again (a crash, a heal)."""

    def open_exec(self, argv: list[str], env: dict[str, str] | None = None, workdir: str | None = None) -> ExecStream:
        """Start `argv` in the sandbox with stdin attached (MCP stdio servers)."""

    def has_command(self, name: str) -> bool | None:
        """Whether `name` is a command in the sandbox; None when it cannot be asked."""


@dataclass
class ToolContext:
    """What a tool's handler may use besides its arguments."""

    sandbox: ToolSandbox  # the run's sandbox, or a journal's replay of one answer (store/journal.py)
    cfg: SandboxConfig
    obs_path: str  # where a big output of this call is saved (`/cairn/obs/<step>-<tool>.txt`)
    step: int = 0
    call: ToolCall | None = None
    agent: Any = None  # the agent making the call (agent_delegate makes its child from it)


class Tool(Protocol):
    """One tool the model can call (tools/registry.py): its spec, its handler, the toolbox op it uses."""

    spec: dict[str, Any]
    op: str | None

    @property
    def name(self) -> str: ...

    def check(self, args: dict[str, Any]) -> None: ...

    def run(self, args: dict[str, Any], ctx: ToolContext) -> Observation: ...


class Display(Protocol):
    """The event sink: every event, after it is logged and applied, with the state it made."""

    def event(self, event: ev.Event, state: RunState) -> None: ...


class EventLog(Protocol):
    def append(self, event: ev._Event) -> None: ...

    def read(self) -> tuple[list[ev.Event], str | None]: ...


class Store(Protocol):
    """What the loop needs of a run's directory (store/runs.py's RunDir)."""

    id: str
    root: Path
    state: Path  # host only: the inbox, stop requests
    cairn_dir: Path  # cairn's own files, mounted at /cairn
    events: EventLog

    @property
    def stop_path(self) -> Path:
        """`cairn stop`'s request file."""

    def update_meta(self, **changes: Any) -> dict[str, Any]: ...

    def take_stop_request(self) -> bool: ...
