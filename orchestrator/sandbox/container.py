"""The run's container: how it is hardened, created, given a toolbox, and cleaned up.

One container per run, named `cairn-<run id>` and labelled `cairn.managed=1`, `cairn.run=<run id>`. Its
main process only sleeps; all work happens in the toolbox, started in it with `docker exec`.

Hardening, and why:
- The agent never runs as root. It runs as the host user's uid:gid, so the files it makes in the
  workspace belong to that user. When the host user is root, it runs as 1000:1000 instead, and the
  workspace tree is chowned to 1000:1000 first so the agent can write it. A user's own folder
  (`cairn run --workspace DIR`) is never chowned: when cairn runs as root the agent runs as the folder's
  owner, and a folder that root owns is refused. The setting `sandbox.user` ("UID:GID", never 0)
  overrides all of this. Such a run's cairn files live outside DIR, in `<run>/cairn/`, mounted at
  /workspace/.cairn (see `Sandbox`).
- No capabilities, no-new-privileges (setuid binaries cannot raise it), a read-only root filesystem with
  tmpfs at /tmp and at the home, limits on pids, memory (no swap) and CPU, no network unless the run asks
  for `bridge`, and an init (PID 1) that reaps the orphans commands leave behind.
- The environment holds only what the config names (`env`, and host variables listed in `pass_env`):
  API keys stay on the host. The Docker socket is never mounted.
"""

from __future__ import annotations

import os
from pathlib import Path

import docker
import docker.errors
import requests.exceptions
from docker.models.containers import Container

import orchestrator
from orchestrator.config import SandboxConfig
from orchestrator.errors import SandboxError, UsageError

LABEL_MANAGED = "cairn.managed"
LABEL_RUN = "cairn.run"
WORKSPACE = "/workspace"
HOME = "/home/cairn"
NON_ROOT = (1000, 1000)  # the user cairn's image makes; used when the host user is root
TOOLBOX_IN_IMAGE = "/opt/cairn/toolbox.py"
TOOLBOX_SOURCE = Path(orchestrator.__file__).resolve().parent.parent / "sandbox_image" / "toolbox.py"
# Where the toolbox goes when an image (a user's own) does not have it.
TOOLBOX_IN_WORKSPACE = (".cairn", "bin", "toolbox.py")

# What a call to the engine raises when the engine refuses, or is not there at all.
ENGINE_ERRORS = (docker.errors.DockerException, requests.exceptions.RequestException)


def container_name(run_id: str) -> str:
    return f"cairn-{run_id}"


def sandbox_user() -> tuple[int, int]:
    """The uid and gid the agent runs as: the host user's, but never root."""
    uid = os.getuid()
    return NON_ROOT if uid == 0 else (uid, os.getgid())


def decide_user(cfg: SandboxConfig, workspace: Path, external: bool = False) -> tuple[int, int]:
    """The uid and gid the agent runs as, for this workspace. `external`: a user's own folder, which
    cairn never chowns; as root, cairn runs the agent as its owner, and refuses a folder root owns."""
    if cfg.user:
        uid, gid = (int(part) for part in cfg.user.split(":"))
        if uid == 0:
            raise UsageError("sandbox.user must not be uid 0: the agent never runs as root")
        return uid, gid
    if not external or os.getuid() != 0:
        return sandbox_user()
    st = os.stat(workspace)
    if st.st_uid == 0:
        raise UsageError(f"{workspace} belongs to root, and the agent never runs as root; cairn does not "
                         "chown your folder",
                         hint=f"give it to a user (chown -R 1000:1000 {workspace}), or run the agent as a "
                              "uid that can write it: --sandbox-user UID:GID")
    return st.st_uid, st.st_gid


