"""The ports: what the loop and the tools need of the world, as Protocols in one place.

The loop (agent/loop.py) and the tools (tools/) depend on these and on nothing of Docker, litellm or the run
directory's layout; the composition root (session/compose.py) plugs in the real parts: `llm.client.LLM` for
`Model`, `sandbox.Sandbox` (Docker) for `Sandbox`, `store.runs.RunDir` for `Store`, `ui.display.LiveDisplay`
or `Quiet` for `Display` (`Unseen` below where nobody looks). A second sandbox backend is one new class with
the methods of `Sandbox`; a test's fake is one too (orchestrator/testing has in-memory ones of Model,
Sandbox and Store).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol

if TYPE_CHECKING:
    from orchestrator.config import SandboxConfig
    from orchestrator.llm.types import Reply, ToolCall
    from orchestrator import events as ev


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
        """The op's result; raises errors.ToolError (one line) when the op fails."""


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


class Display(Protocol):
    """The event sink: every event, after it is logged and applied, with the state it made."""

    def event(self, event: ev.Event, state: Any) -> None:
        """`state`: the run's state after the event (agent/state.py's RunState)."""


class Unseen:
    """The display nobody looks at: a program's run (each event goes to `on_event`, if given) and a
    sub-agent with no display of its own."""

    def __init__(self, on_event: Callable[[ev.Event], None] | None = None) -> None:
        self.on_event = on_event

    def event(self, event: ev.Event, state: Any) -> None:
        if self.on_event is not None:
            self.on_event(event)


class EventLog(Protocol):
    def append(self, event: ev._Event) -> None: ...

    def read(self) -> tuple[list[ev.Event], str | None]: ...


class Store(Protocol):
    """What the loop needs of its run's directory (store/runs.py's RunDir; testing/store.py's MemoryStore):
    nothing of its layout. A sub-agent's run (store/children.py) is one too."""

    id: str
    events: EventLog

    def update_meta(self, **changes: Any) -> dict[str, Any]:
        """run.json's fields changed (status, usage, ...); the whole record after the change."""

    def take_stop_request(self) -> bool:
        """True (once) when `cairn stop` asked this run to stop."""

    def stop_asked(self) -> bool:
        """After a step: the top run takes a stop request; a sub-agent's run only sees its top run's."""

    def messages_after(self, offset: int) -> list[tuple[str, int]]:
        """The person's messages (`cairn say`) past `offset`: (text, the offset just past it)."""

    def journal_key(self, step: int, call_id: str) -> str:
        """The key a tool call is journaled under in the sandbox (store/journal.py)."""

    def disk_limit(self, sandbox: Any, limit: str) -> Any:
        """What measures `--max-disk` after steps (`over()`: why the run is over it, or None); None when
        the store writes nothing on the host."""

    def read_journal(self) -> Any:
        """The toolbox's journal of the tool calls (store/journal.py's Journal): what a resume finishes."""

    def checkpoint(self, step: int) -> Any:
        """Commits the workspace after `step`; the result has `commit` (or None) and `skipped` (paths)."""
