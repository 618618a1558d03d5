"""The ports: what the loop and the tools need of the world, as Protocols in one place.

The loop (agent/loop.py) and the tools (tools/) depend on these and on nothing of Docker, litellm or the run
directory's layout; the composition root (runs/compose.py) plugs in the real parts: `llm.client.LLM` for
`Model`, a sandbox backend (sandbox/: Docker, Harbor's environments, a local folder) for `Sandbox`,
`store.run_dir.RunDir` for `Store`, `ui.display.LiveDisplay` or `Quiet` for `Display` (`Unseen` below where
nobody looks). A test's fake is one class with the methods of its port (orchestrator/testing has
in-memory ones of Model, Sandbox and Store).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Protocol, Union, runtime_checkable

if TYPE_CHECKING:
    from orchestrator import events as ev
    from orchestrator.config import RunConfig, SandboxConfig
    from orchestrator.llm.types import Reply, ToolCall

# What crosses the wire as JSON: a model's messages and tools, a toolbox op's arguments and result.
Json = Union[None, bool, int, float, str, list["Json"], dict[str, "Json"]]
JsonObject = dict[str, Json]
ToolChoice = Union[str, JsonObject]  # "auto", "none", or one tool forced: {"type": "function", ...}


class Model(Protocol):
    """A chat model with tools: one request, one reply (text, tool calls, usage)."""

    def complete(self, messages: list[JsonObject], tools: list[JsonObject], tool_choice: ToolChoice = "auto",
                 history_end: int | None = None, on_text: Callable[[str], None] | None = None) -> Reply: ...

    def context_window(self) -> int: ...


class ToolSandbox(Protocol):
    """What a tool's handler uses: toolbox ops (PROTOCOL.md), from several threads at once when calls run
    side by side (read-only ops then go together, others one at a time). A journal's replay of a finished
    call (agent/recovery.py) is one too."""

    network_enabled: bool

    def call(self, op: str, journal_key: str | None = None, **args: Json) -> JsonObject:
        """The op's result; raises errors.ToolError (one line) when the op fails. `journal_key`: the tool
        call this op carries out, under which the toolbox journals it (store/journal.py), so a crash
        never runs it twice."""


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
    """The agent's computer: started, called, kept between drives, and its files given back."""

    cfg: SandboxConfig
    image: str
    reused: bool  # what was installed outside the workspace survived the last start
    replaced: str | None  # why a kept machine was not used, if it was not

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

    def interrupt(self) -> bool:
        """Cut the op that runs now short (a person's stop): a command's processes are killed, a session's
        wait ends, and the op answers at once, saying so. Safe from any thread; False when nothing runs
        or the backend cannot."""

    def recorded(self, journal_key: str) -> None:
        """The run has logged the outcome of the call journaled under `journal_key`: the toolbox may drop
        its record (a later request tells it; PROTOCOL.md, "The journal")."""


class Caller(Protocol):
    """The agent that makes a tool call, as a tool may use it: agent_delegate makes its child from it."""

    cfg: RunConfig
    run_dir: Store
    sandbox: Sandbox
    model: Model
    display: Display


@dataclass
class ToolContext:
    """What a tool's handler may use besides its arguments."""

    sandbox: ToolSandbox  # the run's sandbox, or a journal's replay of one answer (agent/recovery.py)
    cfg: SandboxConfig
    obs_path: str  # where a big output of this call is saved (`/cairn/obs/<step>-<tool>.txt`)
    step: int = 0
    call: ToolCall | None = None
    agent: Caller | None = None
    journal_key: str | None = None  # the key of the call's first toolbox op (see `op`)

    def op(self, op: str, **args: Json) -> JsonObject:
        """The tool's toolbox op. The first op a journaled tool makes carries its call's key, so the
        toolbox journals it and a crash never runs it twice; the key is used up by that op."""
        key, self.journal_key = self.journal_key, None
        return self.sandbox.call(op, **args) if key is None else self.sandbox.call(op, journal_key=key, **args)


# -- the person --------------------------------------------------------------------------------------


@dataclass
class Question:
    """What a person is asked about a call: the call whole, why it is asked, what an "always" answer
    would cover (agent/approvals.py decides which calls are asked)."""

    name: str
    arguments: str
    why: str
    grant: str