def run_options(cfg: SandboxConfig, run_id: str, workspace: Path, user: tuple[int, int] | None = None,
                cairn_mount: Path | None = None) -> dict:
    """Keyword arguments of `client.containers.run(image, ...)` for this run's hardened container.

    `cairn_mount`: a host directory mounted at /workspace/.cairn (a run on a user's own folder)."""
    uid, gid = user or sandbox_user()
    volumes = {str(Path(workspace).resolve()): {"bind": WORKSPACE, "mode": "rw"}}
    if cairn_mount is not None:
        volumes[str(Path(cairn_mount).resolve())] = {"bind": f"{WORKSPACE}/.cairn", "mode": "rw"}
    env = {"HOME": HOME}
    env.update({name: os.environ[name] for name in cfg.pass_env if name in os.environ})
    env.update(cfg.env)
    return {
        "name": container_name(run_id),
        "labels": {LABEL_MANAGED: "1", LABEL_RUN: run_id},
        # Our own entrypoint, so that any image works the same: it waits, the toolbox is exec'd in.
        "entrypoint": ["sleep", "infinity"],
        "command": [],
        "init": True,
        "detach": True,
        "user": f"{uid}:{gid}",
        "working_dir": WORKSPACE,
        "environment": env,
        "volumes": volumes,
        "read_only": True,
        "tmpfs": {
            "/tmp": f"rw,nosuid,nodev,size={cfg.tmp_size},mode=1777",
            HOME: f"rw,nosuid,nodev,size={cfg.home_size},uid={uid},gid={gid},mode=0755",
        },
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "pids_limit": cfg.pids_limit,
        "mem_limit": cfg.memory,
        "memswap_limit": cfg.memory,  # equal to the memory limit: no swap
        # The engine refuses more CPUs than the host has, so a default of 2 must not break a 1-core host.
        "nano_cpus": int(min(cfg.cpus, os.cpu_count() or 1) * 1e9),
        "network_mode": "bridge" if cfg.network == "bridge" else "none",
    }


def prepare_workspace(workspace: Path, owner: tuple[int, int] | None = None) -> None:
    """Create the workspace, and when cairn runs as root, give its tree to the sandbox user (`owner`).

    Symlinks are chowned themselves (lchown) and never followed: the agent may have made them.
    """
    workspace.mkdir(parents=True, exist_ok=True)
    if os.getuid() != 0:
        return
    uid, gid = owner or sandbox_user()
    for directory, dirnames, filenames in os.walk(workspace):
        for name in [".", *dirnames, *filenames]:
            path = os.path.join(directory, name)
            st = os.lstat(path)
            if (st.st_uid, st.st_gid) != (uid, gid):
                os.lchown(path, uid, gid)


def create(client: docker.DockerClient, cfg: SandboxConfig, run_id: str, workspace: Path, image: str,
           user: tuple[int, int] | None = None, cairn_mount: Path | None = None) -> Container:
    """Start the run's container, replacing one that a crashed earlier session may have left.

    With `cairn_mount` the workspace is a user's own folder: it is not chowned, only that directory is."""
    user = user or decide_user(cfg, workspace, external=cairn_mount is not None)
    prepare_workspace(cairn_mount if cairn_mount is not None else workspace, user)
    try:
        client.api.inspect_image(image)  # checked first: `run` would try to pull it from a registry
        remove(client, container_name(run_id))
        return client.containers.run(image, **run_options(cfg, run_id, workspace, user, cairn_mount))
    except docker.errors.ImageNotFound as exc:
        raise SandboxError(f"the sandbox image {image} is not in the Docker engine",
                           hint="build it with `cairn image build`, or name another with --image") from exc
    except ENGINE_ERRORS as exc:
        raise SandboxError(f"cannot start a container from {image}: {_explain(exc)}") from exc


def remove(client: docker.DockerClient, name_or_id: str) -> None:
    """Kill and remove a container; one that is already gone is fine."""
    try:
        client.api.remove_container(name_or_id, force=True)
    except docker.errors.NotFound:
        pass
    except ENGINE_ERRORS as exc:
        raise SandboxError(f"cannot remove the container {name_or_id}: {_explain(exc)}") from exc


