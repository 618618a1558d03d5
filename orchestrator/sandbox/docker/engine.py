"""The connection to a Docker engine, with a clear error when there is none."""

from __future__ import annotations

import docker
import docker.errors

from orchestrator.errors import SandboxError, first_line

try:  # ssh:// engines go through paramiko (docker-py's ssh transport); it raises its own errors
    from paramiko import SSHException
except ImportError:  # without it, docker-py says "Install paramiko package to enable ssh:// support"
    SSHException = docker.errors.DockerException  # type: ignore[misc,assignment]

Engine = docker.DockerClient  # the engine's client, as modules outside sandbox/ name it (they never import docker)


def connect(timeout: float = 120.0) -> docker.DockerClient:
    """A client of the engine named by the environment (`DOCKER_HOST`, else the local socket).

    `DOCKER_HOST` may name another machine's engine: `tcp://HOST:2376` (with `DOCKER_TLS_VERIFY` and
    `DOCKER_CERT_PATH`), or `ssh://USER@HOST`, through paramiko: the host must be in ~/.ssh/known_hosts and
    the key in the agent or in ~/.ssh. Not docker-py's `use_ssh_client` (shelling out to `ssh`): its
    stream cannot be waited on with select(), which the toolbox client needs. The engine resolves the
    workspace bind mount on its own machine, so the runs directory must be at the same path there.

    Raises SandboxError with what to do when no engine answers.
    """
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except (docker.errors.DockerException, SSHException, OSError) as exc:
        raise SandboxError(
            f"no Docker engine answers ({_first_line(exc)})",
            hint="start one (on Debian as root: bash scripts/ensure-docker.sh), or set DOCKER_HOST",
        ) from exc
    return client


def describe(client: Engine) -> str:
    """The engine's version, as `cairn doctor` shows it."""
    version = client.version()
    return f"Docker {version.get('Version', '?')} (API {version.get('ApiVersion', '?')})"


def has_image(client: Engine, tag: str) -> bool:
    """Whether the engine holds an image of that tag."""
    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def _first_line(exc: BaseException) -> str:
    return first_line(exc)
