"""cairn from Python: `run`, `resume`, and `Agent` for a model and a sandbox of one's own.

    import orchestrator

    result = orchestrator.run("Write fizzbuzz.py and test it", model="anthropic/claude-sonnet-4-5")
    print(result.status, result.result, result.usage["cost_usd"])
    result = orchestrator.resume(result.id, message="also add a --limit option")

`run` and `resume` do what `cairn run` and `cairn resume` do (the same run directories, settings,
checks and statuses) with no display: pass `on_event` to see the events as they happen. `Agent` takes
ports instead of settings: any object with the model's `complete`/`context_window` and the sandbox's
`call` (orchestrator/testing has in-memory ones). This module imports neither litellm nor docker until
a run needs them, so `import orchestrator` stays cheap.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.errors import UsageError
from orchestrator.ports import Unseen

EventCallback = Callable[[Any], None]  # called with each orchestrator.events event, in order, as it is logged


@dataclass
class RunResult:
    """How a run ended: what `cairn show --json` says of it, in short."""

    id: str
    status: str  # one of the eight statuses of docs/contracts.md
    reason: str | None  # why a run that did not finish ended (one line); None when done
    result: str | None  # task_done's summary, the question of ask_user, or the model's last text
    usage: dict[str, Any] = field(default_factory=dict)  # prompt/cached/completion tokens, cost_usd, cache_hit_ratio
    check: dict[str, Any] | None = None  # the --check verdict (command, passed, exit_code, output_path), if any
    exit_code: int = 0  # what `cairn run` would exit with (docs/contracts.md)
    run_dir: Path | None = None  # the run's directory: workspace/, cairn/, state/

    @property
    def ok(self) -> bool:
        """Done, and its check passed when it has one."""
        return self.exit_code == 0


def run(task: str, *, model: str | None = None, workspace: str | Path | None = None, image: str | None = None,
        max_steps: int | None = None, on_event: EventCallback | None = None, runs_dir: str | Path | None = None,
        template: str | None = None, from_git: str | None = None, ref: str | None = None,
        **settings: Any) -> RunResult:
    """Start a run of `task` in the Docker sandbox and drive it to its end, as `cairn run` does.

    `model`: a litellm model string or `scripted:PATH` (else `$CAIRN_MODEL`); `workspace`: a folder worked
    on in place (else a copy of `template`); `image`: the sandbox image; `settings`: any other fields of
    a run's config, nested as in run.json (`limits={"max_cost": 2}`, `check={"command": "pytest -q"}`),
    or top-level ones such as `max_cost`. Bad settings raise UsageError, before any run exists."""
    from orchestrator.runs.new_run import create_run
    from orchestrator.runs.settings import resolve_config

    options = _options(settings, model=model, image=image, max_steps=max_steps)
    cfg = _config(resolve_config, options, template)
    _preflight(cfg)
    directory = _runs_dir(runs_dir)
    run_dir = create_run(directory, task, cfg, workspace=Path(workspace) if workspace is not None else None,
                         from_git=from_git, ref=ref)
    return _drive(run_dir, cfg, on_event, message=None, resumed=False)


def resume(run_id: str, *, message: str | None = None, runs_dir: str | Path | None = None,
           model: str | None = None, max_steps: int | None = None, on_event: EventCallback | None = None) -> RunResult:
    """Continue a run that stopped, waits for an answer (`message` is the answer), was interrupted or
    crashed, as `cairn resume` does (the same decisions: orchestrator/runs/resume.py; no person is there
    to ask, so a waiting approval needs `cairn approve` first). `run_id` is an id, a unique prefix of
    one, or `@last`."""
    from orchestrator.runs.resume import Resumption, prepare
    from orchestrator.store.run_dir import RunDir

    run_dir = RunDir.find(_runs_dir(runs_dir), run_id)
    ready = prepare(run_dir, Resumption(message=message, model=model, max_steps=max_steps))
    return _drive(run_dir, ready.cfg, on_event, message=ready.message, resumed=True, source=ready.source)


class Agent:
    """The agent loop on ports of one's own: `model` (`complete(messages, tools, tool_choice, history_end,
    on_text) -> Reply` and `context_window() -> int`) and `sandbox` (`call(op, **args) -> dict`, the ops of
    sandbox_image/PROTOCOL.md; orchestrator.testing.LocalSandbox, or cairn's Docker Sandbox).

    `settings`: fields of a run's config, nested as in run.json (`{"limits": {"max_steps": 20}}`); the
    model's name in the run's records is `model.name` when it has one. `tools` names the built-in tools the model is offered (default: all of them; `task_done` is always
    among them, or a run could not end). Each `run` makes a run directory under `runs_dir`, so `cairn
    show`, `cairn diff` and `resume` work on it as on any run. A sandbox with a `workspace` folder (and
    `cairn` folder) on this machine is the run's workspace, worked on in place."""

    def __init__(self, model: Any, sandbox: Any, tools: Sequence[str] | None = None,
                 runs_dir: str | Path | None = None, on_event: EventCallback | None = None,
                 settings: dict[str, Any] | None = None) -> None:
        from orchestrator.tools.specs import BUILTIN_TOOLS, tool_names

        known = tool_names(BUILTIN_TOOLS)
        unknown = [name for name in tools or () if name not in known]
        if unknown:
            raise UsageError(f"no built-in tool {', '.join(map(repr, unknown))}; the tools are: {', '.join(known)}")
        self.model, self.sandbox, self.on_event = model, sandbox, on_event
        self.tools = None if tools is None else sorted({*tools, "task_done"}, key=known.index)
        self.runs_dir = _runs_dir(runs_dir)
        self.settings = dict(settings or {})  # fields of a run's config, nested as in run.json
        self.run_dir: Any = None  # the RunDir of the last run

    def run(self, task: str, max_steps: int | None = None) -> RunResult:
        """A new run of `task`, driven to its end."""
        from orchestrator.runs.new_run import create_run
        from orchestrator.runs.settings import resolve_config

        options = _options(self.settings, model=getattr(self.model, "name", None) or "custom", image=None,
                           max_steps=max_steps)
        cfg = _config(resolve_config, options, None)
        folder = getattr(self.sandbox, "folder", None)
        self.run_dir = create_run(self.runs_dir, task, cfg, workspace=Path(folder) if folder else None,
                                  offered=self.tools)
        return self._go(cfg, message=None, resumed=False)

    def resume(self, message: str | None = None) -> RunResult:
        """Continue the last run (after ask_user, a stop or a limit), with `message` as the person's words."""
        from orchestrator.runs.settings import load_config

        if self.run_dir is None:
            raise UsageError("this Agent has made no run yet: call run(task) first")
        return self._go(load_config(self.run_dir), message=message, resumed=True)

    def _go(self, cfg: Any, message: str | None, resumed: bool) -> RunResult:
        """The one drive sequence (orchestrator/runs/drive.py), on this Agent's model and sandbox."""
        from orchestrator.runs.drive import drive

        attach = getattr(self.sandbox, "attach", None)
        if attach is not None:  # a LocalSandbox keeps cairn's files (journal, saved outputs) in the run's cairn/
            attach(self.run_dir.workspace, self.run_dir.cairn_dir)
        driven = drive(self.run_dir, cfg, Unseen(self.on_event), resumed=resumed, message=message,
                       source="answer" if resumed and message else "user", sandbox=self.sandbox, model=self.model)
        return result_of(self.run_dir, driven.status, driven.error)


def result_of(run_dir: Any, status: str, error: Any = None) -> RunResult:
    """The result of a run whose drive has ended: its view (orchestrator/view/), as every face shows it."""
    from orchestrator.runs.outcome import outcome_of

    outcome = outcome_of(run_dir, status, error)
    view = outcome.view
    return RunResult(id=view.id, status=view.status, reason=view.reason, result=view.result, usage=view.usage,
                     check=view.check, exit_code=outcome.exit_code, run_dir=run_dir.root)


# -- the pieces -------------------------------------------------------------------------------------

def _drive(run_dir: Any, cfg: Any, on_event: EventCallback | None, message: str | None, resumed: bool,
           source: str | None = None) -> RunResult:
    from orchestrator.runs.drive import drive

    driven = drive(run_dir, cfg, Unseen(on_event), resumed=resumed, message=message, source=source)  # lets go of the lock
    return result_of(run_dir, driven.status, driven.error)


def _options(settings: dict[str, Any], model: str | None, image: str | None, max_steps: int | None) -> dict[str, Any]:
    """The keyword arguments as a nested settings dict, like the CLI's options. A top-level field of a
    limits block (`max_cost=2`) may be given flat; a `model` given as a dict is taken whole."""
    from orchestrator.config import LimitsConfig

    options = {key: dict(value) if isinstance(value, dict) else value for key, value in settings.items()}
    for key in list(options):
        if key in LimitsConfig.model_fields:
            options.setdefault("limits", {})[key] = options.pop(key)
    if model is not None:
        options.setdefault("model", {})["model"] = model
    if image is not None:
        options.setdefault("sandbox", {})["image"] = image
    if max_steps is not None:
        options.setdefault("limits", {})["max_steps"] = max_steps
    return options


def _config(resolve: Callable[..., Any], options: dict[str, Any], template: str | None) -> Any:
    from pydantic import ValidationError

    from orchestrator.runs.settings import invalid_setting

    try:
        return resolve(options, template=template)
    except ValidationError as exc:
        raise UsageError(invalid_setting(exc)) from None


def _preflight(cfg: Any) -> None:
    from orchestrator.llm.preflight import preflight

    preflight(cfg.model, key_elsewhere=cfg.mcp.api_key_in_file)


def _runs_dir(runs_dir: str | Path | None) -> Path:
    if runs_dir is not None:
        return Path(runs_dir).expanduser()
    return Path(os.environ.get("CAIRN_RUNS_DIR") or "~/.cairn/runs").expanduser()


