"""The Docker backend of the Sandbox port: one container per run (the agent's own computer, walled off
from the host), and the toolbox in it that every tool call goes through.

    with DockerSandbox(run_id, workspace, cfg, image) as sandbox:
        sandbox.call("shell", command="ls")          # -> the result dict of PROTOCOL.md
        sandbox.call("read", path="nope")            # raises ToolError: "nope: No such file or directory"

A run's sandbox is made with `keep=True`: `stop()` then stops its container and keeps it, and the next
`start()` of the same run starts that container again (`reused` is True), so what the agent installed
is still there. Without `keep`, `stop()` removes the container.

A sandbox heals itself: when its container or toolbox died between calls (out of memory, `docker
kill`, an engine restart), the next call starts it again (or a fresh one when it is gone) on the same
workspace, runs, and says so in its result under "sandbox_restarted".
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import docker
from docker.models.containers import Container

from orchestrator.config import SandboxConfig
from orchestrator.errors import SandboxError, ToolError
from orchestrator.sandbox.calls import DEFAULT_OP_SECONDS, OpGate, Recorded, op_result, with_defaults
from orchestrator.sandbox.docker import container as containers
from orchestrator.sandbox.docker import ownership
from orchestrator.sandbox.docker.engine import connect
from orchestrator.sandbox.docker.profile import decide_user
from orchestrator.sandbox.docker.exec_stream import DockerExecStream
from orchestrator.sandbox.docker.toolbox_client import ToolboxClient, ToolboxDied
from orchestrator.store.change_list import ChangeWatch



class DockerSandbox:
    """The sandbox of one run: `start()`, then `call()` as often as needed, then `stop()`."""

    def __init__(self, run_id: str, workspace: Path, cfg: SandboxConfig, image: str,
                 client: docker.DockerClient | None = None, cairn_mount: Path | None = None,
                 external: bool = False, keep: bool = False, run_dir: Path | None = None,
                 machine: bool = False, watch: ChangeWatch | None = None) -> None:
        """`workspace` is mounted at the work directory (`cfg.workdir`). `cairn_mount`: the run's own
        directory for cairn's files (`<run>/cairn/`: saved outputs, pages, summaries), mounted at /cairn;
        without it /cairn is the container's own (gone with it). `external`: the workspace is a user's
        folder, worked on in place, which is never chowned. `keep`: `stop()` keeps the container for the
        run's next session. `run_dir`: the run's directory, recorded on the container so that `gc` knows
        whose it is. `machine`: `image` is the run's own machine, carried from another host
        (sandbox/docker/machine.py), so even a fresh container holds what the agent installed. `watch`: the
        change watch of the run's folders (store/change_list.py), from which files are given back."""
        self.run_id, self.cfg, self.image = run_id, cfg, image
        self.workspace = Path(workspace).resolve()
        self.cairn_mount = Path(cairn_mount).resolve() if cairn_mount is not None else None
        self.external = external
        self.keep, self.run_dir, self.machine = keep, run_dir, machine
        self.client = client
        self.container: Container | None = None
        self.toolbox: ToolboxClient | None = None
        self.user: tuple[int, int] | None = None
        # True when what the agent installed outside the workspace is still there: the last start() used
        # the run's kept container, or made one from its carried machine. False for a fresh container;
        # then `replaced` says why a kept one was not used (None when there was none).
        self.reused = False
        self.replaced: str | None = None
        self._owners: dict[str, tuple[Path, tuple[int, int]]] = {}  # see give_back_files
        self._changes = watch.subscribe() if watch is not None else None
        self._watched = [Path(root) for root in watch.roots] if watch is not None else []
        self._died: str | None = None  # why the toolbox died during a call, told by the next call
        self._gate, self._healing, self._recorded = OpGate(), threading.RLock(), Recorded()

    @property
    def network_enabled(self) -> bool:
        return self.cfg.network == "bridge"

    def start(self) -> None:
        """Start the run's container (the kept one when it fits, see container.open_machine) and the
        toolbox in it. Raises SandboxError naming the problem."""
        user = self.user = decide_user(self.cfg, self.workspace, external=self.external)
        self.client = self.client or connect()
        machine = containers.open_machine(self.client, self.cfg, self.run_id, self.workspace, self.image,
                                          user=user, cairn_mount=self.cairn_mount, run_dir=self.run_dir,
                                          external=self.external)
        self.container, self.replaced = machine.container, machine.replaced
        self.reused = machine.reused or self.machine
        self._owners = self._mount_owners()
        self._start_toolbox()

    def _start_toolbox(self) -> None:
        try:
            argv = containers.toolbox_argv(self.container, self.cfg, self.client)
            self.toolbox = ToolboxClient(self.client.api, self.container.id, argv)
            self.toolbox.start(self.cfg.start_timeout)
        except ToolboxDied as exc:
            self.stop()
            raise SandboxError(f"the toolbox did not start in a container of {self.image}: {exc.message}") from exc
        except SandboxError:
            self.stop()
            raise
        self._died = None

    def kill_stray_processes(self) -> None:
        """Make sure that no process of an earlier session (its toolbox, a command it cut off, jobs left
        in the background) runs in the container: it is stopped, which returns once all its processes
        are dead, and started again with a fresh toolbox. The filesystem is kept. `start()` does this
        already for a kept container that was still running; call it when a started sandbox must be
        sure of it again."""
        if self.toolbox is not None:
            self.toolbox.close()
            self.toolbox = None
        if self.container is None:
            self.start()
            return
        containers.restart(self.client, self.container.id)
        self._start_toolbox()

    def call(self, op: str, journal_key: str | None = None, **args: object) -> dict:
        """Run one toolbox op and return its result. Raises ToolError when the op fails (ok: false).
        `journal_key`: the tool call the op carries out; the toolbox journals it under that key (PROTOCOL.md,
        "The journal"). Threads may call at once: read-only ops then run side by side, others one at a time."""
        with self._gate.enter(op):
            with self._healing:  # one thread starts the sandbox again; those after it find it well
                restarted = None
                if self.toolbox is None:
                    self.start()
                elif self._died or not self.toolbox.alive():
                    restarted = self._restart(self._died or self._why_dead())
                toolbox = self.toolbox
            args, timeout = self._with_defaults(op, args)
            recorded = self._recorded.take()
            try:
                response = toolbox.request(op, args, timeout, call=journal_key, recorded=recorded)
            except ToolboxDied as exc:
                self._recorded.give_back(recorded)
                # The op may have run in part (a command that ate all memory), so it is not run again.
                self._died = self._why_dead(exc.message)
                raise ToolError(f"the sandbox died during this call: {self._died}; "
                                f"the next call starts a fresh one on the same workspace") from exc
        return op_result(response, restarted)

    def interrupt(self) -> bool:
        """Cut the op that runs now short (a person's stop): its command's processes are killed and it
        answers at once, saying so. Safe from any thread."""
        toolbox = self.toolbox
        return toolbox.interrupt() if toolbox is not None else False

    def recorded(self, journal_key: str) -> None:
        """The run has logged the outcome of the call journaled under `journal_key`: the next request tells
        the toolbox, which drops its record (PROTOCOL.md, "The journal")."""
        self._recorded.add(journal_key)

    @property
    def instance(self) -> str | None:
        """The running container's id: it changes when the sandbox is started again on a fresh one."""
        return self.container.id if self.container is not None else None

    def open_exec(self, argv: list[str], env: dict[str, str] | None = None,
                  workdir: str | None = None) -> DockerExecStream:
        """Start `argv` in the container with stdin attached (an MCP stdio server); SandboxError if it
        is not running."""
        if self.container is None or self.client is None:
            raise SandboxError("the sandbox is not running")
        return DockerExecStream(self.client.api, self.container.id, argv, env, workdir or self.cfg.workdir)

    def has_command(self, name: str) -> bool | None:
        """Whether `name` is a command in the container (`command -v`); None when the engine cannot say."""
        if self.container is None or self.client is None:
            return None
        try:
            api = self.client.api
            probe = api.exec_create(self.container.id, ["sh", "-c", 'command -v "$0"', name])
            api.exec_start(probe["Id"])
            return api.exec_inspect(probe["Id"]).get("ExitCode") == 0
        except containers.ENGINE_ERRORS:
            return None

    def disk_usage(self) -> int | None:
        """Bytes in the container's writable layer (what was written outside the mounted workspace), as
        the engine counts them (`docker inspect --size`'s SizeRw: apparent sizes, so a sparse file counts
        whole). It costs the engine a walk of the layer, ~5 µs a file. None when there is no container
        or the engine does not say."""
        if self.container is None or self.client is None:
            return None
        try:  # the list endpoint is docker-py's public way to ask for sizes; the filter makes it one
            found = self.client.api.containers(all=True, filters={"id": self.container.id}, size=True)
        except containers.ENGINE_ERRORS:
            return None
        size = found[0].get("SizeRw") if found else None
        return size if isinstance(size, int) else None

    def stop(self) -> None:
        """Give the agent's files back (see give_back_files), then stop the container: kept with `keep`,
        else removed. The workspace stays; calling stop twice is fine."""
        running = self.toolbox is not None and self.toolbox.alive()  # else the next session gives them back
        if running and self.toolbox is not None:
            self._tell_recorded()
        if self.toolbox is not None:
            self.toolbox.close()
            self.toolbox = None
        if self.container is not None and self.client is not None:
            try:
                if running:
                    self.give_back_files()
            finally:
                (containers.stop if self.keep else containers.remove)(self.client, self.container.id)
                self.container = None

    def _tell_recorded(self) -> None:
        """Before the toolbox ends: the calls logged since the last request, so their records go too."""
        recorded = self._recorded.take()
        if recorded:
            try:
                self.toolbox.request("ping", {}, DEFAULT_OP_SECONDS, recorded=recorded)
            except ToolboxDied:
                pass  # they stay in the journal, which a resume reads by key: harmless

    def remove(self) -> None:
        """Stop the sandbox and remove its container, kept or not."""
        self.stop()
        if self.client is not None:
            kept = containers.find(self.client, self.run_id, self.run_dir)
            if kept is not None:
                containers.remove(self.client, kept.id)

    # Files the default profile's root agent leaves in a bind-mounted directory would belong to root on
    # the host, and the user could not edit or delete them without sudo. At each checkpoint and when the
    # sandbox stops, the files that the agent's uid owns in each such directory are given to the owner of
    # the directory: the host user (the one running cairn), or for `--workspace DIR` the owner DIR had
    # when the sandbox started. Files of other owners (the agent may chown on purpose) are left alone.
    # With the run's change watch, only what changed since the last time is looked at, and only what the
    # agent's uid owns of it is chowned, by name; without it (or when its list is incomplete) the check
    # walks the tree on the host and stops at the first file to give back (PERF, measured on 2,000 files
    # in 40 folders: 9 ms, against 66 ms for the same `find` through docker exec). Either way, `chown`
    # runs in the container only when something is to be given back.

    def give_back_files(self) -> list[str]:
        """Give the agent's files in the mounted directories back to their owners; return the directories
        where something was given back. Nothing to do under lockdown (the agent runs as the host user)."""
        if self.cfg.lockdown or self.container is None or self.user is None:
            return []
        agent_uid = self.user[0]
        changes = self._changes.take() if self._changes is not None else None
        done = []
        for destination, (source, (uid, gid)) in self._owners.items():
            if uid == agent_uid:
                continue
            watched = next((root for root in self._watched if os.path.realpath(root) == os.path.realpath(source)), None)
            if changes is not None and changes.complete and watched is not None:
                inner = [os.path.relpath(other, destination) for other in self._owners
                         if other != destination and other.startswith(destination + "/")]
                owned = ownership.owned_among(watched, changes.under(watched), agent_uid, skip=inner)
                if owned:
                    ownership.chown_paths(self.container, destination, owned, (uid, gid))
                    done.append(destination)
                continue
            if not ownership.owned_by(source, agent_uid, skip=self._nested(destination)):
                continue
            ownership.chown_back(self.container, destination, agent_uid, (uid, gid),
                                  prune=[d for d in self._owners if d != destination and d.startswith(destination + "/")])
            done.append(destination)
        return done

    def _nested(self, destination: str) -> list[Path]:
        """Host paths of the other mounts inside `destination`: they have their own owners."""
        source = self._owners[destination][0]
        return [source / os.path.relpath(other, destination) for other in self._owners
                if other != destination and other.startswith(destination + "/")]

    def _mount_owners(self) -> dict[str, tuple[Path, tuple[int, int]]]:
        """Each writable bind mount of the container: its host path and the owner its files go back to."""
        owners = {}
        host_user = (os.getuid(), os.getgid())
        for mount in self.container.attrs.get("Mounts") or []:
            if mount.get("Type") != "bind" or not mount.get("RW"):
                continue
            source = Path(mount["Source"])
            owner = host_user
            if self.external and source == self.workspace:
                st = os.stat(source)
                owner = (st.st_uid, st.st_gid)
            owners[mount["Destination"]] = (source, owner)
        return owners

    def __enter__(self) -> DockerSandbox:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _with_defaults(self, op: str, args: dict) -> tuple[dict, float]:
        return with_defaults(self.cfg, op, args)

    def _restart(self, reason: str) -> str:
        if self.toolbox is not None:
            self.toolbox.close()
            self.toolbox = None
        self.start()  # the same container when it is still there
        if self.reused:
            return (f"{reason}; the sandbox was started again (files and installed software are kept; "
                    "shell state and background processes were lost)")
        return (f"{reason}; a fresh sandbox was started on the same workspace "
                "(shell state, background processes and anything installed outside it were lost)")

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
