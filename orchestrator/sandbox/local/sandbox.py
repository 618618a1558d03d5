"""A sandbox over a directory of this machine: the toolbox's own op code, run in this process, without Docker.

`LocalSandbox` answers the ops of PROTOCOL.md by handing each request to the real toolbox (the package
`orchestrator.sandbox_image.toolbox`, the same code the container runs): the same path rules, the same
persistent bash, the same output capping and saved files, the same journal of tool calls. Only where
things are differs: the work directory (`/workspace`, or the config's `workdir`) is `workspace` on
this machine and `/cairn` is `cairn`, both ways (a result names `/cairn/obs/...`, a request may too).

It is NOT a sandbox in the sense of a wall. Commands run on this machine, as you, with a small
environment (PATH, HOME, LANG: no API keys). File ops (`read`, `write`, `edit`, `list`) are confined
to the two directories, as `--lockdown` confines them in a container; a shell command is not confined
at all, and `cd /workspace` means this machine's /workspace. Use it for tests and for models you
trust; a model you do not trust belongs in the Docker sandbox.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from orchestrator.config import SandboxConfig
from orchestrator.errors import SandboxError
from orchestrator.ports import ExecStream
from orchestrator.sandbox.calls import OpGate, Recorded, op_result, with_defaults
from orchestrator.sandbox.toolbox_files import CAIRN_DIR
from orchestrator.sandbox_image.toolbox.channel import Host
from orchestrator.sandbox_image.toolbox.errors import ToolError as ToolboxError
from orchestrator.sandbox_image.toolbox.server import Toolbox
from orchestrator.sandbox_image.toolbox.workspace import Workspace, under


class HostPaths(Workspace):
    """The toolbox's paths with /cairn mapped to its directory on this machine, and every file op
    confined to the work directory and /cairn."""

    def resolve(self, path: object) -> str:
        if isinstance(path, str) and (path == CAIRN_DIR or path.startswith(CAIRN_DIR + "/")):
            path = self.cairn + path[len(CAIRN_DIR):]
        real = super().resolve(path)
        if not (under(real, self.root) or under(real, self.cairn)):
            raise ToolboxError(f"{path}: outside {self.name} (it resolves to {real}); the local sandbox "
                               f"reaches only {self.name} and {CAIRN_DIR}")
        return real

    def rel(self, real: str) -> str:
        if under(real, self.cairn) and not under(real, self.root):
            return CAIRN_DIR + real[len(self.cairn):]
        return super().rel(real)


class LocalSandbox:
    """The sandbox port over `workspace` (seen as the config's work directory) and `cairn` (seen as
    /cairn); both default to new temporary directories, removed by `stop()`. `start()` is optional:
    the first call starts it."""

    reused = False  # every start is fresh: nothing outside the workspace outlives it
    replaced: str | None = None
    image = "local"

    def __init__(self, workspace: str | Path | None = None, cairn: str | Path | None = None,
                 cfg: SandboxConfig | None = None) -> None:
        self.cfg = cfg or SandboxConfig()
        self._temporary: list[Path] = []
        # The folder of one's own it works on, if one was given: orchestrator.Agent makes it the run's workspace.
        self.folder = Path(workspace).resolve() if workspace is not None else None
        self.workspace = self._directory(workspace)
        self.cairn = self._directory(cairn)
        self._toolbox: Toolbox | None = None
        self._ids = itertools.count(1)
        self._gate, self._recorded = OpGate(), Recorded()
        self._running: set[int] = set()  # the ids of the ops that run now

    def _directory(self, path: str | Path | None) -> Path:
        if path is None:
            made = Path(tempfile.mkdtemp(prefix="cairn-local-"))
            self._temporary.append(made)
            return made
        Path(path).mkdir(parents=True, exist_ok=True)
        return Path(path).resolve()

    def attach(self, workspace: Path, cairn: Path) -> None:
        """Use a run's directories (its workspace, its cairn/) instead of the ones this sandbox was made
        with, so its journal and saved outputs are where the run reads them. orchestrator.Agent calls it;
        a started sandbox on other directories is started afresh (a new shell) on these."""
        workspace, cairn = Path(workspace).resolve(), Path(cairn).resolve()
        if (workspace, cairn) == (self.workspace, self.cairn):
            return
        self.stop()
        self.workspace, self.cairn = workspace, cairn
        self.cairn.mkdir(parents=True, exist_ok=True)

    @property
    def network_enabled(self) -> bool:
        return self.cfg.network == "bridge"

    def start(self) -> None:
        if self._toolbox is not None:
            return
        # The host is this process, which never goes away: the toolbox watches a pipe nobody writes to or
        # closes instead of its stdin.
        self._never_readable, self._keep_open = os.pipe()
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.workspace), "LANG": "C.UTF-8"}
        self._toolbox = Toolbox(HostPaths(str(self.workspace), self.cfg.workdir, str(self.cairn)),
                                host=Host(self._never_readable), env=env, watch_limits=False)

    def call(self, op: str, journal_key: str | None = None, **args: Any) -> dict[str, Any]:
        """Run one toolbox op; its result, or ToolError with the toolbox's one-line error. Threads may
        call at once: read-only ops then run side by side, others one at a time (as in a container)."""
        with self._gate.enter(op):
            self.start()
            args, _timeout = with_defaults(self.cfg, op, args)  # the op's own timeout bounds it here
            request = {"id": next(self._ids), "op": op, "args": args}
            if journal_key:
                request["call"] = journal_key
            recorded = self._recorded.take()
            if recorded:
                request["recorded"] = recorded
            self._running.add(request["id"])
            try:
                return op_result(self._toolbox.handle(json.dumps(request).encode()))
            finally:
                self._running.discard(request["id"])

    def recorded(self, journal_key: str) -> None:
        """The run has logged this call's outcome: the next op tells the journal to drop its record."""
        self._recorded.add(journal_key)

    def interrupt(self) -> bool:
        """Cut the ops that run now (in other threads) short, as the host of a toolbox in a container does:
        an interrupt line on the toolbox's channel."""
        running, toolbox = sorted(self._running), self._toolbox
        if not running or toolbox is None:
            return False
        os.write(self._keep_open, b"".join(json.dumps({"op": "interrupt", "id": rid}).encode() + b"\n"
                                           for rid in running))
        return True

    def give_back_files(self) -> list[str]:
        return []  # everything here was made by this machine's user already

    @property
    def instance(self) -> str | None:
        return "local" if self._toolbox is not None else None

    def open_exec(self, argv: list[str], env: dict[str, str] | None = None, workdir: str | None = None) -> ExecStream:
        raise SandboxError("MCP servers over stdio run in the Docker sandbox; the local sandbox has none")

    def has_command(self, name: str) -> bool | None:
        """Whether `name` is a command here: the local sandbox's commands are this machine's."""
        return shutil.which(name, path=os.environ.get("PATH", "/usr/bin:/bin")) is not None

    def disk_usage(self) -> int | None:
        return None  # no container layer: the workspace is measured on its own

    def stop(self) -> None:
        """Kill the shell, its sessions and what they started; remove the directories this sandbox made."""
        toolbox, self._toolbox = self._toolbox, None
        if toolbox is not None:
            recorded = self._recorded.take()  # the calls logged since the last op: their records go too
            if recorded:
                toolbox.handle(json.dumps({"id": 0, "op": "ping", "recorded": recorded}).encode())
            toolbox.close()
            os.close(self._never_readable)
            os.close(self._keep_open)
        for path in self._temporary:
            shutil.rmtree(path, ignore_errors=True)
        self._temporary = []

    def __enter__(self) -> LocalSandbox:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
