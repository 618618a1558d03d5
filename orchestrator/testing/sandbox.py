"""A sandbox over a directory of this machine: the toolbox's own op code, run in this process, without Docker.

`LocalSandbox` answers the ops of sandbox_image/PROTOCOL.md by handing each request to the real
toolbox (`sandbox_image/toolbox.py`, loaded as a module, not copied): the same path rules, the same
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

import functools
import importlib.util
import itertools
import json
import os
import shutil
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

from orchestrator.config import SandboxConfig
from orchestrator.sandbox import ToolError

TOOLBOX_SOURCE = Path(__file__).resolve().parents[1] / "sandbox_image" / "toolbox.py"  # package data
CAIRN = "/cairn"


@functools.cache
def toolbox_module() -> ModuleType:
    """sandbox_image/toolbox.py as a module of its own (it is a script in the image, not a package module).

    The toolbox watches its stdin for the host going away (then it kills the running command); here the
    host is this process, which never goes, so it watches a pipe nobody writes to or closes instead."""
    spec = importlib.util.spec_from_file_location("cairn_toolbox", TOOLBOX_SOURCE)
    if spec is None or spec.loader is None or not TOOLBOX_SOURCE.is_file():
        raise FileNotFoundError(f"the toolbox is not at {TOOLBOX_SOURCE}: cairn's sandbox_image/ is missing")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    never_readable, keep_open = os.pipe()
    module.HOST = never_readable
    module._keep_open = keep_open  # the write end lives as long as the module, so the read end never ends
    return module


def _paths_class(toolbox: ModuleType) -> type:
    """The toolbox's Workspace with /cairn mapped to its directory on this machine, and every file op
    confined to the work directory and /cairn."""

    class HostPaths(toolbox.Workspace):  # type: ignore[name-defined,misc]
        def resolve(self, path: object) -> str:
            if isinstance(path, str) and (path == CAIRN or path.startswith(CAIRN + "/")):
                path = self.cairn + path[len(CAIRN):]
            real = super().resolve(path)
            if not (toolbox._under(real, self.root) or toolbox._under(real, self.cairn)):
                raise toolbox.ToolError(f"{path}: outside {self.name} (it resolves to {real}); the local sandbox "
                                        f"reaches only {self.name} and {CAIRN}")
            return real

        def rel(self, real: str) -> str:
            if toolbox._under(real, self.cairn) and not toolbox._under(real, self.root):
                return CAIRN + real[len(self.cairn):]
            return super().rel(real)

    return HostPaths


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
        self.call_key: str | None = None  # set by the loop: the next request is journaled under it
        self._toolbox: Any = None
        self._ids = itertools.count(1)

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
        module = toolbox_module()
        toolbox = module.Toolbox(str(self.workspace), self.cfg.workdir, str(self.cairn), lockdown=False)
        toolbox.ws = _paths_class(module)(str(self.workspace), self.cfg.workdir, str(self.cairn))
        toolbox.shell.limits.pids_max = None  # the process limit is the container's; here there is none to watch
        toolbox.shell.env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.workspace),
                             "LANG": "C.UTF-8", "TERM": "dumb", "PAGER": "cat", "GIT_PAGER": "cat"}
        toolbox.shell.restart()  # with that environment, not this process's (its keys stay out)
        toolbox.fresh_env = {key: value for key, value in toolbox.shell.env.items()
                             if key not in ("TERM", "PAGER", "GIT_PAGER")}  # a check's fresh shell, likewise
        self._toolbox = toolbox

    def call(self, op: str, **args: Any) -> dict[str, Any]:
        """Run one toolbox op; its result, or ToolError with the toolbox's one-line error."""
        self.start()
        request = {"id": next(self._ids), "op": op, "args": self._with_defaults(op, args)}
        key, self.call_key = self.call_key, None
        if key:
            request["call"] = key
        response = self._toolbox.handle(json.dumps(request).encode())
        if not response.get("ok"):
            raise ToolError(response.get("error") or "the toolbox gave no reason")
        return response["result"]

    def _with_defaults(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        """The config's shell defaults, as the Docker sandbox fills them in."""
        if op != "shell":
            return args
        timeout = args.get("timeout")
        if timeout is None or (isinstance(timeout, (int, float)) and not isinstance(timeout, bool)):
            args = {**args, "timeout": min(float(timeout or self.cfg.command_timeout), self.cfg.max_command_timeout)}
        return {"inline_bytes": self.cfg.inline_output_bytes, "max_file_bytes": self.cfg.max_output_file_bytes,
                **args}

    def give_back_files(self) -> list[str]:
        return []  # everything here was made by this machine's user already

    def disk_usage(self) -> int | None:
        return None  # no container layer: the workspace is measured on its own

    def stop(self) -> None:
        """Kill the shell and what it started; remove the directories this sandbox made itself."""
        toolbox, self._toolbox = self._toolbox, None
        if toolbox is not None:
            if toolbox._sessions is not None:  # terminal sessions: in a container they would die with it
                toolbox._sessions.close_all()
            shell = toolbox.shell
            shell._kill(lambda pid, pgid, sid: sid == shell.proc.pid)  # background jobs first, then bash
            shell.proc.kill()
            shell.proc.wait()
            shell.proc.stdin.close()
            os.close(shell.out)
            os.close(shell.ctl)
        for path in self._temporary:
            shutil.rmtree(path, ignore_errors=True)
        self._temporary = []

    def __enter__(self) -> LocalSandbox:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