def toolbox_argv(container: Container, workspace: Path, image: str, cairn_mount: Path | None = None,
                 owner: tuple[int, int] | None = None) -> list[str]:
    """The command that starts the toolbox in `container`.

    Images made by cairn have it at /opt/cairn/toolbox.py. For another image (a user's own) it is copied
    into the workspace and run from there; that needs python3 in the image.
    """
    check = f"import os, sys; sys.exit(0 if os.path.isfile({TOOLBOX_IN_IMAGE!r}) else 3)"
    try:
        code, output = container.exec_run(["python3", "-c", check], stdout=True, stderr=True)
    except ENGINE_ERRORS as exc:
        raise SandboxError(f"cannot run python3 in a container of {image}: {_explain(exc)}") from exc
    if code == 0:
        return ["python3", TOOLBOX_IN_IMAGE]
    if code != 3:
        detail = output.decode(errors="replace").strip().splitlines()[-1:] or [f"exit code {code}"]
        raise SandboxError(f"the image {image} cannot run python3, which the toolbox needs ({detail[0][:200]})",
                           hint="use an image with python3 (3.9 or newer), or the default image")
    install_toolbox(workspace, cairn_mount, owner)
    return ["python3", "/".join([WORKSPACE, *TOOLBOX_IN_WORKSPACE])]


def install_toolbox(workspace: Path, cairn_mount: Path | None = None, owner: tuple[int, int] | None = None) -> None:
    """Copy toolbox.py to workspace/.cairn/bin/, never following a symlink the agent may have planted.
    With `cairn_mount` (the host directory mounted at /workspace/.cairn) it goes to cairn_mount/bin/.

    Each step opens the next directory relative to the previous one with O_NOFOLLOW, so a `.cairn` or
    `bin` that is a symlink is refused instead of leading the host's write elsewhere.
    """
    data = TOOLBOX_SOURCE.read_bytes()
    *directories, name = TOOLBOX_IN_WORKSPACE
    if cairn_mount is not None:
        workspace, directories = cairn_mount, directories[1:]
    owner = (owner or sandbox_user()) if os.getuid() == 0 else None
    fds = [os.open(workspace, os.O_RDONLY | os.O_DIRECTORY)]
    try:
        for directory in directories:
            fds.append(_open_directory(fds[-1], directory, workspace, owner))
        temporary = f".{name}.tmp"
        try:
            os.unlink(temporary, dir_fd=fds[-1])
        except FileNotFoundError:
            pass
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=fds[-1])
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if owner:
                os.fchown(f.fileno(), *owner)
        os.replace(temporary, name, src_dir_fd=fds[-1], dst_dir_fd=fds[-1])
    finally:
        for fd in fds:
            os.close(fd)


def _open_directory(parent_fd: int, name: str, workspace: Path, owner: tuple[int, int] | None) -> int:
    try:
        os.mkdir(name, 0o755, dir_fd=parent_fd)
        created = True
    except FileExistsError:
        created = False
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent_fd)
    except OSError as exc:  # ELOOP for a symlink, ENOTDIR for a file
        raise SandboxError(f"cannot install the toolbox: {name} under {workspace} is a symlink or not a "
                           f"directory ({exc.strerror}); cairn does not follow it from the host") from exc
    if created and owner:
        os.fchown(fd, *owner)
    return fd


def gc(client: docker.DockerClient, live_run_ids: set[str] | list[str],
       known_run_ids: set[str] | list[str] = ()) -> list[str]:
    """Remove cairn's containers whose run is not live; return their names.

    A container of a run that is not among `known_run_ids` (a run of another runs directory, or of a
    test) is removed only when no toolbox runs in it: another cairn process may be driving it.
    """
    live, known = set(live_run_ids), set(known_run_ids)
    removed = []
    for container in client.containers.list(all=True, filters={"label": f"{LABEL_MANAGED}=1"}):
        run = container.labels.get(LABEL_RUN)
        if run in live or (run not in known and _toolbox_running(container)):
            continue
        remove(client, container.id)
        removed.append(container.name)
    return removed


def _toolbox_running(container: Container) -> bool:
    if container.status != "running":
        return False
    try:
        processes = container.top().get("Processes") or []
    except ENGINE_ERRORS:
        return False  # it went away meanwhile
    return any("toolbox.py" in " ".join(process) for process in processes)


def _explain(exc: BaseException) -> str:
    text = getattr(exc, "explanation", None) or str(exc) or type(exc).__name__
    return str(text).strip().splitlines()[0][:300]
