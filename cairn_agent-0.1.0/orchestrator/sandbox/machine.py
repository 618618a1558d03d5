"""A run's machine carried between hosts: `cairn export --with-machine` and its `cairn import`.

The kept container is committed to an image (`docker commit`) and that image is saved (`docker save`) into
the archive as `<run>/state/machine.tar`. The committed image holds every layer, those of the image the
container was made from included, so the other host needs neither that image nor a registry; its
`docker load` skips the layers it has already. The import leaves the tar in the run's state; the first
session of the run loads it (`load`), records the image in run.json (`machine`), deletes the tar,
and makes the run's container from that image with the run's own settings and mounts. The original image
is not touched on either host.

The committed image keeps the container's configuration, environment included. Variables cairn set when
it made the container (host variables passed in may be secrets) are blanked in it: each session sets them
again anyway.
"""

from __future__ import annotations

from pathlib import Path

import docker

from orchestrator.errors import SandboxError, UsageError
from orchestrator.sandbox import container as containers

MACHINE_FILE = "machine.tar"
REPOSITORY = "cairn-machine"


def machine_tag(run_id: str) -> str:
    return f"{REPOSITORY}:{run_id.lower()}"


def save(client: docker.DockerClient, run_id: str, out: Path, run_dir: Path | None = None) -> str:
    """Write the run's kept container, as an image, to `out` (a `docker save` tar); return the image's tag."""
    kept = containers.find(client, run_id, run_dir)
    if kept is None:
        raise UsageError(f"run {run_id} holds no container (cairn ls shows which runs do); export it "
                         "without --with-machine")
    image_env = client.api.inspect_image(kept.attrs["Image"])["Config"].get("Env") or []
    image_keys = {entry.split("=", 1)[0] for entry in image_env}
    added = [entry.split("=", 1)[0] for entry in kept.attrs["Config"].get("Env") or []]
    env = image_env + [f"{key}=" for key in added if key not in image_keys]
    tag = machine_tag(run_id)
    try:
        client.api.commit(kept.id, repository=REPOSITORY, tag=run_id.lower(), conf={"Env": env},
                          message=f"cairn run {run_id}", pause=False)
        try:
            with open(out, "wb") as f:
                for chunk in client.api.get_image(tag):
                    f.write(chunk)
        finally:
            client.api.remove_image(tag)  # the archive holds it; the container is still kept here
    except containers.ENGINE_ERRORS as exc:
        raise SandboxError(f"cannot save the machine of run {run_id}: {containers._explain(exc)}") from exc
    return tag


def load(client: docker.DockerClient, tar: Path) -> str:
    """`docker load` a machine saved by `save`; return the image's tag."""
    try:
        with open(tar, "rb") as f:
            for line in client.api.load_image(f):
                for key in ("stream", "error"):
                    text = (line.get(key) or "") if isinstance(line, dict) else ""
                    if key == "error" and text:
                        raise SandboxError(f"cannot load the machine in {tar}: {text.strip()[:300]}")
                    if text.startswith("Loaded image: "):
                        return text[len("Loaded image: "):].strip()
    except containers.ENGINE_ERRORS as exc:
        raise SandboxError(f"cannot load the machine in {tar}: {containers._explain(exc)}") from exc
    raise SandboxError(f"{tar} holds no image cairn saved")


def present(client: docker.DockerClient, tag: str) -> bool:
    try:
        client.api.inspect_image(tag)
    except docker.errors.ImageNotFound:
        return False
    return True
