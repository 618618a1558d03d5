"""The connection to a Docker engine, with a clear error when there is none."""

from __future__ import annotations

import docker
import docker.errors

from orchestrator.errors import SandboxError


def connect(timeout: float = 120.0) -> docker.DockerClient:
    """A client of the engine named by the environment (`DOCKER_HOST`, else the local socket).

    Raises SandboxError with what to do when no engine answers.
    """
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except docker.errors.DockerException as exc:
        raise SandboxError(
            f"no Docker engine answers ({_first_line(exc)})",
            hint="start one (on Debian as root: bash scripts/ensure-docker.sh), or set DOCKER_HOST",
        ) from exc
    return client


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]
