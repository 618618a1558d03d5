"""The run's container: its life (created, stopped, kept, started again, removed) and the toolbox put
in it. What it is made with (its two profiles, mounts, environment, limits) is profile.py's.

One container per run, named `cairn-<run id>` and labelled `cairn.managed=1`, `cairn.run=<run id>` (and
`cairn.run_dir`, `cairn.config`, see below). Its main process only sleeps; all work happens in the
toolbox, started in it with `docker exec`.

A machine that survives: when a run stops, its container is stopped and kept, not removed, and the next
session of the run starts the same container again (`open_machine`), so what the agent installed
outside the workspace is still there. It is reused only when it was made with the same settings (the
label `cairn.config` holds a hash of image, profile, mounts, limits and environment names); else it is
replaced by a fresh one and the session is told why. A container that still runs (a crashed session's)
is stopped and started again before it is used: when the engine says it stopped, every process of the
old session is dead. A copy of a run imported beside its original (the same id, another directory, both
there) gets a container of its own, `cairn-<run id>-<hash of its directory>`. `gc` removes the kept
containers of runs that are not live.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors
import requests.exceptions
from docker.models.containers import Container

from orchestrator.config import SandboxConfig
from orchestrator.errors import SandboxError, first_line
from orchestrator.sandbox import carried, toolbox_files
from orchestrator.sandbox.docker import python_volume
from orchestrator.sandbox.docker.profile import (
    LABEL_CONFIG, LABEL_MANAGED, LABEL_RUN, LABEL_RUN_DIR, container_name, fingerprint, prepare_workspace, run_options)

STOP_SECONDS = 3  # the main process is `sleep` under an init: it ends at once on SIGTERM
CAIRN_IMAGE_LABEL = "org.cairn.build-hash"  # cairn's image (and images built on it) has a python3 that fits

# What a call to the engine raises when the engine refuses, or is not there at all.
ENGINE_ERRORS = (docker.errors.DockerException, requests.exceptions.RequestException)


@dataclass
class Machine:
    """The container a session works in, and whether it is the run's kept one (what the agent installed
    is still there) or a fresh one; `replaced` says why a kept one was not used."""

    container: Container
    reused: bool
    replaced: str | None = None


def open_machine(client: docker.DockerClient, cfg: SandboxConfig, run_id: str, workspace: Path, image: str,
                 user: tuple[int, int], cairn_mount: Path | None = None, run_dir: Path | None = None,
                 external: bool = False) -> Machine:
    """The run's kept container, started again, when it was made with these settings; else a fresh one.

    A kept container that still runs (its session crashed) is stopped first, so that nothing the old
    session started (its toolbox, a command cut off, background jobs) runs on. `external`: the workspace
    is a user's own folder, which is never chowned (only `cairn_mount` may be)."""
    options = run_options(cfg, run_id, workspace, user, cairn_mount, _python_for(client, image))
    options["labels"][LABEL_CONFIG] = fingerprint(image, {**options, "_pass_env": cfg.pass_env})
    if run_dir is not None:
        options["labels"][LABEL_RUN_DIR] = str(Path(run_dir).resolve())
    if not external:
        prepare_workspace(workspace, user, lockdown=cfg.lockdown)
    if cairn_mount is not None:
        prepare_workspace(cairn_mount, user, lockdown=cfg.lockdown)
    replaced = None
    kept = find(client, run_id, run_dir)
    if kept is None and run_dir is not None and _get(client, container_name(run_id)) is not None:
        options["name"] = copy_name(run_id, run_dir)  # the name is the original run's: a copy gets its own
    if kept is not None:
        if kept.labels.get(LABEL_CONFIG) == options["labels"][LABEL_CONFIG]:
            try:
                restart(client, kept.id)
                kept.reload()
                return Machine(kept, reused=True)
            except SandboxError as exc:  # e.g. its image or a mounted folder is gone: start afresh
                replaced = f"the kept container could not be started again ({exc.message})"
        else:
            replaced = "the kept container was made with other settings (image, profile, mounts or limits)"
        remove(client, kept.id)
    return Machine(create(client, cfg, image, options), reused=False, replaced=replaced)


def create(client: docker.DockerClient, cfg: SandboxConfig, image: str, options: dict) -> Container:
    """Start a fresh container from `image` with `options` (of `run_options`)."""
    try:
        client.api.inspect_image(image)  # checked first: `run` would try to pull it from a registry
        if cfg.runtime:
            check_runtime(client, cfg.runtime)
        return client.containers.run(image, **options)
    except docker.errors.ImageNotFound as exc:
        raise missing_image(image) from exc
    except ENGINE_ERRORS as exc:
        raise SandboxError(f"cannot start a container from {image}: {_explain(exc)}") from exc


