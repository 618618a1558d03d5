"""The sandbox: one hardened container per run, and the toolbox in it that every tool call goes through.

    with Sandbox(run_id, workspace, cfg, image) as sandbox:
        sandbox.call("shell", command="ls")          # -> the result dict of PROTOCOL.md
        sandbox.call("read", path="nope")            # raises ToolError: "nope: No such file or directory"

A sandbox heals itself: when its container or toolbox died between calls (out of memory, `docker
kill`, an engine restart), the next call starts a fresh one on the same workspace, runs, and says so in
its result under "sandbox_restarted".
"""

from __future__ import annotations

import os
from pathlib import Path

import docker
from docker.models.containers import Container

from orchestrator.config import SandboxConfig
from orchestrator.errors import SandboxError
from orchestrator.sandbox import container as containers
from orchestrator.sandbox.engine import connect
from orchestrator.sandbox.toolbox_client import ToolboxClient, ToolboxDied

__all__ = ["Sandbox", "SandboxError", "ToolError", "ToolboxDied"]

# Time the host allows beyond an op's own timeout before it declares the toolbox stuck: killing a
# command's processes, restarting bash and sending a large output back all take a little.
HOST_GRACE_SECONDS = 30.0
DEFAULT_OP_SECONDS = 60.0  # read, write, edit, list, ping
FETCH_SECONDS = 30.0


class ToolError(Exception):
    """An op failed in a way the model should see and can act on: a path outside the workspace, no such
    file, an edit that is not unique. The message is one line."""


