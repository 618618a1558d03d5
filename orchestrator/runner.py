"""Putting a run together: its directory, its sandbox, its model, and the agent that drives them."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from orchestrator.config import RunConfig
from orchestrator.errors import EXIT_BUDGET, EXIT_DONE, EXIT_FAILED, EXIT_INTERRUPTED, CairnError, UsageError
from orchestrator.prompts import system_prompt
from orchestrator.store import events as ev
from orchestrator.store.runs import RunDir
from orchestrator.tools.specs import BUILTIN_TOOLS, canonical

TEMPLATES_DIR = Path(__file__).resolve().parent.parent / "workspace_templates"

EXIT_CODES = {"done": EXIT_DONE, "budget": EXIT_BUDGET, "interrupted": EXIT_INTERRUPTED}


def exit_code(status: str, error: CairnError | None = None) -> int:
    """CONTRACTS.md: 0 done, 3 budget, 130 interrupted, 4 no sandbox, 1 for every other ending."""
    if error is not None:
        return error.exit_code
    return EXIT_CODES.get(status, EXIT_FAILED)


def template_dir(name: str) -> Path:
    path = TEMPLATES_DIR / name
    if not path.is_dir():
        known = ", ".join(sorted(p.name for p in TEMPLATES_DIR.iterdir() if p.is_dir()))
        raise UsageError(f"no workspace template {name!r}; the templates are: {known}")
    return path


def create_run(runs_dir: Path, task: str, cfg: RunConfig) -> RunDir:
    run = RunDir.create(runs_dir, {"task": task, "status": "running", "config": cfg.model_dump(mode="json")},
                        template=template_dir(cfg.template))
    run.events.append(ev.RunStarted(task=task, system_prompt=system_prompt(cfg.system_prompt_extra),
                                    tools=canonical(BUILTIN_TOOLS)))
    return run


def load_config(run: RunDir) -> RunConfig:
    return RunConfig.model_validate(run.read_meta()["config"])


class Session:
    """A run's live parts. Use as a context manager so the sandbox always stops with the run."""

    def __init__(self, run: RunDir, cfg: RunConfig, display: Any, resumed: bool = False) -> None:
        from orchestrator.llm.client import LLM  # imports litellm: only for commands that call a model
        from orchestrator.loop import Agent
        from orchestrator.sandbox import Sandbox
        from orchestrator.sandbox.image import ensure_image

        self.run, self.cfg, self.resumed = run, cfg, resumed
        self.aside = run.events.set_aside_torn_line() if resumed else None
        image = cfg.sandbox.image or ensure_image()
        self.sandbox = Sandbox(run.id, run.workspace, cfg.sandbox, image=image)
        self.agent = Agent(run, cfg, self.sandbox, LLM(cfg.model), display)

    def _lock(self) -> None:
        """Marks the run as live: `ls` and `gc` tell a running run from a crashed one by this pid."""
        pid_file = self.run.state / "pid"
        tmp = pid_file.with_name("pid.tmp")
        tmp.write_text(json.dumps(process_identity(os.getpid())))
        os.replace(tmp, pid_file)

    def __enter__(self) -> "Session":
        self.sandbox.start()
        try:
            self._lock()
            if self.aside is not None:
                self.agent.emit(ev.Notice(step=self.agent.state.step,
                                          text=f"a torn last event line was set aside in {self.aside.name}"))
            if self.resumed:
                self.agent.recover()
        except BaseException:  # Ctrl-C or an error here: `with` will not call __exit__, so stop the sandbox
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.sandbox.stop()
        (self.run.state / "pid").unlink(missing_ok=True)

    def go(self, message: str | None = None, source: str = "user") -> str:
        if message:
            self.agent.emit(ev.UserMessage(step=self.agent.state.step, text=message, source=source))
        return self.agent.run()


def mark_failed(run: RunDir, reason: str) -> None:
    """For a run that could not even start its sandbox: the log and run.json say why."""
    run.events.append(ev.StatusChanged(status="failed", reason=reason))
    run.update_meta(status="failed", result=None)


def process_identity(pid: int) -> dict[str, Any]:
    """What tells this process from a later one that got the same pid: host, boot and start time."""
    return {"pid": pid, "host": socket.gethostname(), "boot": _read("/proc/sys/kernel/random/boot_id"),
            "start": _start_time(pid)}


def run_is_live(run: RunDir) -> bool:
    """True while the process named in `state/pid` runs. A pid file a SIGKILL left behind is stale: its
    pid is gone, or now names another process (another start time or boot), or it was written on another
    host (an imported run)."""
    try:
        text = (run.state / "pid").read_text()
    except OSError:
        return False
    try:
        recorded = json.loads(text)
        if isinstance(recorded, int):  # the older format: the pid alone
            recorded = {"pid": recorded}
        pid = int(recorded["pid"])
        os.kill(pid, 0)
    except PermissionError:  # the process exists under another user
        pass
    except (OSError, ValueError, TypeError, KeyError):
        return False
    now = process_identity(pid)
    return all(recorded.get(key) is None or recorded[key] == now[key] for key in ("host", "boot", "start"))


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux); None where /proc is not there."""
    stat = _read(f"/proc/{pid}/stat")
    if stat is None:
        return None
    try:
        return int(stat.rsplit(")", 1)[1].split()[19])  # field 22; the name in (...) may hold spaces
    except (IndexError, ValueError):
        return None


def elapsed(meta: dict[str, Any]) -> float:
    return (meta.get("updated") or time.time()) - meta.get("created", time.time())