def missing_image(image: str) -> SandboxError:
    """The error for an image the engine does not hold, with the fix that fits it: cairn builds its own;
    another image is pulled or built by whoever made it."""
    from orchestrator.sandbox.docker.image import REPOSITORY

    ours = image.split(":", 1)[0] == REPOSITORY
    return SandboxError(f"the sandbox image {image} is not in the Docker engine",
                        hint="build it with `cairn image build`, or name another with --image" if ours else
                        f"pull it (docker pull {image}) or build it, then run again; or name another with --image")


def check_image(image: str) -> None:
    """Before a run is made for it: the image named with --image is in the engine. An engine that does not
    answer is left for the sandbox's start to report."""
    from orchestrator.sandbox.docker.engine import connect

    try:
        client = connect(timeout=15)
        client.api.inspect_image(image)
    except docker.errors.ImageNotFound:
        raise missing_image(image) from None
    except (SandboxError, *ENGINE_ERRORS):
        return


def _python_for(client: docker.DockerClient, image: str) -> str | None:
    """None for an image with cairn's own python3 (cairn's image, and images built on it); else the
    volume that carries one in."""
    try:
        labels = client.api.inspect_image(image)["Config"].get("Labels") or {}
    except docker.errors.ImageNotFound as exc:  # checked first: `run` would try to pull it from a registry
        raise missing_image(image) from exc
    except ENGINE_ERRORS as exc:
        raise SandboxError(f"cannot inspect the image {image}: {_explain(exc)}") from exc
    return None if CAIRN_IMAGE_LABEL in labels else carried_python(client)


def carried_python(client: docker.DockerClient) -> str:
    """The volume carrying a Python from cairn's own image, made the first time it is needed."""
    from orchestrator.sandbox.docker.image import ensure_image

    return python_volume.ensure(client, ensure_image())


def check_runtime(client: docker.DockerClient, name: str) -> None:
    """A clear error for a runtime the engine does not know (the engine's own says little)."""
    known = sorted((client.info().get("Runtimes") or {}).keys())
    if name not in known:
        raise SandboxError(f"the Docker engine has no runtime {name!r} (it has: {', '.join(known) or 'none'})",
                           hint='register it under "runtimes" in /etc/docker/daemon.json and reload dockerd')


def find(client: docker.DockerClient, run_id: str, run_dir: Path | None = None) -> Container | None:
    """The run's kept container, running or stopped; None when there is none. With `run_dir`, a container
    made for another directory of the same run id (the original of an imported copy) is not this run's,
    while that directory exists."""
    names = ([copy_name(run_id, run_dir)] if run_dir is not None else []) + [container_name(run_id)]
    for name in names:
        container = _get(client, name)
        if container is not None and _belongs(container, run_id, run_dir):
            return container
    return None


def remove_kept(client: docker.DockerClient, run_id: str, run_dir: Path) -> str | None:
    """Remove the container of the run at `run_dir` (for `cairn rm`): the one `find` gives, which is a
    copy's own `cairn-<run id>-<hash>` when the run is a copy beside another directory of the same id,
    and never that other directory's. Returns the name of the container removed, None when it had none."""
    kept = find(client, run_id, run_dir)
    if kept is None:
        return None
    remove(client, kept.id)
    return kept.name


def copy_name(run_id: str, run_dir: Path) -> str:
    """The container name of a copy of a run that lives beside its original on the same engine."""
    digest = hashlib.sha256(str(Path(run_dir).resolve()).encode()).hexdigest()[:8]
    return f"{container_name(run_id)}-{digest}"


def _belongs(container: Container, run_id: str, run_dir: Path | None) -> bool:
    if container.labels.get(LABEL_RUN) != run_id:
        return False
    owner = container.labels.get(LABEL_RUN_DIR)
    if run_dir is None or not owner:
        return True
    return owner == str(Path(run_dir).resolve()) or not (Path(owner) / "state").is_dir()


def _get(client: docker.DockerClient, name: str) -> Container | None:
    try:
        return client.containers.get(name)
    except docker.errors.NotFound:
        return None
    except ENGINE_ERRORS as exc:
        raise SandboxError(f"cannot look for the container {name}: {_explain(exc)}") from exc


def restart(client: docker.DockerClient, name_or_id: str) -> None:
    """Stop the container if it runs (when the engine says it stopped, all its processes are dead), then
    start it again: its filesystem is kept, its processes begin anew."""
    try:
        client.api.stop(name_or_id, timeout=0)
        client.api.start(name_or_id)
    except ENGINE_ERRORS as exc:
        raise SandboxError(f"cannot start the container {name_or_id} again: {_explain(exc)}") from exc


