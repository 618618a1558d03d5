"""cairn's `Sandbox` port over a Harbor environment: the toolbox runs in the task's own container,
reached only through Harbor's environment interface (`exec`, `upload_file`, `download_dir`), so it works
on every environment Harbor has (docker, daytona, modal, e2b, gke...). Nothing here speaks to Docker.

The toolbox is started once and kept alive by a relay (relay.py); each op is one `exec` of the relay's
client: one round trip, and the shell's state, terminal sessions and the call journal persist. An image
without a Python 3.9+ gets one carried in: this host's own Python with the libraries it needs and its
loader (sandbox/carried.py's fill script, run here), uploaded once per trial to /opt/cairn-python. The
toolbox goes in as one zipapp (sandbox/toolbox_files.py), run as the Docker sandbox runs its folder.

The run's workspace/ on the host follows the work directory when it is small (under WORKSPACE_LIMIT):
it is brought back before each checkpoint, so `cairn diff` shows what each step changed there. A bigger
one is left where it is; run.json says so.

Harbor's environment is asyncio; cairn's loop runs in a thread of its own. Each op is handed to the
event loop (`run_coroutine_threadsafe`) and waited for in the loop's thread; `cancel()` cancels the ops
in flight, so a trial's timeout never waits on a long command.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import json
import os
import platform
import shlex
import shutil
import sys
import tarfile
import tempfile
import threading
from pathlib import Path
from typing import Any, Coroutine

from orchestrator.config import SandboxConfig
from orchestrator.errors import SandboxError, ToolError
from orchestrator.sandbox import carried, toolbox_files
from orchestrator.sandbox.calls import Recorded, op_result, with_defaults
from orchestrator.sandbox.carried import carried_python
from orchestrator.sandbox.toolbox_files import CAIRN_DIR

AGENT_DIR = toolbox_files.TOOLBOX_IN_SANDBOX  # the toolbox and its relay
TOOLBOX = f"{AGENT_DIR}/toolbox.pyz"
RELAY_SOURCE = Path(__file__).with_name("relay.py")
SOCKET = "/tmp/cairn-toolbox.sock"
MAX_ARGUMENT = 96 * 1024  # a request longer than this goes as a file (Linux caps one argument at 128 KiB)
SETUP_SECONDS = 600  # uploading a carried Python to a remote environment takes a while
STOP_SECONDS = 30
WORKSPACE_LIMIT = (20 * 2**20, 2000)  # bytes and files of a work directory brought back at each checkpoint


class HarborSandbox:
    """The toolbox in a Harbor environment. `loop`: the event loop that owns `environment`; every
    method but `cancel` is called from another thread (cairn's loop)."""

    def __init__(self, environment: Any, loop: asyncio.AbstractEventLoop, cfg: SandboxConfig,  # noqa: ANN401
                 cairn_dir: Path) -> None:
        self.environment, self.loop, self.cfg = environment, loop, cfg
        self.cairn_dir = cairn_dir  # the run's <run>/cairn/ on the host: /cairn is brought back there on stop
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
        self.workspace: Path | None = None  # the run's workspace/, when it follows the work directory

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
            self._exec(f"chmod 755 {AGENT_DIR} && chmod 644 {TOOLBOX} {AGENT_DIR}/relay.py",
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
        """End the toolbox and bring /cairn (saved outputs, the journal) back to the run's cairn/."""
        if not self._started:
            return
        self._started = 0
        try:  # even after a cancellation: these two are quick, and the run's files need the second
            # The relay's end closes the toolbox's stdin: the toolbox ends with it.
            self._exec(f"kill $(cat {SOCKET}.pid) 2>/dev/null; true", STOP_SECONDS, force=True)
            self.cairn_dir.mkdir(parents=True, exist_ok=True)
            self._await(self.environment.download_dir(CAIRN_DIR, self.cairn_dir), SETUP_SECONDS, force=True)
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
        encoded = base64.b64encode(line).decode()
        client = [*self.python, f"{AGENT_DIR}/relay.py", "call", SOCKET]
        if len(encoded) <= MAX_ARGUMENT:
            command = shlex.join([*client, encoded])
        else:
            with tempfile.NamedTemporaryFile(prefix="cairn-request-") as file:
                file.write(line)
                file.flush()
                target = f"/tmp/{Path(file.name).name}"
                self._await(self.environment.upload_file(file.name, target), timeout)
            command = shlex.join([*client, "--file", target])
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

    def has_command(self, name: str) -> bool | None:
        try:
            return self._exec(f"command -v {shlex.quote(name)} >/dev/null", 30).return_code == 0
        except SandboxError:
            return None

    def follow_workspace(self, workspace: Path) -> str | None:
        """Make `workspace` (the run's, on the host) a copy of the work directory, kept up to date before
        each checkpoint, if the work directory is small; else return why it is not followed."""
        workdir = shlex.quote(self.cfg.workdir)
        counted = self._exec(f"cd {workdir} && find . -xdev -type f | wc -l && du -skx . | cut -f1", 120)
        numbers = (counted.stdout or "").split()
        if counted.return_code != 0 or len(numbers) != 2 or not all(n.isdigit() for n in numbers):
            return f"cannot measure {self.cfg.workdir}: {_last_line(counted.stderr) or 'no answer'}"
        files, size = int(numbers[0]), int(numbers[1]) * 1024
        if size > WORKSPACE_LIMIT[0] or files > WORKSPACE_LIMIT[1]:
            return (f"{self.cfg.workdir} holds {files} files, {size / 2**20:.0f} MiB: more than is brought back "
                    f"at each step ({WORKSPACE_LIMIT[1]} files, {WORKSPACE_LIMIT[0] // 2**20} MiB)")
        self.workspace = workspace
        self._bring_back_workspace()
        return None

    def give_back_files(self) -> list[str]:
        """Before a checkpoint: the work directory comes back to the run's workspace/ (when it follows it)."""
        if self.workspace is not None and self._started and not self._cancelled:
            self._bring_back_workspace()
        return []

    def _bring_back_workspace(self) -> None:
        with tempfile.TemporaryDirectory(prefix="cairn-harbor-workdir-") as copy:
            self._await(self.environment.download_dir(self.cfg.workdir, copy), SETUP_SECONDS)
            _mirror(Path(copy), self.workspace)

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


def _mirror(source: Path, target: Path) -> None:
    """Make `target` hold what `source` holds: regular files, folders and symbolic links (as links, never
    followed); anything else (a FIFO, a device) is left out."""
    for entry in list(target.iterdir()):
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    for folder, dirs, files in os.walk(source):
        here = target / Path(folder).relative_to(source)
        for name in dirs + files:
            path, copy = Path(folder) / name, here / name
            if path.is_symlink():
                copy.symlink_to(os.readlink(path))
            elif path.is_dir():
                copy.mkdir()
            elif path.is_file():
                shutil.copy2(path, copy)
        dirs[:] = [name for name in dirs if not (Path(folder) / name).is_symlink()]


def _last_line(text: str | None) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""
