"""Putting a run together: its directory, its sandbox, its model, and the agent that drives them."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator.config import RunConfig, default_model
from orchestrator.errors import EXIT_BUDGET, EXIT_DONE, EXIT_FAILED, EXIT_INTERRUPTED, CairnError, UsageError
from orchestrator.prompts import system_prompt
from orchestrator.store import events as ev
from orchestrator.store.runs import RunDir
from orchestrator.tools.specs import BUILTIN_TOOLS, canonical, tool_names
from orchestrator.status import Status

DEFAULT_WORKDIR = "/workspace"

TEMPLATES_DIR = Path(__file__).resolve().parent.parent / "workspace_templates"

EXIT_CODES = {"done": EXIT_DONE, "budget": EXIT_BUDGET, "interrupted": EXIT_INTERRUPTED}


def exit_code(status: str, error: CairnError | None = None, check: dict[str, Any] | None = None) -> int:
    """CONTRACTS.md: 0 done (and its check passed, when there is one: `check` is the run's last verdict),
    3 budget, 130 interrupted, 4 no sandbox, 1 for every other ending."""
    if error is not None:
        return error.exit_code
    if status == Status.DONE and check is not None and not check.get("passed"):
        return EXIT_FAILED
    return EXIT_CODES.get(status, EXIT_FAILED)


def template_dir(name: str) -> Path:
    path = TEMPLATES_DIR / name
    if not path.is_dir():
        known = ", ".join(sorted(p.name for p in TEMPLATES_DIR.iterdir() if p.is_dir()))
        raise UsageError(f"no workspace template {name!r}; the templates are: {known}")
    return path


def template_settings(name: str) -> dict[str, Any]:
    """The template's own settings, `workspace_templates/<name>/cairn.json` (any RunConfig fields; the
    file is never copied into a workspace). Checked alone, so that a bad one is named as the template's."""
    path = template_dir(name) / "cairn.json"
    if not path.is_file():
        return {}
    try:
        settings = json.loads(path.read_text())
        if not isinstance(settings, dict):
            raise ValueError("not a JSON object")
        settings.pop("template", None)
        RunConfig.model_validate(settings)
    except ValueError as exc:  # JSONDecodeError and pydantic's ValidationError are ValueErrors
        first = str(exc).strip().splitlines()
        raise UsageError(f"the settings of template {name!r} ({path}) are invalid: {' '.join(first[:3])}") from None
    return settings


def settings_file(path: Path, what: str = "--settings") -> dict[str, Any]:
    """A JSON file of run settings (`cairn run --settings FILE`, a batch line's `settings`, an agent
    folder's cairn.json): any RunConfig fields, nested as in run.json, like a template's cairn.json.
    A bad file is a one-line UsageError that names it."""
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{what} {path}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{what} {path}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
    if not isinstance(settings, dict):
        raise UsageError(f"{what} {path}: must be a JSON object of settings, like "
                         '{"model": {"context_window": 32768}}')
    try:
        RunConfig.model_validate(settings)
    except ValidationError as exc:
        raise UsageError(f"{what} {path}: {_invalid(exc)}") from None
    return settings


def agent_folder_settings(config: Path) -> dict[str, Any]:
    """The `cairn.json` beside an agent folder's agent.json (`--config PATH`): cairn's own settings of that
    agent (a check, limits, the sandbox), kept out of agent.json so that the file stays tiny-agents'."""
    folder = config if config.is_dir() else config.parent
    path = folder / "cairn.json"
    return settings_file(path, "the agent folder's settings") if path.is_file() else {}


