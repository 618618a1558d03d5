"""cairn as a Harbor agent (Harbor: the harness of Terminal-Bench 2.0).

    harbor run -p TASK -a orchestrator.harbor:CairnAgent -m MODEL [--ak api_base=URL] [--ak settings=FILE]
               [--ak max_steps=N] [--ak max_cost=USD] [--ak max_time=DURATION] [--ak keep_dependencies=true]

An external agent: cairn's loop runs here, on the host, in a thread of its own; the tools act in the
task's environment through Harbor's environment interface (sandbox.py). The model's key is read from
this host's environment by the model client, and never goes into the environment (Harbor's `--ae`
variables reach every exec there; keys are not taken that way). Each trial's agent log directory gets
cairn's run directory (so `cairn show/report/diff RUN --runs-dir <trial>/agent` work) and the run as an
ATIF trajectory, `trajectory.json`; Harbor's AgentContext gets the run's tokens and cost. The trial's agent
timeout is the run's time limit (time_budget.py), so the model is told the time it has and left.

The run directory lives in a private folder of this host while the run goes on and is copied to the log
directory at its end: Harbor mounts that directory into some environments, and a run's state (its log,
its inbox) must stay out of the agent's reach. Harbor 0.26 then uploads the log directory into every
environment that does not mount it (docker's included), before the task's tests: so what the copy leaves
out (the dependency and cache folders of scan.NOT_FOLLOWED, unless `keep_dependencies`) costs the tests
nothing either.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from harbor.agents.base import BaseAgent
from harbor.agents.capabilities import AgentCapabilities
from harbor.environments.base import BaseEnvironment
from harbor.models.agent.context import AgentContext

from orchestrator.errors import CairnError, UsageError
from orchestrator.version import __version__

if TYPE_CHECKING:  # loaded when a trial runs, not when Harbor loads the agent
    from orchestrator.agent.loop import Loop
    from orchestrator.store.run_dir import RunDir

TRAJECTORY = "trajectory.json"
STOPPED_BY = "Harbor (the trial's timeout or cancellation)"
# What the model is told must be true: here the sandbox is the task's container, not cairn's own.
HARBOR_PROMPT = ("In this run the sandbox is the task's own container, run by Harbor; this replaces what is said "
                 "above about the user and the filesystem: commands run as the container's user, as the task set "
                 "it up, the filesystem is writable where that user may write, and the network is what the task "
                 "allows. After task_done, the task's own tests check the container.")


class CairnAgent(BaseAgent):
    """Harbor's `-a orchestrator.harbor:CairnAgent`."""

    capabilities = AgentCapabilities(atif=True)

    def __init__(self, logs_dir: Path, model_name: str | None = None, *args: Any,  # noqa: ANN401
                 api_base: str | None = None, settings: str | None = None, max_steps: int | str | None = None,
                 max_cost: float | str | None = None, max_time: float | str | None = None,
                 keep_dependencies: bool | str = False, **kwargs: Any) -> None:  # noqa: ANN401
        super().__init__(logs_dir, model_name, *args, **kwargs)
        self.api_base, self.settings_path = api_base, settings
        self.max_steps, self.max_cost, self.max_time = max_steps, max_cost, max_time
        self.keep_dependencies = keep_dependencies  # checked with the other options, in _config
        self.run_dir: Any = None  # store.run_dir.RunDir of the trial's run, once made
        self._loop_agent: Any = None  # the loop's Agent, once its LiveRun exists (for a stop request)
        self._sandbox: Any = None

    @staticmethod
    def name() -> str:
        return "cairn"

    def version(self) -> str | None:
        return __version__

    async def setup(self, environment: BaseEnvironment) -> None:
        """Nothing to install: the toolbox goes in when the run starts (and a Python, if it needs one)."""

    async def run(self, instruction: str, environment: BaseEnvironment, context: AgentContext) -> None:
        from orchestrator.integrations.harbor.time_budget import trial_agent_timeout

        timeout = trial_agent_timeout(environment)  # Harbor's clock started as it called this method
        deadline = time.monotonic() + timeout if timeout else None
        cfg = self._config()
        workdir = (await environment.exec("pwd")).stdout
        cfg.sandbox.workdir = (workdir or "/").strip() or "/"
        cfg.sandbox.network = "bridge"  # the task's environment decides what it can reach, not cairn
        cfg.system_prompt_extra = "\n".join(filter(None, [HARBOR_PROMPT, cfg.system_prompt_extra]))
        private = Path(tempfile.mkdtemp(prefix="cairn-harbor-"))
        done = asyncio.get_running_loop().create_future()
        worker = threading.Thread(target=self._drive, args=(instruction, cfg, environment, private, done, deadline),
                                  name="cairn-harbor-run", daemon=True)
        worker.start()
        try:
            await asyncio.shield(done)
        except asyncio.CancelledError:
            self._stop_between_actions()
            while not done.done():  # the run ends after its current action; its thread is never left running
                try:
                    await asyncio.shield(done)
                except asyncio.CancelledError:
                    self._stop_between_actions()
                except BaseException:  # noqa: BLE001 - its error is the run's, recorded in its log
                    break
            raise
        finally:
            worker.join()  # past its last line once `done` is settled
            self._finish(context, private)

    # -- the run, in its own thread ---------------------------------------------------------------

    def _drive(self, instruction: str, cfg: Any, environment: BaseEnvironment, private: Path,  # noqa: ANN401
               done: asyncio.Future, deadline: float | None = None) -> None:
        loop = done.get_loop()
        try:
            status = self._go(instruction, cfg, environment, loop, private, deadline)
        except BaseException as exc:  # noqa: BLE001 - handed to the event loop, which raises it
            loop.call_soon_threadsafe(_settle, done, None, exc)
            return
        loop.call_soon_threadsafe(_settle, done, status, None)

    def _go(self, instruction: str, cfg: Any, environment: BaseEnvironment,  # noqa: ANN401
            loop: asyncio.AbstractEventLoop, private: Path, deadline: float | None = None) -> str:
        from orchestrator import events as ev
        from orchestrator.sandbox.backends import backend
        from orchestrator.runs.compose import mark_failed
        from orchestrator.runs.drive import drive
        from orchestrator.runs.new_run import start_log
        from orchestrator.store.run_dir import RunDir
        from orchestrator.ui.display import Quiet

        run = self.run_dir = RunDir.create(private, {"task": instruction, "status": "running",
                                                     "config": cfg.model_dump(mode="json")})
        sandbox = self._sandbox = backend("harbor")(environment, loop, cfg.sandbox, run.cairn_dir,
                                                    keep_dependencies=self.keep_dependencies)
        try:
            # Started before the log, so the step-0 checkpoint holds the work directory as the task gave it.
            sandbox.start()
            unfollowed = sandbox.follow_workspace(run.workspace)
            run.update_meta(harbor={"environment": type(environment).__name__, "workdir": cfg.sandbox.workdir,
                                    "workspace_follows_workdir": unfollowed is None,
                                    **({"workspace_note": unfollowed} if unfollowed else {})})
            start_log(run, instruction, cfg)
        except CairnError as exc:
            sandbox.stop()
            if sandbox.cancelled:  # Harbor stopped the trial before the loop began: nothing failed
                run.events.append(ev.StatusChanged(status="interrupted", reason=f"stopped by {STOPPED_BY}"))
                run.update_meta(status="interrupted", result=None)
            else:
                mark_failed(run, exc.message)  # a run whose sandbox never started says why in its log
            run.release()  # Harbor's process goes on to other trials: drive() would have let go of it too
            raise

        if deadline is not None:  # what is left of the trial's time once the sandbox is up: the run's limit
            left = max(1.0, deadline - time.monotonic())
            cfg.limits.max_wall_seconds = min(cfg.limits.max_wall_seconds or left, left)
            run.update_meta(config=cfg.model_dump(mode="json"))

        def opened(live: Any) -> None:  # noqa: ANN401 - runs.compose.LiveRun
            self._loop_agent = live.agent
            sandbox.on_unfollow = lambda note: _unfollowed(run, live.agent, note)
            if sandbox.cancelled:
                self._stop_between_actions()

        # The drive sequence every entry point uses (runs/drive.py), on Harbor's environment.
        return drive(run, cfg, Quiet(), sandbox=sandbox, opened=opened).status

    def _stop_between_actions(self) -> None:
        """Harbor cancelled the trial: the loop stops after its current action (status `interrupted`), and
        the environment ops in flight end now."""
        if self._sandbox is not None:
            self._sandbox.cancel()
        agent = self._loop_agent
        if agent is not None and not agent.stop_requested:
            agent.stop_requested, agent.stopped_by = True, STOPPED_BY

    # -- settings and results ---------------------------------------------------------------------

    def _config(self) -> Any:  # noqa: ANN401 - config.RunConfig
        """The run's config: `-m`, `--ak api_base=`, `--ak settings=FILE`, `--ak max_steps=`, `max_cost=`,
        `max_time=` (a duration; the trial's own timeout caps it)."""
        from pydantic import ValidationError

        from orchestrator.runs.settings import invalid_setting, resolve_config, settings_file

        if not self.model_name:
            raise UsageError("cairn needs a model: harbor run ... -m MODEL (a litellm model string)")
        layers = [settings_file(Path(self.settings_path).expanduser(), "--ak settings=")] if self.settings_path else []
        options: dict[str, Any] = {"model": {"model": self.model_name, "api_base": self.api_base}, "limits": {}}
        if self.max_steps is not None:
            options["limits"]["max_steps"] = self.max_steps
        if self.max_cost is not None:
            options["limits"]["max_cost"] = self.max_cost
        if self.max_time is not None:
            options["limits"]["max_wall_seconds"] = self.max_time
        try:
            cfg = resolve_config(options, layers=layers)
        except ValidationError as exc:
            raise UsageError(invalid_setting(exc)) from None
        if cfg.mcp.servers:
            raise UsageError("MCP servers are not available to cairn in a Harbor environment yet")
        self.keep_dependencies = _flag(self.keep_dependencies, "keep_dependencies")
        return cfg

    def _finish(self, context: AgentContext, private: Path) -> None:
        """Harbor's context gets the run's usage; the log directory its run directory and trajectory."""
        run = self.run_dir
        try:
            if run is None:
                return
            from orchestrator.ui.inspect.timeline import timeline
            from orchestrator.integrations.atif import trajectory

            usage = timeline(run).get("usage") or {}
            context.n_input_tokens = int(usage.get("prompt_tokens") or 0)  # cached ones included, as Harbor counts
            context.n_cache_tokens = int(usage.get("cached_tokens") or 0)
            context.n_output_tokens = int(usage.get("completion_tokens") or 0)
            context.cost_usd = usage.get("cost_usd")
            from orchestrator.view.read import read_view

            context.metadata = {**(context.metadata or {}), "cairn_run": run.id, "cairn_status": read_view(run).status}
            self.logs_dir.mkdir(parents=True, exist_ok=True)
            (self.logs_dir / TRAJECTORY).write_text(json.dumps(trajectory(run), indent=2, ensure_ascii=False))
            shutil.copytree(run.root, self.logs_dir / run.id, symlinks=True, dirs_exist_ok=True,
                            ignore=None if self.keep_dependencies is True else _dependencies_in(run.workspace))
        finally:
            shutil.rmtree(private, ignore_errors=True)


