"""The carried Python (sandbox/carried.py) on Docker: a named volume, `cairn-python-<hash>`, filled once
from cairn's own sandbox image and mounted read-only at /opt/cairn-python in a container of an image
without cairn's Python. Its name holds a hash of the sandbox image and of the fill script, so a new
image gets a new volume; `docker volume rm` of an old one is always safe.
"""

from __future__ import annotations

import hashlib

import docker
import docker.errors

from orchestrator.errors import SandboxError
from orchestrator.sandbox.carried import FILL_SCRIPT, LOADER, PYTHON

LABEL = "cairn.python"

_ready: set[str] = set()  # volumes this process filled or found whole


def volume_name(source_image_id: str) -> str:
    digest = hashlib.sha256(f"{source_image_id}\n{FILL_SCRIPT}".encode()).hexdigest()[:12]
    return f"cairn-python-{digest}"


def ensure(client: docker.DockerClient, source_image: str) -> str:
    """The name of the volume that carries a Python from `source_image` (cairn's own), created and
    filled when it is not there yet. Raises SandboxError when the engine refuses."""
    try:
        name = volume_name(client.api.inspect_image(source_image)["Id"])
        if name in _ready:
            return name
        try:
            client.api.inspect_volume(name)
        except docker.errors.NotFound:
            client.api.create_volume(name, labels={LABEL: "1", "cairn.source-image": source_image})
            fill(client, source_image, name)
        return name
    except docker.errors.DockerException as exc:
        raise SandboxError(f"cannot make the volume that carries Python into the sandbox: {exc}") from exc


def fill(client: docker.DockerClient, source_image: str, name: str) -> None:
    """Fill the volume `name` from `source_image` (a no-op when it is whole already)."""
    try:
        client.containers.run(source_image, entrypoint=["python3", "-c", FILL_SCRIPT], command=[], user="0:0",
                              volumes={name: {"bind": "/dest", "mode": "rw"}}, network_mode="none",
                              labels={LABEL: "fill"}, remove=True, stdout=False, stderr=True)
    except docker.errors.ContainerError as exc:
        detail = (exc.stderr or b"").decode(errors="replace").strip().splitlines()[-1:] or [str(exc)]
        raise SandboxError(f"cannot fill the volume {name} with a Python: {detail[0][:300]}") from exc
    _ready.add(name)


def check(container: object, client: docker.DockerClient, source_image: str, name: str) -> None:
    """Make sure the carried Python is whole in a running container, filling the volume when a fill was
    cut off earlier (the volume exists, its `python/` does not). One `docker exec` of the loader, which
    checks the binary without starting Python, and only once per process and volume."""
    if name in _ready:
        return
    code, _ = container.exec_run([LOADER, "--verify", PYTHON], user="0:0")
    if code != 0:
        fill(client, source_image, name)
    _ready.add(name)