def stop(client: docker.DockerClient, name_or_id: str) -> None:
    """Stop a container and keep it; one that is gone is fine."""
    try:
        client.api.stop(name_or_id, timeout=STOP_SECONDS)
    except docker.errors.NotFound:
        pass
    except ENGINE_ERRORS as exc:
        raise SandboxError(f"cannot stop the container {name_or_id}: {_explain(exc)}") from exc


def remove(client: docker.DockerClient, name_or_id: str) -> None:
    """Kill and remove a container; one that is already gone is fine."""
    try:
        client.api.remove_container(name_or_id, force=True)
    except docker.errors.NotFound:
        pass
    except ENGINE_ERRORS as exc:
        raise SandboxError(f"cannot remove the container {name_or_id}: {_explain(exc)}") from exc


def toolbox_argv(container: Container, cfg: SandboxConfig, client: docker.DockerClient) -> list[str]:
    """The command that starts the toolbox in `container`: its folder mounted from cairn's files, run by
    the image's python3 in cairn's image, else by the Python carried in on a volume (python_volume.py),
    which runs on any Linux image (glibc, musl, or no libc at all)."""
    arguments = toolbox_files.arguments(cfg.workdir, cfg.lockdown)
    volume = next((m["Name"] for m in container.attrs.get("Mounts", [])
                   if m.get("Destination") == carried.MOUNT and m.get("Type") == "volume"), None)
    if volume is None:
        return ["python3", *toolbox_files.PYTHON_FLAGS, *arguments]
    try:
        from orchestrator.sandbox.docker.image import ensure_image

        python_volume.check(container, client, ensure_image(), volume)
    except ENGINE_ERRORS as exc:
        raise SandboxError(f"cannot check the carried Python in the sandbox: {_explain(exc)}") from exc
    return [*carried.argv(arguments[0]), *arguments[1:]]


def gc(client: docker.DockerClient, live_run_ids: set[str] | list[str],
       known_run_ids: set[str] | list[str] = (), older_than: float | None = None) -> list[str]:
    """Remove cairn's containers whose run is not live; return their names.

    `known_run_ids`: the runs of the runs directory being cleaned. A container of another run is left
    alone while its run's directory exists (another runs directory's kept machine), or while a toolbox
    runs in it (another cairn process may be driving it). `older_than` (seconds): only containers unused
    for at least that long (since they stopped, or were last started).
    """
    live, known = set(live_run_ids), set(known_run_ids)
    removed = []
    # ignore_removed: a container another process removes while the list is read is simply not there.
    for container in client.containers.list(all=True, filters={"label": f"{LABEL_MANAGED}=1"}, ignore_removed=True):
        run = container.labels.get(LABEL_RUN)
        if run in live:
            continue
        if run not in known:
            run_dir = container.labels.get(LABEL_RUN_DIR)
            if (run_dir and (Path(run_dir) / "state").is_dir()) or _toolbox_running(container):
                continue
        if older_than is not None and time.time() - last_used(container) < older_than:
            continue
        remove(client, container.id)
        removed.append(container.name)
    return removed


def last_used(container: Container) -> float:
    """When the container was last started or stopped (or made), in seconds since the epoch."""
    state = container.attrs.get("State") or {}
    stamps = [container.attrs.get("Created"), state.get("StartedAt"), state.get("FinishedAt")]
    return max((_epoch(stamp) for stamp in stamps if stamp), default=0.0)


def _epoch(stamp: str) -> float:
    """An engine timestamp (RFC 3339 with nanoseconds, e.g. 2024-05-01T10:00:00.123456789Z) in seconds."""
    from datetime import datetime, timezone

    if stamp.startswith("0001-"):  # the engine's "never"
        return 0.0
    whole, _, fraction = stamp.rstrip("Z").partition(".")
    fraction = fraction.split("+")[0].split("-")[0]
    seconds = datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
    return seconds + (float(f"0.{fraction}") if fraction.isdigit() else 0.0)


def _toolbox_running(container: Container) -> bool:
    if container.status != "running":
        return False
    try:
        processes = container.top().get("Processes") or []
    except ENGINE_ERRORS:
        return False  # it went away meanwhile
    started = f"{toolbox_files.TOOLBOX_IN_SANDBOX} --workdir"  # its argv (toolbox_files.arguments)
    return any(started in " ".join(process) for process in processes)


def _explain(exc: BaseException) -> str:
    return first_line(getattr(exc, "explanation", None) or exc)
