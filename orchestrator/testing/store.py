"""The Store port in memory: a run with no directory, for tests of the loop and for trying cairn out.

    store = MemoryStore("Write fizzbuzz.py", cfg)
    Loop(store, cfg, LocalSandbox(cfg=cfg.sandbox), ScriptedModel(script), display).run()
    store.events.read()    # what happened, as the event log would hold it

Its event log keeps each event as the file log would read it back (a JSON round trip), so a state
rebuilt from it (a resume) is the one a real run would rebuild. `say` and `request_stop` play the
person's `cairn say` and `cairn stop`; checkpoints are counted, not committed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator import events as ev
from orchestrator.agent.prompts import system_prompt
from orchestrator.config import RunConfig
from orchestrator.store import journal
from orchestrator.tools.registry import canonical
from orchestrator.tools.specs import BUILTIN_TOOLS


class MemoryLog:
    """An event log in a list: append and read, as store/event_log.py's file."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def append(self, event: ev._Event) -> None:
        self.lines.append(ev.dump_event(event))

    def read(self) -> tuple[list[ev.Event], str | None]:
        return [ev.parse_event(line) for line in self.lines], None


@dataclass
class MemoryCommit:
    commit: str | None
    skipped: list[str] = field(default_factory=list)


class MemoryStore:
    """A run's store with nothing on disk. `cairn_dir`: where the sandbox keeps cairn's own files (a
    LocalSandbox's `cairn` folder), from which a resume reads the toolbox's journal; None for none."""

    def __init__(self, task: str, cfg: RunConfig, id: str = "memory", cairn_dir: Path | None = None) -> None:
        self.id, self.cairn_dir = id, cairn_dir
        self.events = MemoryLog()
        self.meta: dict[str, Any] = {"id": id, "task": task, "status": "running"}
        self.said: list[str] = []  # the person's messages, in order; an offset is a count of them
        self.stop_requested = False
        self.checkpoints: list[int] = []  # the steps after which the workspace would have been committed
        self.events.append(ev.RunStarted(task=task, system_prompt=system_prompt(cfg.system_prompt_extra,
                                                                                cfg.sandbox.workdir),
                                         tools=canonical(BUILTIN_TOOLS), seed=ev.new_seed()))

    def read_meta(self) -> dict[str, Any]:
        """run.json's record, as inspection reads it (`cairn show`'s timeline works on this store too)."""
        return dict(self.meta)

    def say(self, text: str) -> None:
        self.said.append(text)

    def request_stop(self) -> None:
        self.stop_requested = True

    # -- the Store port -----------------------------------------------------------------------------

    def update_meta(self, **changes: Any) -> dict[str, Any]:
        self.meta.update(changes)
        return dict(self.meta)

    def take_stop_request(self) -> bool:
        asked, self.stop_requested = self.stop_requested, False
        return asked

    def stop_asked(self) -> bool:
        return self.take_stop_request()

    def stop_request(self) -> str | None:
        return "now" if self.stop_requested else None

    def messages_after(self, offset: int) -> list[tuple[str, int]]:
        return [(text, number) for number, text in enumerate(self.said, start=1) if number > offset]

    def journal_key(self, step: int, call_id: str) -> str:
        return journal.call_key(self.id, ".", step, call_id)

    def disk_limit(self, sandbox: Any, limit: str) -> None:
        return None  # nothing of the run is on disk here

    def read_journal(self) -> journal.Journal:
        return journal.read(self.cairn_dir) if self.cairn_dir is not None else journal.Journal()

    def checkpoint(self, step: int) -> MemoryCommit:
        self.checkpoints.append(step)
        return MemoryCommit(f"memory-{step}")
