"""The composition root: a run's live parts put together from its settings (the sandbox, the model, the
tools, the MCP servers) and handed to the loop as its ports (orchestrator/ports.py).

What a run is made from lives beside it, by job: `settings` (defaults, templates and settings files
merged; a stored run's config), `new_run` (a new run's directory and workspace: a template, a folder,
a git clone, the image's content; its first events), and `drive` (the one sequence that drives a run
with a LiveRun, used by every entry point).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, Sequence

from orchestrator.config import RunConfig
from orchestrator.errors import EXIT_BUDGET, EXIT_DONE, EXIT_FAILED, EXIT_INTERRUPTED, CairnError
from orchestrator import events as ev
from orchestrator.runs.first_checkpoint import Checkpointing
from orchestrator.runs.new_run import progress, start_log
from orchestrator.store.liveness import write_pid_file
from orchestrator.store.run_dir import RunDir
from orchestrator.tools.registry import Registry
from orchestrator.tools.specs import BUILTIN_TOOLS, tool_names
from orchestrator.status import Status

if TYPE_CHECKING:
    from orchestrator.agent.loop import Loop
    from orchestrator.ports import Display, Model
    from orchestrator.ports import Sandbox as SandboxPort
    from orchestrator.tools.registry import Tool

EXIT_CODES = {"done": EXIT_DONE, "budget": EXIT_BUDGET, "interrupted": EXIT_INTERRUPTED}


def exit_code(status: str, error: CairnError | None = None, check: dict[str, Any] | None = None) -> int:
    """docs/contracts.md: 0 done (and its check passed, when there is one: `check` is the run's last verdict),
    3 budget, 130 interrupted, 4 no sandbox, 1 for every other ending."""
    if error is not None:
        return error.exit_code
    if status == Status.DONE and check is not None and not check.get("passed"):
        return EXIT_FAILED
    return EXIT_CODES.get(status, EXIT_FAILED)


def agent_tools(run: RunDir) -> list[str] | None:
    """The names of the tools the run offers its model, from its first event; None before it has one."""
    events, _torn = run.events.read()
    started = next((e for e in events if isinstance(e, ev.RunStarted)), None)
    return [tool["function"]["name"] for tool in started.tools] if started is not None else None


def offered(tools: Registry, names: list[str] | None) -> Registry:
    """The built-in tools a run offers (a run made with fewer, orchestrator.Agent's `tools`, says so in
    its first event), and every tool of its own: a call to one it does not offer is an unknown tool."""
    if names is None:
        return tools
    builtin = set(tool_names(BUILTIN_TOOLS))
    return Registry([tools.get(name) for name in tools.names if name not in builtin or name in names])


class LiveRun:
    """A run's live parts. Making one starts its sandbox (in a thread, while the model library loads);
    use it as a context manager, whose entry waits for that start, so the sandbox always stops with the run."""

    def __init__(self, run: RunDir, cfg: RunConfig, display: Display, resumed: bool = False,
                 tools: Sequence[Tool] = (), sandbox: SandboxPort | None = None, hold: bool = True,
                 model: Model | None = None) -> None:
        """`tools`: the run's own tools, as given to `create_run`. `sandbox`: another backend of the
        Sandbox port than cairn's Docker one (the Harbor agent's, orchestrator/sandbox/harbor; one's own,
        orchestrator.Agent's). `model`: a model of one's own, in place of the client of `cfg.model`. The
        run's lock (store/liveness.py) is this process's from here (RunIsLive when another process drives
        the run) until the drive ends; `hold=False` where another process answers for it (a Ray batch's
        driver)."""
        if hold:
            run.hold()  # kept, when `create_run` or `resume` took it already
            write_pid_file(run)
        run.check_workspace()  # a run on a user's folder that is gone: say so before anything starts
        self.run, self.cfg, self.resumed, self.own_tools, self.model = run, cfg, resumed, list(tools), model
        self.aside = run.events.set_aside_torn_line() if resumed else None
        if resumed and (cfg.mcp.servers or cfg.mcp.api_key_in_file):
            from orchestrator.runs.agent_folder import restore_secrets

            cfg = self.cfg = restore_secrets(cfg)  # never stored: read from the run's agent.json again
        self.hub = None
        run.cairn_dir.mkdir(exist_ok=True)  # a run made before cairn/ existed gets one now
        # The workspace's first checkpoint is taken in a thread, beside the container's start and the model
        # library's load: only the first call that can change the workspace waits for it. From then on
        # the host's kernel says what changed (runs/first_checkpoint.py): a step's checkpoint and the
        # files given back cost what the step changed.
        self.checkpointing = Checkpointing(run)
        try:
            self.sandbox = sandbox if sandbox is not None else self._docker_sandbox()
        except BaseException:
            self.checkpointing.close()
            raise
        # The container starts (I/O on the engine) while this thread loads the model library (CPU): a
        # start waits for the longer of the two, not for both (bench/startup_bench.py).
        self._starting = _Starting(self.sandbox)
        try:
            self.agent = self._make_agent(display)
            self.checkpointing.log_through(self.agent.emit)
        except BaseException:
            self._starting.wait()  # a half-started sandbox is stopped, never left running
            self.sandbox.stop()
            self.checkpointing.close()
            raise

    def _docker_sandbox(self) -> SandboxPort:
        """cairn's own sandbox: a container of the run's image (with its MCP servers' packages)."""
        from orchestrator.sandbox.backends import backend
        from orchestrator.sandbox.docker.image import ensure_image

        run, cfg = self.run, self.cfg
        image = cfg.sandbox.image or ensure_image()
        if cfg.mcp.servers:
            from orchestrator.tools.mcp import McpHub
            from orchestrator.tools.mcp_packages import image_for

            image = image_for(image, cfg.mcp.servers, progress=progress)  # uvx/pipx/npx packages, installed
            self.hub = McpHub(cfg.mcp.servers, start_timeout=cfg.mcp.start_timeout,
                              call_timeout=cfg.mcp.call_timeout,
                              reserved={*tool_names(BUILTIN_TOOLS), *(t.name for t in self.own_tools)},
                              progress=progress)
        carried = carried_machine(run)
        return backend("docker")(run.id, run.workspace, cfg.sandbox, image=carried or image, cairn_mount=run.cairn_dir,
                                 external=run.external_workspace is not None, keep=True, run_dir=run.root,
                                 machine=carried is not None, watch=self.checkpointing.watch)

    def _make_agent(self, display: Display) -> Loop:
        """The agent's Loop with its ports: this sandbox, the model's client (which imports litellm: only
        commands that call a model come here), the display, and the registry of the run's tools."""
        from orchestrator.agent.critic import critic_model_config
        from orchestrator.llm import warmup
        from orchestrator.llm.client import LLM
        from orchestrator.llm.scripted import SCRIPT_PROGRESS
        from orchestrator.agent.loop import Loop
        from orchestrator.agent.delegate import delegate_tool
        from orchestrator.tools.builtin import builtin_tools

        if self.model is None:
            llm = LLM(self.cfg.model, script_progress=self.run.state / SCRIPT_PROGRESS)
            waited = time.monotonic() if warmup.loading() else None
            if waited is not None:  # seconds on a busy machine: said, not a silent wait (docs/terminal.md)
                progress("loading the model library (litellm)")
            warmup.wait()  # the load `run` and `resume` began (llm/warmup.py): then preload finds it done
            if waited is not None:
                progress(f"model library loaded in {time.monotonic() - waited:.1f} s")
            llm.preload()  # litellm, unless the model goes without it (llm/client.py)
            llm.on_retry = self._retrying
        tools = Registry([*builtin_tools(delegate_tool(Loop)), *self.own_tools])  # MCP tools join once their servers run
        agent = Loop(self.run, self.cfg, self.sandbox, self.model or llm, display, offered(tools, agent_tools(self.run)))
        critic_cfg = critic_model_config(self.cfg)
        if critic_cfg is not None:  # --critic-model: the critic's own client, its retries logged alike
            agent.critic_model = LLM(critic_cfg, script_progress=self.run.state / SCRIPT_PROGRESS)
            agent.critic_model.on_retry = self._retrying
        return agent

    def _retrying(self, retry: Any) -> None:  # noqa: ANN401 - llm.retry.Retry, imported with litellm
        """A model retry goes into the log (show, report) and so onto the display, before its wait."""
        state = self.agent.state
        step = state.step if state.open_calls else state.step + 1  # a sub-agent's request: within a step
        self.agent.emit(ev.Notice(step=step, text=retry.line(), kind="model_retry", endpoint=retry.endpoint,
                                  status=retry.failure.status, wait_s=round(retry.wait, 2)))

    def __enter__(self) -> "LiveRun":
        try:
            self._starting.result()
        except BaseException:
            self.sandbox.stop()
            self.checkpointing.close()
            raise
        try:
            if self.hub is not None:
                self._start_mcp()
            if self.aside is not None:
                self.agent.emit(ev.Notice(step=self.agent.state.step,
                                          text=f"a torn last event line was set aside in {self.aside.name}"))
            if self.resumed:
                self.agent.recover()
        except BaseException:  # Ctrl-C or an error here: `with` will not call __exit__, so stop the sandbox
            self.__exit__()
            raise
        return self

    def _start_mcp(self) -> None:
        """Start the MCP servers; a fresh run's log starts with their tools, a resumed run keeps its list."""
        self.hub.start(self.sandbox)
        state = self.agent.state
        builtin = set(self.agent.tools.names)  # and the run's own tools
        if not any(e.type == "run_started" for e in self.run.events.read()[0]):
            start_log(self.run, self.run.read_meta().get("task", ""), self.cfg,
                      [*(t.spec for t in self.own_tools), *self.hub.tools()])
            events, _torn = self.run.events.read()
            for event in events[state.n_events:]:
                state.apply(event)
        else:
            changes = self.hub.adopt([t for t in state.tools if t["function"]["name"] not in builtin])
            if changes:
                self.agent.emit(ev.Notice(step=state.step, text=(
                    "the MCP servers' tools differ from this run's stored tool list, which is kept: "
                    + "; ".join(changes))))
        self.agent.tools.extend(self.hub.as_tools([t for t in state.tools if t["function"]["name"] not in builtin]))
        for warning in self.hub.warnings:
            self.agent.emit(ev.Notice(step=state.step, text=warning))

    def __exit__(self, *exc: object) -> None:
        if self.hub is not None:
            self.hub.close()
        try:
            self.sandbox.stop()  # stopped and kept: the run's next drive starts it again
        finally:
            self.checkpointing.close()
        (self.run.state / "pid").unlink(missing_ok=True)
        self.run.release()  # no-op for a drive that did not hold it

    def go(self, message: str | None = None, source: str = "user") -> str:
        """Drive the run until it ends. `message` reaches the model as the person's words; the run's own
        task given again before its first step is not sent a second time (it is in the log already)."""
        state = self.agent.state
        if message is not None and message.strip() == state.task.strip() and state.step == 0 and not state.history:
            message = None
        return self.agent.run(message, source)


class _Starting:
    """`Sandbox.start()` in a thread, saying when it begins and ends; `result()` waits and raises its error."""

    def __init__(self, sandbox: Any) -> None:  # noqa: ANN401 - a Sandbox of any backend
        self.sandbox = sandbox
        self.error: BaseException | None = None
        progress(f"starting the sandbox ({sandbox.image})")
        self.thread = threading.Thread(target=self._start, name="cairn-sandbox-start", daemon=True)
        self.thread.start()

    def _start(self) -> None:
        started = time.monotonic()
        try:
            self.sandbox.start()
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread, which raises it
            self.error = exc
            return
        progress(f"sandbox started in {time.monotonic() - started:.1f} s")

    def wait(self) -> bool:
        """Wait for the start to end, even through Ctrl-C, so that the container it made can be stopped.
        True if Ctrl-C (or SIGTERM) came meanwhile."""
        interrupted = False
        while self.thread.is_alive():
            try:
                self.thread.join()
            except KeyboardInterrupt:
                interrupted = True
        return interrupted

    def result(self) -> None:
        interrupted = self.wait()
        if self.error is not None:
            raise self.error
        if interrupted:
            raise KeyboardInterrupt


def carried_machine(run: RunDir) -> str | None:
    """The image of the machine an imported run carried (`cairn export --with-machine`), loaded into the
    engine at the run's first drive; None when it has none (or its image was removed since)."""
    from orchestrator.sandbox.docker import machine
    from orchestrator.sandbox.docker.engine import connect
    from orchestrator.store.trust import may_load_machine

    tar = run.state / machine.MACHINE_FILE
    if not may_load_machine(run.read_meta()):
        return None  # an untrusted run's machine is never loaded (store/trust.py)
    if tar.is_file():
        progress(f"loading the machine run {run.id} carried ({tar.stat().st_size / 2**20:.0f} MiB)")
        run.update_meta(machine={"image": machine.load(connect(), tar, run.id)})  # its id: no tag can move it
        tar.unlink()
    tag = (run.read_meta().get("machine") or {}).get("image")
    return tag if tag and machine.present(connect(), tag) else None


def mark_failed(run: RunDir, reason: str) -> None:
    """For a run that could not even start (its sandbox, its MCP servers): the log and run.json say why."""
    run.events.append(ev.StatusChanged(status="failed", reason=reason))
    run.update_meta(status="failed", result=None)


def elapsed(meta: dict[str, Any]) -> float:
    return (meta.get("updated") or time.time()) - meta.get("created", time.time())