@dataclass
class Answer:
    approved: bool
    reason: str | None = None
    always: bool = False
    arguments: str | None = None  # edited arguments (JSON of an object), to run in place of the model's
    stop: bool = False  # Ctrl-C at the prompt: a refusal, and the run stops after this step


class Usage(Protocol):
    """A run's totals so far (agent/guards.py's Totals)."""

    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    cost_usd: float
    cost_known: bool

    @property
    def cache_hit_ratio(self) -> float: ...


class Progress(Protocol):
    """What a display reads of the run's state after an event (agent/state.py's RunState)."""

    step: int
    status: str
    totals: Usage


class Display(Protocol):
    """The event sink: every event, after it is logged and applied, with the state it made."""

    def event(self, event: ev.Event, state: Progress) -> None: ...


@runtime_checkable
class AsksThePerson(Protocol):
    """A display a person answers at (a terminal): it can stop and put an approval's question there. A
    display without these methods never asks: the run waits, and `cairn approve` answers."""

    def can_ask(self) -> bool:
        """Whether a person can answer now (a terminal, not a pipe)."""

    def ask_approval(self, question: Question) -> Answer | None:
        """The person's answer; None when they left without one (the run then waits)."""


class Unseen:
    """The display nobody looks at: a program's run (each event goes to `on_event`, if given) and a
    sub-agent with no display of its own."""

    def __init__(self, on_event: Callable[[ev.Event], None] | None = None) -> None:
        self.on_event = on_event

    def event(self, event: ev.Event, state: Progress) -> None:
        if self.on_event is not None:
            self.on_event(event)


# -- the run's directory -----------------------------------------------------------------------------


class EventLog(Protocol):
    def append(self, event: ev.Event) -> None: ...

    def read(self) -> tuple[list[ev.Event], str | None]: ...


class DiskLimit(Protocol):
    """`--max-disk`, measured after steps (store/disk.py)."""

    def over(self) -> str | None:
        """Why the run is over its limit, or None."""


class JournalEntry(Protocol):
    """The journal's last word on one call (store/journal.py's Entry)."""

    state: str  # "started", "finished" or "killed"
    response: JsonObject | None
    seconds: float | None
    partial: JsonObject | None


class Journal(Protocol):
    """The toolbox's journal of tool calls, as read on the host (store/journal.py)."""

    problem: str | None  # why it could not be read, when it exists and could not

    def get(self, key: str) -> JournalEntry | None: ...


class Checkpointed(Protocol):
    """What a checkpoint made: the commit (None when nothing changed) and the paths newly skipped."""

    commit: str | None
    skipped: list[str]


class Store(Protocol):
    """What the loop needs of its run's directory (store/run_dir.py's RunDir; testing/store.py's MemoryStore):
    nothing of its layout. A sub-agent's run (store/children.py) is one too."""

    id: str
    events: EventLog

    def update_meta(self, **changes: Json) -> JsonObject:
        """run.json's fields changed (status, usage, ...); the whole record after the change."""

    def take_stop_request(self) -> bool:
        """True (once) when `cairn stop` asked this run to stop."""

    def stop_asked(self) -> bool:
        """After a step: the top run takes a stop request; a sub-agent's run only sees its top run's."""

    def stop_request(self) -> str | None:
        """The stop a person asked for, without taking it: "now" (`cairn stop`, the page's Stop: the running
        command is cut short), "after-step" (`cairn stop --after-step`), or None."""

    def messages_after(self, offset: int) -> list[tuple[str, int]]:
        """The person's messages (`cairn say`) past `offset`: (text, the offset just past it)."""

    def journal_key(self, step: int, call_id: str) -> str:
        """The key a tool call is journaled under in the sandbox (store/journal.py)."""

    def disk_limit(self, sandbox: Sandbox, limit: str) -> DiskLimit | None:
        """What measures `--max-disk` after steps; None when the store writes nothing on the host."""

    def read_journal(self) -> Journal:
        """The toolbox's journal of the tool calls: what a resume finishes."""

    def checkpoint(self, step: int) -> Checkpointed:
        """Commits the workspace after `step`."""
