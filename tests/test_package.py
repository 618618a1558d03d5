"""cairn as a package: the wheel `python -m build` makes, installed into a fresh venv outside any clone,
carries everything cairn needs at run time, and one version number reaches `cairn --version`, the
package's metadata and the sandbox image's label."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import orchestrator

REPO = Path(__file__).resolve().parents[1]
SOURCES = [  # in the tree and the sdist
    "sandbox_image/Dockerfile",
    "sandbox_image/__main__.py",
    "sandbox_image/toolbox/server.py",
    "sandbox_image/PROTOCOL.md",
    "sandbox_image/extra-ca/.keep",
    "workspace_templates/default/todo.md",
    "workspace_templates/research/cairn.json",
    "workspace_templates/research/notes/.keep",
    "orchestrator/llm/scripts/demo.json",
]


def in_wheel(source: str) -> str:
    """Where a file of the tree is in the wheel: the two folders at the top go inside the package."""
    for tree, wheel in (("sandbox_image/", "orchestrator/sandbox_image/"),
                        ("workspace_templates/", "orchestrator/workspace_templates/")):
        if source.startswith(tree):
            return wheel + source[len(tree):]
    return source


def tree_files() -> list[str]:
    """Every file of the package's folders that a run may read: the modules and the package data."""
    found = []
    for top in ("orchestrator", "sandbox_image", "workspace_templates"):
        for path in sorted((REPO / top).rglob("*")):
            relative = path.relative_to(REPO).as_posix()
            if path.is_file() and "__pycache__" not in relative:
                found.append(relative)
    return found


def build(out: Path, *flags: str) -> Path:
    """`python -m build`: the sdist, then the wheel built from the sdist alone (so the wheel cannot take
    anything from the checkout that the sdist lacks)."""
    pytest.importorskip("build", reason="python -m build needs the `build` package (the test extra)")
    done = subprocess.run([sys.executable, "-m", "build", *flags, "--outdir", str(out), str(REPO)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return out


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What goes into the sdist and the wheel, built with the test venv's setuptools: the same files as an
    isolated build in a fraction of its time (the installed wheel below is built as a release is)."""
    return build(tmp_path_factory.mktemp("dist"), "--no-isolation")


@pytest.fixture(scope="module")
def wheel(dist: Path) -> Path:
    return next(dist.glob("*.whl"))


@pytest.fixture(scope="module")
def released_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """As a release makes it: an isolated build, its build requirements fetched into a fresh venv."""
    return next(build(tmp_path_factory.mktemp("release")).glob("*.whl"))


def test_the_sandbox_image_and_the_templates_sit_at_the_top_of_the_tree() -> None:
    assert (REPO / "sandbox_image" / "Dockerfile").is_file() and (REPO / "workspace_templates" / "default").is_dir()
    assert not (REPO / "orchestrator" / "sandbox_image").exists()
    assert not (REPO / "orchestrator" / "workspace_templates").exists()


def test_the_wheel_carries_every_file_of_the_tree_and_the_one_version(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert [source for source in SOURCES if in_wheel(source) not in names] == []
    # A package missing from pyproject.toml's list would be dropped here without a word.
    assert [source for source in tree_files() if in_wheel(source) not in names] == []
    assert wheel.name.startswith(f"cairn_agent-{orchestrator.__version__}-")
    assert not any(name.startswith(("sandbox_image/", "workspace_templates/", "tests/")) for name in names)


def test_the_sdist_carries_the_package_data(dist: Path) -> None:
    import tarfile

    sdist = next(dist.glob("*.tar.gz"))
    top = f"cairn_agent-{orchestrator.__version__}"
    names = set(tarfile.open(sdist).getnames())
    assert [name for name in SOURCES if f"{top}/{name}" not in names] == []


@pytest.mark.docker
def test_installed_from_the_wheel_outside_any_clone_cairn_builds_checks_and_runs_its_demo(
        released_wheel: Path, tmp_path: Path, sandbox_image: str) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = subprocess.run([str(venv / "bin/python"), "-m", "pip", "install", "--quiet", str(released_wheel)],
                         capture_output=True, text=True)
    assert pip.returncode == 0, pip.stderr[-2000:]
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    # Nothing of the checkout on any path: not the cwd, not PYTHONPATH, not the test's own venv.
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(HOME=str(tmp_path / "home"), CAIRN_RUNS_DIR=str(tmp_path / "runs"),
               PATH=f"{venv / 'bin'}:{os.environ['PATH']}", LITELLM_LOCAL_MODEL_COST_MAP="True")
    env.pop("CAIRN_MODEL", None)

    def cairn(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(venv / "bin/cairn"), *args], cwd=cwd, env=env, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=900)

    where = subprocess.run([str(venv / "bin/python"), "-c", "import orchestrator; print(orchestrator.__file__)"],
                           cwd=cwd, env=env, capture_output=True, text=True).stdout.strip()
    assert where.startswith(str(venv)), where

    version = cairn("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"cairn {orchestrator.__version__}"

    built = cairn("image", "build")
    assert built.returncode == 0, built.stderr[-2000:]
    # The same files give the same tag: the checkout's image serves the wheel, nothing is rebuilt.
    assert built.stdout.strip() == sandbox_image
    assert "building the sandbox image" not in built.stderr

    doctor = cairn("doctor", "--model", "scripted:demo")  # the model a run would use: the built-in script's
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert sandbox_image in doctor.stdout and "scripted:demo" in doctor.stdout

    demo = cairn("demo")
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]
    shown = json.loads(cairn("show", "@last", "--json").stdout)
    assert shown["status"] == "done"
    report = cairn("report", shown["id"], "-o", str(tmp_path / "report.html"))
    assert report.returncode == 0, report.stderr
    assert "<script>" in (tmp_path / "report.html").read_text()

    # The run's sandbox had the installed package's toolbox mounted, not a checkout's.
    import docker

    client = docker.from_env()
    container = client.containers.get(f"cairn-{shown['id']}")
    try:
        toolbox = next(m["Source"] for m in container.attrs["Mounts"] if m["Destination"] == "/opt/cairn")
        assert toolbox.startswith(str(venv)) and str(REPO) not in toolbox
    finally:
        assert cairn("rm", shown["id"]).returncode == 0


@pytest.mark.docker
def test_cairn_version_and_the_images_label_agree(sandbox_image: str) -> None:
    import docker

    from orchestrator.cli.shared import version

    label = docker.from_env().images.get(sandbox_image).labels.get("org.cairn.version")
    assert label == version() == orchestrator.__version__


def test_the_version_is_written_once() -> None:
    pyproject = (REPO / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and "\nversion =" not in pyproject.split("[tool.setuptools.dynamic]")[0]
    written = [path for path in (REPO / "orchestrator").rglob("*.py") if "__version__ = " in path.read_text()]
    assert written == [REPO / "orchestrator/version.py"]