def _invalid(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    message = "unknown setting (a typo?)" if first["type"] == "extra_forbidden" else first["msg"]
    return f"invalid setting {where}: {message}"


def resolve_config(options: dict[str, Any], template: str | None = None, model_elsewhere: bool = False,
                   layers: list[dict[str, Any]] | tuple[dict[str, Any], ...] = ()) -> RunConfig:
    """Built-in defaults < the template's cairn.json < `layers` (settings files, in order) < `options`,
    the settings the user gave (a nested dict like RunConfig's, holding only what was actually given: a
    None there is not a choice). A settings file may name the template; the template argument wins.

    The model is never a silent default: it comes from the options, the template, `$CAIRN_MODEL`, or
    (`model_elsewhere`) an agent folder that is applied afterwards; else this is a UsageError.
    Raises pydantic's ValidationError for a bad option."""
    name = template or options.get("template") or next(
        (layer["template"] for layer in reversed(layers) if layer.get("template")), None) or "default"
    merged = template_settings(name)
    for layer in layers:
        merged = _merge(merged, layer)
    merged = _merge(merged, _drop_none(options))
    merged["template"] = name
    if not merged.get("model", {}).get("model") and not model_elsewhere:
        merged.setdefault("model", {})["model"] = default_model()
    return RunConfig.model_validate(merged)


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in d.items():
        if isinstance(value, dict):
            value = _drop_none(value)
            if not value:
                continue
        if value is not None:
            out[key] = value
    return out


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def check_workspace_dir(path: Path, runs_dir: Path) -> Path:
    """The folder of `cairn run --workspace DIR`, resolved; a clear error for one cairn cannot work on."""
    if not path.exists():
        raise UsageError(f"--workspace {path}: no such folder")
    if not path.is_dir():
        raise UsageError(f"--workspace {path} is not a folder")
    folder, runs = path.resolve(), runs_dir.expanduser().resolve()
    if folder == runs or runs in folder.parents:
        raise UsageError(f"--workspace {path} is inside the runs directory {runs}; give a folder of your own")
    if folder in runs.parents:
        raise UsageError(f"the runs directory {runs} is inside --workspace {path}: the folder's checkpoints "
                         "would take in cairn's own runs", hint="use another --runs-dir, or another folder")
    return folder


def create_run(runs_dir: Path, task: str, cfg: RunConfig, workspace: Path | None = None,
               from_git: str | None = None, ref: str | None = None) -> RunDir:
    """A new run: its workspace is a copy of the template, or `workspace` (a user's folder, worked on in
    place; the template's files are not added to it), or a clone of the git repository `from_git` at
    `ref` (the template's files that the repository does not have are added), or, with another work
    directory than /workspace (`--workdir`), the image's content at that path (no template files)."""
    if workspace is not None and from_git is not None:
        raise UsageError("--workspace and --from-git do not go together")
    meta: dict[str, Any] = {"task": task, "status": "running", "config": cfg.model_dump(mode="json")}
    template = template_dir(cfg.template)
    if workspace is not None:
        workspace = check_workspace_dir(Path(workspace), runs_dir)
        from orchestrator.sandbox.container import decide_user

        decide_user(cfg.sandbox, workspace, external=True)  # a folder root owns is refused before a run exists
    if from_git is not None:
        meta["source"] = {"git": from_git, "ref": ref}
    from_image = workspace is None and from_git is None and cfg.sandbox.workdir != DEFAULT_WORKDIR
    run = RunDir.create(runs_dir, meta, template=None if workspace or from_git or from_image else template,
                        workspace=workspace)
    try:
        if from_git is not None:
            clone(from_git, ref, run.workspace)
            add_missing_files(template, run.workspace)
        if from_image:
            copy_workdir(run, cfg)
    except BaseException:
        shutil.rmtree(run.root, ignore_errors=True)  # a run that never started leaves nothing behind
        raise
    if not cfg.mcp.servers:  # with MCP servers, the Session starts the log once they listed their tools
        start_log(run, task, cfg)
    return run


def copy_workdir(run: RunDir, cfg: RunConfig) -> None:
    """The image's content at the work directory becomes the run's workspace (sandbox/workdir.py);
    run.json records where it came from."""
    from orchestrator.sandbox.engine import connect
    from orchestrator.sandbox.image import ensure_image
    from orchestrator.sandbox.workdir import copy_out

    image, path = cfg.sandbox.image or ensure_image(), cfg.sandbox.workdir
    done = copy_out(connect(), image, path, run.workspace, name=f"cairn-{run.id}-copy")
    if not done.found:
        _progress(f"{path} is not in the image {image}: the work directory starts empty")
    else:
        owners = "owners kept" if os.getuid() == 0 else "owned by you (only root keeps owners)"
        skipped = f", {done.skipped} device files left out" if done.skipped else ""
        _progress(f"copied {path} out of {image}: {done.files} entries, modes and symlinks kept, {owners}{skipped}")
    run.update_meta(workdir_source={"image": image, "path": path, "found": done.found, "entries": done.files})


def start_log(run: RunDir, task: str, cfg: RunConfig, extra_tools: list[dict[str, Any]] | None = None) -> None:
    """The first events: RunStarted with the run's fixed tool list (built-in, then MCP), and step 0."""
    run.events.append(ev.RunStarted(task=task, system_prompt=system_prompt(cfg.system_prompt_extra, cfg.sandbox.workdir),
                                    tools=canonical(BUILTIN_TOOLS + list(extra_tools or []))))
    initial_checkpoint(run)


def clone(url: str, ref: str | None, dest: Path) -> None:
    """`git clone` on the host into the empty directory `dest`: shallow, of `ref` (a branch or a tag)
    when given; a ref that is not a branch or tag (a commit) needs a whole clone and a checkout.
    The user's own git config applies (credentials, proxies); git never prompts."""
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}

    def git(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True,
                                  stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise CairnError("--from-git needs git on this machine, and there is none") from None

    def failed(done: subprocess.CompletedProcess) -> CairnError:
        lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        return CairnError(f"cannot clone {url}: {lines[-1] if lines else f'git exited with {done.returncode}'}")

    if ref is not None and (not ref or ref.startswith("-")):
        raise UsageError(f"--ref {ref!r} is not a git ref")
    shallow = ["clone", "--quiet", "--depth", "1", *(["--branch", ref] if ref else []), "--", url, str(dest)]
    done = git(*shallow)
    if done.returncode == 0:
        return
    if not ref:
        raise failed(done)
    for leftover in dest.iterdir() if dest.is_dir() else []:  # a failed clone may leave a .git behind
        shutil.rmtree(leftover) if leftover.is_dir() and not leftover.is_symlink() else leftover.unlink()
    done = git("clone", "--quiet", "--no-checkout", "--", url, str(dest))
    if done.returncode != 0:
        raise failed(done)
    done = git("-c", "advice.detachedHead=false", "checkout", "--quiet", "--detach", ref, cwd=dest)
    if done.returncode != 0:
        raise failed(done)


def add_missing_files(template: Path, workspace: Path) -> None:
    """Copy the template's files that the workspace does not have (a cloned repository's files win)."""
    for source in sorted(template.rglob("*")):
        relative = source.relative_to(template)
        target = workspace / relative
        if relative == Path("cairn.json") or os.path.lexists(target):
            continue
        if source.is_dir():
            target.mkdir(parents=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def initial_checkpoint(run: RunDir) -> None:
    """Step 0: the workspace as the run starts, the base the diff of step 1 is taken against."""
    from orchestrator.store.checkpoints import Checkpoints

    done = Checkpoints.of(run).commit(0)
    run.events.append(ev.Checkpoint(step=0, commit=done.commit, skipped=done.skipped))


def load_config(run: RunDir) -> RunConfig:
    """The run's stored config; an imported run's host-reaching settings only once it is trusted."""
    from orchestrator.store.trust import safe_config

    return safe_config(run.read_meta(), run.id)


class Session:
    """A run's live parts. Making one starts its sandbox (in a thread, while the model library loads);
    use it as a context manager, whose entry waits for that start, so the sandbox always stops with the run."""

    def __init__(self, run: RunDir, cfg: RunConfig, display: Any, resumed: bool = False) -> None:
        from orchestrator.sandbox import Sandbox
        from orchestrator.sandbox.image import ensure_image

        run.check_workspace()  # a run on a user's folder that is gone: say so before anything starts
        self.run, self.cfg, self.resumed = run, cfg, resumed
        self.aside = run.events.set_aside_torn_line() if resumed else None
        if resumed and (cfg.mcp.servers or cfg.mcp.api_key_in_file):
            from orchestrator.agent_folder import restore_secrets

            cfg = self.cfg = restore_secrets(cfg)  # never stored: read from the run's agent.json again
        image = cfg.sandbox.image or ensure_image()
        self.hub = None
        if cfg.mcp.servers:
            from orchestrator.tools.mcp import McpHub
            from orchestrator.tools.mcp_packages import image_for

            image = image_for(image, cfg.mcp.servers, progress=_progress)  # uvx/pipx/npx packages, installed
            self.hub = McpHub(cfg.mcp.servers, start_timeout=cfg.mcp.start_timeout,
                              call_timeout=cfg.mcp.call_timeout, reserved=set(tool_names(BUILTIN_TOOLS)),
                              progress=_progress)
        run.cairn_dir.mkdir(exist_ok=True)  # a run made before cairn/ existed gets one now
        carried = carried_machine(run)
        self.sandbox = Sandbox(run.id, run.workspace, cfg.sandbox, image=carried or image, cairn_mount=run.cairn_dir,
                               external=run.external_workspace is not None, keep=True, run_dir=run.root,
                               machine=carried is not None)
        # The container starts (I/O on the engine) while this thread loads the model library (CPU): a
        # start waits for the longer of the two, not for both (bench/startup_bench.py).
        self._starting = _Starting(self.sandbox)
        try:
            self.agent = self._make_agent(display)
        except BaseException:
            self._starting.wait()  # a half-started sandbox is stopped, never left running
            self.sandbox.stop()
            raise

    def _make_agent(self, display: Any) -> Any:  # noqa: ANN401 - loop.Agent, imported with litellm
        from orchestrator.critic import critic_model_config
        from orchestrator.llm.client import LLM
        from orchestrator.loop import Agent

        llm = LLM(self.cfg.model)
        llm.preload()  # litellm, unless the model goes without it (llm/client.py)
        agent = Agent(self.run, self.cfg, self.sandbox, llm, display)
        llm.on_retry = self._retrying
        critic_cfg = critic_model_config(self.cfg)
        if critic_cfg is not None:  # --critic-model: the critic's own client, its retries logged alike
            agent.critic_model = LLM(critic_cfg)
            agent.critic_model.on_retry = self._retrying
        agent.tools.mcp = self.hub
        return agent

    def _retrying(self, retry: Any) -> None:  # noqa: ANN401 - llm.retry.Retry, imported with litellm
        """A model retry goes into the log (show, report) and so onto the display, before its wait."""
        state = self.agent.state
        step = state.step if state.open_calls else state.step + 1  # a sub-agent's request: within a step
        self.agent.emit(ev.Notice(step=step, text=retry.line(), kind="model_retry", endpoint=retry.endpoint,
                                  status=retry.failure.status, wait_s=round(retry.wait, 2)))

    def _lock(self) -> None:
        """Marks the run as live: `ls` and `gc` tell a running run from a crashed one by this pid."""
        pid_file = self.run.state / "pid"
        tmp = pid_file.with_name("pid.tmp")
        tmp.write_text(json.dumps(process_identity(os.getpid())))
        os.replace(tmp, pid_file)

    def __enter__(self) -> "Session":
        try:
            self._starting.result()
        except BaseException:
            self.sandbox.stop()
            raise
        try:
            self._lock()
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
        builtin = set(tool_names(BUILTIN_TOOLS))
        if not any(e.type == "run_started" for e in self.run.events.read()[0]):
            start_log(self.run, self.run.read_meta().get("task", ""), self.cfg, self.hub.tools())
            events, _torn = self.run.events.read()
            for event in events[state.n_events:]:
                state.apply(event)
        else:
            changes = self.hub.adopt([t for t in state.tools if t["function"]["name"] not in builtin])
            if changes:
                self.agent.emit(ev.Notice(step=state.step, text=(
                    "the MCP servers' tools differ from this run's stored tool list, which is kept: "
                    + "; ".join(changes))))
        for warning in self.hub.warnings:
            self.agent.emit(ev.Notice(step=state.step, text=warning))

    def __exit__(self, *exc: object) -> None:
        if self.hub is not None:
            self.hub.close()
        self.sandbox.stop()  # stopped and kept: the run's next session starts it again
        (self.run.state / "pid").unlink(missing_ok=True)

    def go(self, message: str | None = None, source: str = "user") -> str:
        return self.agent.run(message, source)


class _Starting:
    """`Sandbox.start()` in a thread, saying when it begins and ends; `result()` waits and raises its error."""

    def __init__(self, sandbox: Any) -> None:  # noqa: ANN401 - a Sandbox, imported lazily
        self.sandbox = sandbox
        self.error: BaseException | None = None
        _progress(f"starting the sandbox ({sandbox.image})")
        self.thread = threading.Thread(target=self._start, name="cairn-sandbox-start", daemon=True)
        self.thread.start()

    def _start(self) -> None:
        started = time.monotonic()
        try:
            self.sandbox.start()
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread, which raises it
            self.error = exc
            return
        _progress(f"sandbox started in {time.monotonic() - started:.1f} s")

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
    engine at the run's first session; None when it has none (or its image was removed since)."""
    from orchestrator.sandbox import machine
    from orchestrator.sandbox.engine import connect
    from orchestrator.store.trust import may_load_machine

    tar = run.state / machine.MACHINE_FILE
    if not may_load_machine(run.read_meta()):
        return None  # an untrusted run's machine is never loaded (store/trust.py)
    if tar.is_file():
        _progress(f"loading the machine run {run.id} carried ({tar.stat().st_size / 2**20:.0f} MiB)")
        run.update_meta(machine={"image": machine.load(connect(), tar)})
        tar.unlink()
    tag = (run.read_meta().get("machine") or {}).get("image")
    return tag if tag and machine.present(connect(), tag) else None


def _progress(line: str) -> None:
    import sys

    print(line, file=sys.stderr, flush=True)


def mark_failed(run: RunDir, reason: str) -> None:
    """For a run that could not even start (its sandbox, its MCP servers): the log and run.json say why."""
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