def _unfollowed(run: RunDir, agent: Loop, note: str) -> None:
    """The work directory grew past what is followed (in the loop's thread, at a checkpoint): the run's log
    gets a Notice, once (`cairn show` prints it), and run.json's `harbor` says so too."""
    from orchestrator import events as ev

    agent.emit(ev.Notice(step=agent.state.step, text=note))
    harbor = run.read_meta().get("harbor") or {}
    run.update_meta(harbor={**harbor, "workspace_follows_workdir": False, "workspace_note": note})


def _dependencies_in(workspace: Path) -> Callable[[str, list[str]], list[str]]:
    """An `ignore` for shutil.copytree: the dependency and cache folders under the run's workspace/ are left
    out of the copy (a backstop: the sandbox never brings them back)."""
    from orchestrator.sandbox.harbor.scan import not_followed

    def ignore(folder: str, names: list[str]) -> list[str]:
        inside = Path(folder) == workspace or workspace in Path(folder).parents
        return not_followed(folder, names) if inside else []

    return ignore


def _flag(value: object, name: str) -> bool:
    """An `--ak NAME=true|false` (Harbor gives a bool when the value reads as one)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, str)) and str(value).strip().lower() in ("1", "true", "yes", "0", "false", "no"):
        return str(value).strip().lower() in ("1", "true", "yes")
    raise UsageError(f"--ak {name}= takes true or false, not {value!r}")


def _settle(future: asyncio.Future, result: Any, error: BaseException | None) -> None:  # noqa: ANN401
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
