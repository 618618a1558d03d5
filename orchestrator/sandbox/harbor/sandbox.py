"""cairn's `Sandbox` port over a Harbor environment: the toolbox runs in the task's own container,
reached only through Harbor's environment interface (`exec`, `upload_file`, `download_dir`), so it works
on every environment Harbor has (docker, daytona, modal, e2b, gke...). Nothing here speaks to Docker.

The toolbox is started once and kept alive by a relay (relay.py); each op is one `exec` of the relay's
client: one round trip, and the shell's state, terminal sessions and the call journal persist. An image
without a Python 3.9+ gets one carried in: this host's own Python with the libraries it needs and its
loader (sandbox/carried.py's fill script, run here), uploaded once per trial to /opt/cairn-python. The
toolbox goes in as one zipapp (sandbox/toolbox_files.py), run as the Docker sandbox runs its folder.

The run's workspace/ on the host follows the work directory while it is small (WORKSPACE_LIMIT, not
counting the dependency and cache folders scan.py names): before each checkpoint one `exec` of scan.py
lists it (sizes and change times) and carries what changed, and follow.py applies that, so `cairn diff`
shows what each step changed there. A work directory bigger at the start is never followed; one that
grows past the limit stops being followed there, and the run is told once (`on_unfollow`).

Harbor's environment is asyncio; cairn's loop runs in a thread of its own. Each op is handed to the
event loop (`run_coroutine_threadsafe`) and waited for in the loop's thread; `cancel()` cancels the ops
in flight, so a trial's timeout never waits on a long command.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import json
import platform
import shlex
import sys
import tarfile
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Coroutine

from orchestrator.config import SandboxConfig
from orchestrator.errors import SandboxError, ToolError
from orchestrator.sandbox import carried, toolbox_files
from orchestrator.sandbox.calls import Recorded, op_result, with_defaults
from orchestrator.sandbox.carried import carried_python
from orchestrator.sandbox.harbor.follow import WorkspaceCopy
from orchestrator.sandbox.toolbox_files import CAIRN_DIR

AGENT_DIR = toolbox_files.TOOLBOX_IN_SANDBOX  # the toolbox and its relay
TOOLBOX = f"{AGENT_DIR}/toolbox.pyz"
RELAY_SOURCE = Path(__file__).with_name("relay.py")
SCAN_SOURCE = Path(__file__).with_name("scan.py")
SCAN = f"{AGENT_DIR}/scan.py"
SOCKET = "/tmp/cairn-toolbox.sock"
MAX_ARGUMENT = 96 * 1024  # a request longer than this goes as a file (Linux caps one argument at 128 KiB)
SETUP_SECONDS = 600  # uploading a carried Python to a remote environment takes a while
STOP_SECONDS = 30
WORKSPACE_LIMIT = (20 * 2**20, 2000)  # bytes and files of a work directory brought back at each checkpoint
SCAN_SECONDS = 120
# Lowers every process still at the oom_score_adj commands run at (PROTOCOL.md): run as root when the
# toolbox stops, it reaches what a command left under another user, before the task's tests run.
LOWER_OOM_SCORES = ('for f in /proc/[0-9]*/oom_score_adj; do read a <"$f" && [ "$a" = 1000 ] && echo 0 >"$f"; '
                    'done 2>/dev/null; true')


class HarborSandbox:
    """The toolbox in a Harbor environment. `loop`: the event loop that owns `environment`; every
    method but `cancel` is called from another thread (cairn's loop)."""

    def __init__(self, environment: Any, loop: asyncio.AbstractEventLoop, cfg: SandboxConfig,  # noqa: ANN401
                 cairn_dir: Path, keep_dependencies: bool = False) -> None:
        """`keep_dependencies`: follow the folders scan.NOT_FOLLOWED names (and caches) too."""
        self.environment, self.loop, self.cfg = environment, loop, cfg
        self.cairn_dir = cairn_dir  # the run's <run>/cairn/ on the host: /cairn is brought back there on stop
        self.keep_dependencies = keep_dependencies
        self.image = f"harbor:{type(environment).__name__}"
        self.reused = False
        self.replaced: str | None = None
        self.python: list[str] = []
        self._started = 0  # how many toolboxes this sandbox started: names the instance
        self._died: str | None = None
        self._pending: set[concurrent.futures.Future] = set()
        self._lock = threading.Lock()
        self._one_at_a_time, self._recorded = threading.Lock(), Recorded()
        self._cancelled = False
        self.copy: WorkspaceCopy | None = None  # the run's workspace/, while it follows the work directory
        # Told once why the work directory stops being followed (the Harbor agent: a Notice in the run's log).
        self.on_unfollow: Callable[[str], None] = lambda note: None

    @property
    def network_enabled(self) -> bool:
        return self.cfg.network == "bridge"

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    @property
    def instance(self) -> str | None:
        return f"harbor-toolbox-{self._started}" if self._started else None

    # -- the lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Put the toolbox into the environment (and a Python, if it has none) and start it; a second
        call while it runs does nothing."""
        if self._started and self._died is None:
            return
        if not self.python:
            self.python = self._find_python()
            self._exec(f"mkdir -p {AGENT_DIR} {CAIRN_DIR} && chmod 777 {CAIRN_DIR}", SETUP_SECONDS, user="root")
            with tempfile.TemporaryDirectory(prefix="cairn-toolbox-") as folder:
                program = Path(folder) / "toolbox.pyz"
                program.write_bytes(toolbox_files.zipapp())
                self._await(self.environment.upload_file(program, TOOLBOX), SETUP_SECONDS)
            self._await(self.environment.upload_file(RELAY_SOURCE, f"{AGENT_DIR}/relay.py"), SETUP_SECONDS)
            self._await(self.environment.upload_file(SCAN_SOURCE, SCAN), SETUP_SECONDS)
            self._exec(f"chmod 755 {AGENT_DIR} && chmod 644 {TOOLBOX} {AGENT_DIR}/relay.py {SCAN}",
                       SETUP_SECONDS, user="root")
        toolbox = [*self.python, *toolbox_files.arguments(self.cfg.workdir, self.cfg.lockdown, TOOLBOX)]
        serve = [*self.python, f"{AGENT_DIR}/relay.py", "serve", SOCKET, "--", *toolbox]
        # setsid and nohup: the relay outlives the exec that starts it.
        log = f"{CAIRN_DIR}/toolbox.log"
        started = self._exec(f"rm -f {SOCKET} {SOCKET}.ready; (setsid nohup {shlex.join(serve)} >{log} 2>&1 &) ; "
                             f"for i in $(seq 1 {int(self.cfg.start_timeout * 10)}); do "
                             f"[ -S {SOCKET} ] && [ -f {SOCKET}.ready ] && cat {SOCKET}.ready && exit 0; sleep 0.1; done; "
                             f"tail -n 5 {log} >&2; exit 1", self.cfg.start_timeout + 30)
        if started.return_code != 0:
            raise SandboxError(f"the toolbox did not start in the Harbor environment: "
                               f"{_last_line(started.stderr) or 'no output'}")
        self._started += 1
        self._died = None

    def stop(self) -> None:
        """End the toolbox, leave nothing the agent started first in line for the OOM killer during the
        task's tests, and bring /cairn (saved outputs, the journal) back to the run's cairn/."""
        if not self._started:
            return
        self._started = 0
        try:  # even after a cancellation: these are quick, and the run's files need the second
            # The relay's end closes the toolbox's stdin: the toolbox ends with it.
            self._exec(f"kill $(cat {SOCKET}.pid) 2>/dev/null; true", STOP_SECONDS, force=True)
            self.cairn_dir.mkdir(parents=True, exist_ok=True)
            self._await(self.environment.download_dir(CAIRN_DIR, self.cairn_dir), SETUP_SECONDS, force=True)
            self._exec(LOWER_OOM_SCORES, STOP_SECONDS, user="root", force=True)
        except (SandboxError, OSError):
            pass  # an environment that is gone has no toolbox left, and nothing to bring back

    def cancel(self) -> None:
        """Called from the event loop's side (Harbor's timeout or cancellation): the ops in flight end
        now, with an error the loop records before it stops."""
        self._cancelled = True
        with self._lock:
            pending = list(self._pending)
        for future in pending:
            future.cancel()

    # -- the ops ---------------------------------------------------------------------------------

    def call(self, op: str, journal_key: str | None = None, **args: Any) -> dict[str, Any]:  # noqa: ANN401
        """One toolbox op; ToolError when it fails (as the Docker sandbox's). The relay hands the toolbox
        one request at a time, so calls from several threads (sub-agents side by side) take turns."""
        with self._one_at_a_time:
            return self._call(op, journal_key, args)

    def recorded(self, journal_key: str) -> None:
        """The run has logged this call's outcome: the next op tells the journal to drop its record."""
        self._recorded.add(journal_key)

    def _call(self, op: str, journal_key: str | None, args: dict[str, Any]) -> dict[str, Any]:
        if self._cancelled:
            raise ToolError("the trial was cancelled: cairn stops after this step")
        restarted = None
        if not self._started or self._died:
            reason = self._died
            self.start()
            restarted = reason and f"{reason}; the toolbox was started again (shell state was lost)"
        args, timeout = with_defaults(self.cfg, op, dict(args))
        recorded = self._recorded.take()
        request = {"id": 1, "op": op, "args": args, **({"call": journal_key} if journal_key else {}),
                   **({"recorded": recorded} if recorded else {})}
        line = json.dumps(request, ensure_ascii=False).encode("utf-8", "surrogateescape")
        client = [*self.python, f"{AGENT_DIR}/relay.py", "call", SOCKET]
        command = shlex.join([*client, *self._argument(line, timeout)])
        try:
            done = self._exec(command, timeout)
        except SandboxError as exc:
            self._recorded.give_back(recorded)
            self._died = exc.message
            raise ToolError(f"the sandbox did not answer this call: {exc.message}; the next call starts the "
                            "toolbox again") from exc
        if done.return_code != 0 or not (done.stdout or "").strip():
            self._died = _last_line(done.stderr) or f"the toolbox's relay exited with {done.return_code}"
            raise ToolError(f"the sandbox died during this call: {self._died}; the next call starts it again")
        return op_result(json.loads((done.stdout or "").strip().splitlines()[-1]), restarted)

    def interrupt(self) -> bool:
        """Not here: Harbor drives a trial, no person stops it, and its own timeout cancels (`cancel`)."""
        return False

    def has_command(self, name: str) -> bool | None:
        try:
            return self._exec(f"command -v {shlex.quote(name)} >/dev/null", 30).return_code == 0
        except SandboxError:
            return None

    def follow_workspace(self, workspace: Path) -> str | None:
        """Make `workspace` (the run's, on the host) a copy of the work directory, kept up to date before
        each checkpoint, if the work directory is small; else return why it is not followed."""
        scanned = self._scan(since=0)
        if "error" in scanned:
            return f"cannot read {self.cfg.workdir}: {scanned['error']}"
        if scanned["over"]:
            return f"{self.cfg.workdir} holds {_amount(scanned)}, {self._limit()}: it stays in the container"
        self.copy = WorkspaceCopy(workspace)
        self._bring_back(scanned)
        return None

    def give_back_files(self) -> list[str]:
        """Before a checkpoint: what changed in the work directory comes back to the run's workspace/
        (while it follows it)."""
        if self.copy is None or not self._started or self._cancelled:
            return []
        scanned = self._scan(since=self.copy.since)
        if self._cancelled:
            return []  # the scan was cut off: the run stops after this step anyway
        if "error" in scanned:
            self._unfollow(f"cairn could not read {self.cfg.workdir} ({scanned['error']})")
        elif scanned["over"]:
            self._unfollow(f"{self.cfg.workdir} grew to {_amount(scanned)}, {self._limit()}")
        else:
            self._bring_back(scanned)
        return []

    def _bring_back(self, scanned: dict[str, Any]) -> None:
        missing = self.copy.update(scanned)
        if not missing:
            return  # the usual step: the listing carried every change
        names = json.dumps(missing).encode()  # ensure_ascii: names that are not UTF-8 go as escapes
        packed = self._scan_exec(["pack", self.cfg.workdir, str(WORKSPACE_LIMIT[0]), *self._argument(names, SCAN_SECONDS)])
        if packed.get("over"):
            self._unfollow(f"{self.cfg.workdir} grew to {self._limit()}")
        elif "error" not in packed:
            self.copy.fill(packed)

    def _unfollow(self, why: str) -> None:
        self.copy = None
        self.on_unfollow(f"{why}: the run's workspace/ stops following it here and keeps it as it was at the "
                         "last checkpoint; only the container has what comes after")

    def _limit(self) -> str:
        left = "" if self.keep_dependencies else ", not counting dependency and cache folders such as .venv, node_modules and .git"
        return f"more than cairn brings back at each step ({WORKSPACE_LIMIT[1]} files or {WORKSPACE_LIMIT[0] // 2**20} MiB{left})"

    def _scan(self, since: int) -> dict[str, Any]:
        """scan.py's listing of the work directory, with the contents of what changed from `since` on."""
        scanned = self._scan_exec(["list", self.cfg.workdir, str(since), str(WORKSPACE_LIMIT[0]),
                                   str(WORKSPACE_LIMIT[1]), *(["--keep-dependencies"] if self.keep_dependencies else [])])
        if "error" in scanned or scanned.get("over") or isinstance(scanned.get("clock"), int):
            return scanned
        return {"error": "scan.py's listing has no clock"}

    def _scan_exec(self, args: list[str]) -> dict[str, Any]:
        """One exec of scan.py, as root (it reads what the agent's user may not); {"error": why} when it
        gives no answer. stderr goes nowhere: Harbor's docker environment mixes it into stdout."""
        try:
            # -I -S: no site-packages and no PYTHON* variables of the task's reach a walk that runs as root
            python = self.python if "-I" in self.python else [*self.python, "-I", "-S"]
            done = self._exec(shlex.join([*python, SCAN, *args]) + " 2>/dev/null", SCAN_SECONDS, user="root")
        except SandboxError as exc:
            return {"error": exc.message}
        lines = (done.stdout or "").strip().splitlines()
        try:
            answer = json.loads(lines[-1]) if lines else None
        except ValueError:
            answer = None
        if not isinstance(answer, dict) or not ("error" in answer or "over" in answer):
            return {"error": f"scan.py exited with {done.return_code} and no answer"}
        return answer

    def _argument(self, data: bytes, timeout: float) -> list[str]:
        """`data` as the last arguments of a command: base64 when short enough for one argument, else
        `--file PATH` of a file uploaded for it (Linux caps one argument at 128 KiB)."""
        encoded = base64.b64encode(data).decode()
        if len(encoded) <= MAX_ARGUMENT:
            return [encoded]
        with tempfile.NamedTemporaryFile(prefix="cairn-request-") as file:
            file.write(data)
            file.flush()
            target = f"/tmp/{Path(file.name).name}"
            self._await(self.environment.upload_file(file.name, target), timeout)
        return ["--file", target]

    def disk_usage(self) -> int | None:
        return None  # Harbor's environments do not say

    def open_exec(self, argv: list[str], env: dict[str, str] | None = None, workdir: str | None = None) -> Any:  # noqa: ANN401
        raise SandboxError("MCP servers over stdio are not available in a Harbor environment yet")

    # -- Python in the environment ---------------------------------------------------------------

    def _find_python(self) -> list[str]:
        """The image's python3 when it is 3.9 or newer, else a Python carried in from this host."""
        probe = self._exec("python3 -c 'import sys; sys.exit(sys.version_info < (3, 9))' 2>/dev/null", 60)
        if probe.return_code == 0:
            return ["python3"]
        machine = (self._exec("uname -m", 60).stdout or "").strip()
        if sys.platform != "linux" or machine != platform.machine():
            raise SandboxError(f"the task's image has no Python 3.9+ for cairn's toolbox, and this host "
                               f"({sys.platform}/{platform.machine()}) cannot carry its own into a "
                               f"linux/{machine or 'unknown'} environment")
        tar = carried_python()
        self._exec(f"mkdir -p {carried.MOUNT}", SETUP_SECONDS, user="root")
        self._await(self.environment.upload_file(tar, "/tmp/cairn-python.tar.gz"), SETUP_SECONDS)
        unpacked = self._exec(f"tar -xzf /tmp/cairn-python.tar.gz -C {carried.MOUNT} && "
                              f"rm -f /tmp/cairn-python.tar.gz && chmod -R a+rX {carried.MOUNT}",
                              SETUP_SECONDS, user="root")
        if unpacked.return_code != 0:  # no tar in the image: the files one by one
            with tempfile.TemporaryDirectory(prefix="cairn-python-") as folder:
                with tarfile.open(tar) as archive:
                    archive.extractall(folder)
                self._await(self.environment.upload_dir(Path(folder) / "python", carried.HOME), SETUP_SECONDS)
        return carried.argv("")[:-1]

    # -- the bridge to Harbor's event loop --------------------------------------------------------

    def _exec(self, command: str, timeout: float, user: str | None = None, force: bool = False) -> Any:  # noqa: ANN401
        """One `exec` in the environment (Harbor adds its own variables; cairn passes none: no key
        of the host's ever goes this way)."""
        return self._await(self.environment.exec(command, timeout_sec=int(timeout) + 1, user=user), timeout + 30,
                           force)

    def _await(self, coroutine: Coroutine, timeout: float, force: bool = False) -> Any:  # noqa: ANN401
        """The coroutine's result, run on Harbor's event loop; after a cancellation only a `force`d one runs."""
        if self._cancelled and not force:
            coroutine.close()
            raise SandboxError("the trial was cancelled")
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        with self._lock:
            self._pending.add(future)
        try:
            return future.result(timeout)
        except concurrent.futures.CancelledError:
            raise SandboxError("the trial was cancelled") from None
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise SandboxError(f"no answer from the Harbor environment in {timeout:.0f} s") from None
        except Exception as exc:  # noqa: BLE001 - an environment's own errors: one line for the model
            raise SandboxError(f"the Harbor environment failed: {_last_line(str(exc)) or type(exc).__name__}") from exc
        finally:
            with self._lock:
                self._pending.discard(future)


def _amount(scanned: dict[str, Any]) -> str:
    """What a listing over the limit counted before it stopped: a lower bound."""
    return f"at least {scanned.get('files', 0)} files and {int(scanned.get('bytes', 0)) / 2**20:.0f} MiB"


def _last_line(text: str | None) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""
