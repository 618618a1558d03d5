"""The run's container: how it is hardened, created, given a toolbox, and cleaned up.

One container per run, named `cairn-<run id>` and labelled `cairn.managed=1`, `cairn.run=<run id>`. Its
main process only sleeps; all work happens in the toolbox, started in it with `docker exec`.

Hardening, and why:
- The agent never runs as root. It runs as the host user's uid:gid, so the files it makes in the
  workspace belong to that user. When the host user is root, it runs as 1000:1000 instead, and the
  workspace tree is chowned to 1000:1000 first so the agent can write it. A user's own folder
  (`cairn run --workspace DIR`) is never chowned: when cairn runs as root the agent runs as the folder's
  owner, and a folder that root owns is refused. The setting `sandbox.user` ("UID:GID", never 0)
  overrides all of this.
- No capabilities, no-new-privileges (setuid binaries cannot raise it), a read-only root filesystem with
  tmpfs at /tmp and at the home, limits on pids, memory (no swap) and CPU, no network unless the run asks
  for `bridge`, and an init (PID 1) that reaps the orphans commands leave behind.
- Mounts: the run's workspace at the work directory (`sandbox.workdir`, /workspace unless `--workdir`),
  cairn's own files of the run (`<run>/cairn/`: saved outputs, fetched pages, summaries) at /cairn,
  outside any project tree, and read-only: the toolbox script from cairn's files at /opt/cairn/toolbox.py
  (so it always matches the host's cairn, and nothing is written into the workspace) and, for an image
  without cairn's Python, the volume that carries one (python_volume.py). Nothing else of the host.
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
from orchestrator.sandbox import python_volume

LABEL_MANAGED = "cairn.managed"
LABEL_RUN = "cairn.run"
WORKSPACE = "/workspace"  # the default work directory
CAIRN_DIR = "/cairn"  # where the run's own cairn files (<run>/cairn/) are mounted
HOME = "/home/cairn"
NON_ROOT = (1000, 1000)  # the user cairn's image makes; used when the host user is root
TOOLBOX_IN_IMAGE = "/opt/cairn/toolbox.py"  # mounted there from TOOLBOX_SOURCE, read-only, in every image
TOOLBOX_SOURCE = Path(orchestrator.__file__).resolve().parent.parent / "sandbox_image" / "toolbox.py"
CAIRN_IMAGE_LABEL = "org.cairn.build-hash"  # cairn's image (and images built on it) has a python3 that fits

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
                cairn_mount: Path | None = None, python: str | None = None) -> dict:
    """Keyword arguments of `client.containers.run(image, ...)` for this run's hardened container.

    `cairn_mount`: the host directory mounted at /cairn (the run's `<run>/cairn/`); `python`: the volume
    that carries a Python (python_volume.py), for an image without cairn's."""
    uid, gid = user or sandbox_user()
    volumes = {str(Path(workspace).resolve()): {"bind": cfg.workdir, "mode": "rw"},
               str(TOOLBOX_SOURCE): {"bind": TOOLBOX_IN_IMAGE, "mode": "ro"}}
    if cairn_mount is not None:
        volumes[str(Path(cairn_mount).resolve())] = {"bind": CAIRN_DIR, "mode": "rw"}
    if python is not None:
        volumes[python] = {"bind": python_volume.MOUNT, "mode": "ro"}
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
        "working_dir": cfg.workdir,
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
           user: tuple[int, int] | None = None, cairn_mount: Path | None = None,
           external: bool = False) -> Container:
    """Start the run's container, replacing one that a crashed earlier session may have left.

    `external`: the workspace is a user's own folder, which is not chowned (only `cairn_mount` is)."""
    user = user or decide_user(cfg, workspace, external=external)
    if not external:
        prepare_workspace(workspace, user)
    if cairn_mount is not None:
        prepare_workspace(cairn_mount, user)
    try:
        labels = client.api.inspect_image(image)["Config"].get("Labels") or {}  # checked first: `run` would pull
        python = None if CAIRN_IMAGE_LABEL in labels else carried_python(client)
        remove(client, container_name(run_id))
        return client.containers.run(image, **run_options(cfg, run_id, workspace, user, cairn_mount, python))
    except docker.errors.ImageNotFound as exc:
        raise SandboxError(f"the sandbox image {image} is not in the Docker engine",
                           hint="build it with `cairn image build`, or name another with --image") from exc
    except ENGINE_ERRORS as exc:
        raise SandboxError(f"cannot start a container from {image}: {_explain(exc)}") from exc


def carried_python(client: docker.DockerClient) -> str:
    """The volume carrying a Python from cairn's own image, made the first time it is needed."""
    from orchestrator.sandbox.image import ensure_image

    return python_volume.ensure(client, ensure_image())


def remove(client: docker.DockerClient, name_or_id: str) -> None:
    """Kill and remove a container; one that is already gone is fine."""
    try:
        client.api.remove_container(name_or_id, force=True)
    except docker.errors.NotFound:
        pass
    except ENGINE_ERRORS as exc:
        raise SandboxError(f"cannot remove the container {name_or_id}: {_explain(exc)}") from exc


def toolbox_argv(container: Container, cfg: SandboxConfig, client: docker.DockerClient) -> list[str]:
    """The command that starts the toolbox in `container`: the script mounted from cairn's files, run by
    the image's python3 in cairn's image, else by the Python carried in on a volume (python_volume.py),
    which runs on any Linux image (glibc, musl, or no libc at all). It gets the work directory, cairn's
    directory and the confinement as arguments (PROTOCOL.md)."""
    arguments = [TOOLBOX_IN_IMAGE, "--workdir", cfg.workdir, "--cairn", CAIRN_DIR,
                 *(["--lockdown"] if cfg.lockdown else [])]
    volume = next((m["Name"] for m in container.attrs.get("Mounts", [])
                   if m.get("Destination") == python_volume.MOUNT and m.get("Type") == "volume"), None)
    if volume is None:
        return ["python3", *arguments]
    try:
        from orchestrator.sandbox.image import ensure_image

        python_volume.check(container, client, ensure_image(), volume)
    except ENGINE_ERRORS as exc:
        raise SandboxError(f"cannot check the carried Python in the sandbox: {_explain(exc)}") from exc
    return [*python_volume.argv(arguments[0]), *arguments[1:]]


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