class Sandbox:
    """The sandbox of one run: `start()`, then `call()` as often as needed, then `stop()`."""

    def __init__(self, run_id: str, workspace: Path, cfg: SandboxConfig, image: str,
                 client: docker.DockerClient | None = None, cairn_mount: Path | None = None) -> None:
        """`cairn_mount`: for a run on a user's own folder, the run's directory that is mounted at
        /workspace/.cairn, so that cairn's files never land in the folder (which is never chowned)."""
        self.run_id, self.cfg, self.image = run_id, cfg, image
        self.workspace = Path(workspace).resolve()
        self.cairn_mount = Path(cairn_mount).resolve() if cairn_mount is not None else None
        self.client = client
        self.container: Container | None = None
        self.toolbox: ToolboxClient | None = None
        self._died: str | None = None  # why the toolbox died during a call, told by the next call
        # The key of the tool call the next request carries out, set by the agent loop: that request is
        # journaled under it in the toolbox (PROTOCOL.md, "The journal"), and the key is used up.
        self.call_key: str | None = None

    @property
    def network_enabled(self) -> bool:
        return self.cfg.network == "bridge"

    def start(self) -> None:
        """Create the container and start the toolbox in it. Raises SandboxError naming the problem."""
        user = containers.decide_user(self.cfg, self.workspace, external=self.cairn_mount is not None)
        self.client = self.client or connect()
        self._make_mountpoint(user)
        try:
            self.container = containers.create(self.client, self.cfg, self.run_id, self.workspace, self.image,
                                               user=user, cairn_mount=self.cairn_mount)
        except BaseException:
            self._remove_mountpoint()
            raise
        try:
            argv = containers.toolbox_argv(self.container, self.workspace, self.image, self.cairn_mount, user)
            self.toolbox = ToolboxClient(self.client.api, self.container.id, argv)
            self.toolbox.start(self.cfg.start_timeout)
        except ToolboxDied as exc:
            self.stop()
            raise SandboxError(f"the toolbox did not start in a container of {self.image}: {exc.message}") from exc
        except SandboxError:
            self.stop()
            raise
        self._died = None

    def call(self, op: str, **args: object) -> dict:
        """Run one toolbox op and return its result. Raises ToolError when the op fails (ok: false)."""
        restarted = None
        if self.toolbox is None:
            self.start()
        elif self._died or not self.toolbox.alive():
            restarted = self._restart(self._died or self._why_dead())
        args, timeout = self._with_defaults(op, args)
        key, self.call_key = self.call_key, None
        try:
            response = self.toolbox.request(op, args, timeout, call=key)
        except ToolboxDied as exc:
            # The op may have run in part (a command that ate all memory), so it is not run again.
            self._died = self._why_dead(exc.message)
            raise ToolError(f"the sandbox died during this call: {self._died}; "
                            f"the next call starts a fresh one on the same workspace") from exc
        if not response.get("ok"):
            error = response.get("error") or "the toolbox gave no reason"
            raise ToolError(f"{error} (and: {restarted})" if restarted else error)
        result = response["result"]
        if restarted:
            result["sandbox_restarted"] = restarted
        return result

    def stop(self) -> None:
        """Stop and remove the container. The workspace stays; calling stop twice is fine."""
        if self.toolbox is not None:
            self.toolbox.close()
            self.toolbox = None
        if self.container is not None and self.client is not None:
            containers.remove(self.client, self.container.id)
            self.container = None
        self._remove_mountpoint()

    # The engine would make the mountpoint `.cairn` in the user's folder itself (as root). cairn makes it
    # instead, notes that in `<run>/cairn.mountpoint` (so a crashed session's is found again), and
    # removes it after the container when it is still empty. A `.cairn` the user had is left alone.

    @property
    def _mountpoint_note(self) -> Path:
        return self.cairn_mount.with_name(self.cairn_mount.name + ".mountpoint")

    def _make_mountpoint(self, owner: tuple[int, int]) -> None:
        if self.cairn_mount is None:
            return
        mountpoint = self.workspace / ".cairn"
        if mountpoint.is_symlink() or (mountpoint.exists() and not mountpoint.is_dir()):
            raise SandboxError(f"{mountpoint} is not a directory; cairn mounts its own files at "
                               "/workspace/.cairn", hint="move it away, or rename it")
        if not mountpoint.exists():
            self._mountpoint_note.touch()
            os.mkdir(mountpoint, 0o755)
            if os.getuid() == 0:
                os.lchown(mountpoint, *owner)

    def _remove_mountpoint(self) -> None:
        if self.cairn_mount is None or not self._mountpoint_note.exists():
            return
        try:
            os.rmdir(self.workspace / ".cairn")  # only when empty
        except OSError:  # gone already, or not empty: something was put there during the run; keep it
            pass
        self._mountpoint_note.unlink(missing_ok=True)

    def __enter__(self) -> Sandbox:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _with_defaults(self, op: str, args: dict) -> tuple[dict, float]:
        """The op's arguments with the config's defaults filled in, and how long the host waits for it."""
        if op == "shell":
            timeout = args.get("timeout")
            if timeout is None or (isinstance(timeout, (int, float)) and not isinstance(timeout, bool)):
                timeout = min(float(timeout or self.cfg.command_timeout), self.cfg.max_command_timeout)
                args = {**args, "timeout": timeout}
            else:  # not a number: the toolbox refuses it with a clear message
                timeout = self.cfg.command_timeout
            args = {"inline_bytes": self.cfg.inline_output_bytes,
                    "max_file_bytes": self.cfg.max_output_file_bytes, **args}
            return args, timeout + HOST_GRACE_SECONDS
        if op == "fetch":
            return args, FETCH_SECONDS + HOST_GRACE_SECONDS
        return args, DEFAULT_OP_SECONDS

    def _restart(self, reason: str) -> str:
        self.stop()
        self.start()
        return (f"{reason}; a fresh sandbox was started on the same workspace "
                "(shell state and background processes were lost)")

    def _why_dead(self, detail: str | None = None) -> str:
        """One line on what happened to the container, for the model and the person."""
        try:
            self.container.reload()
        except docker.errors.NotFound:
            return "the sandbox container was removed"
        except containers.ENGINE_ERRORS:
            return "the Docker engine stopped answering"
        state = self.container.attrs["State"]
        if state.get("OOMKilled"):
            return "the sandbox container ran out of memory"
        if state.get("Status") != "running":
            return f"the sandbox container stopped ({state.get('Status')}, exit code {state.get('ExitCode')})"
        return f"the toolbox process died ({detail or 'no detail'})"
