"""Shared fixtures. Tests that need Docker use the real engine and the real sandbox image."""

from __future__ import annotations

import concurrent.futures
import os
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that asks for the sandbox image or the engine needs Docker, marked or not: so that
    `pytest -m "not docker"` runs with no engine at all."""
    for item in items:
        if {"sandbox_image", "docker_client"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.docker)


@pytest.fixture(scope="session")
def sandbox_image() -> str:
    """The image cairn builds from sandbox_image/ (built once if it is missing)."""
    from orchestrator.sandbox.docker.image import ensure_image

    return ensure_image()


@pytest.fixture(autouse=True)
def a_default_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs name no model unless a test says otherwise; in tests that is the offline demo script."""
    monkeypatch.setenv("CAIRN_MODEL", "scripted:demo")


@pytest.fixture
def runs_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "runs"
    monkeypatch.setenv("CAIRN_RUNS_DIR", str(path))
    return path


@pytest.fixture(scope="session", autouse=True)
def remove_the_containers_test_runs_kept(tmp_path_factory: pytest.TempPathFactory):
    """A run keeps its container when it stops; those of the runs this session's tests made (their run
    directories are under its temporary base) are removed when the session ends, not left to `cairn gc`."""
    yield
    from orchestrator.ui.inspect.held import container_states

    base = str(tmp_path_factory.getbasetemp().resolve()) + "/"
    if any(run_dir and run_dir.startswith(base) for _, run_dir in container_states() or {}):
        import docker

        api = docker.from_env().api
        # The list endpoint's own labels: docker-py's containers.list() inspects each container after
        # listing it, and fails on one that another test session removed in between.
        ours = [found["Id"] for found in api.containers(all=True, filters={"label": "cairn.run_dir"})
                if (found.get("Labels") or {}).get("cairn.run_dir", "").startswith(base)]

        def remove(container_id: str) -> None:
            try:
                api.remove_container(container_id, force=True)
            except docker.errors.APIError:
                pass

        # A whole run of the suite keeps over a hundred (115); removed one by one they took half a minute.
        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(remove, ours))
