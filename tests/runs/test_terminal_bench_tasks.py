"""Terminal-Bench-style tasks, end to end through the `cairn` command line.

Each task is a project in `/app` of a Docker image built here (FROM the sandbox image cairn builds, so
nothing is pulled), owned by root, with a check command that says whether the task is done. The scripted
model plays the task's solution, and the check must pass; it plays a no-op (task_done at once), and the
check must fail. A solved task also leaves the things a user looks at afterwards: `cairn show --json`
says the check passed, `cairn files` lists the file the solution changed in /app, the run's workspace
belongs to the host user, and the run's container is kept, stopped.

The tasks need what real coding work needs and the old cage refused: `apt-get install`, `pip install`,
`chmod`, a root-only directory, a script run from /tmp. They are played on two images: one on cairn's
sandbox image, and one on a plain Debian without Python (the toolbox runs on the Python cairn carries
in). Under `--lockdown` (the cage kept for untrusted work) the /tmp task and the apt-get task fail the
way they should: noexec /tmp, a read-only root, no root.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from tests.sandbox_fixtures import build_image, docker_client, sandbox_image  # noqa: F401 - fixtures
from tests.runs.test_survives_sigkill import Cairn
from tests.loop_helpers import call, done, turn

pytestmark = pytest.mark.docker

# The project every task starts from: root's, as in Terminal-Bench images. The sandbox image ends with
# `USER cairn`; the project is made as root and the image keeps root as its user, as task images do.
TASKS_DOCKERFILE = """FROM {base}
USER root
{project}
WORKDIR /app
"""
PROJECT = """RUN mkdir -p /app/secret \\
 && printf '{"a": 2, "b": 40}\\n' > /app/data.json \\
 && printf 'import tabulate\\nprint(tabulate.tabulate([[1, 2]], tablefmt="plain"))\\n' > /app/table.py \\
 && printf '#!/bin/sh\\necho built > /app/build.out\\n' > /app/build.sh && chmod 644 /app/build.sh \\
 && printf 's3cret\\n' > /app/secret/token && chmod 600 /app/secret/token && chmod 700 /app/secret \\
 && chown -R root:root /app"""
BASE_WITHOUT_PYTHON = "cairn-base:bookworm"  # a debootstrap minbase Debian: cairn carries its Python in

APT_MIRROR = "http://deb.debian.org/debian/dists/bookworm/InRelease"
PYPI = "https://pypi.org/simple/tabulate/"

@dataclass(frozen=True)
class Task:
    """A task: its solution (shell commands the scripted model runs, one step each), the check that
    says it is done, the /app file the solution changes, and whether it needs the network."""

    name: str
    solution: tuple[str, ...]
    check: str
    changed: str
    network: str | None = None  # "apt" or "pypi": which registry the task needs to reach


TASKS = [
    Task("apt-get install",
         ("apt-get update -qq && apt-get install -y -qq --no-install-recommends jq >/dev/null",
          "jq '.a + .b' data.json > answer.txt"),
         check='command -v jq >/dev/null && test "$(cat answer.txt)" = 42',
         changed="answer.txt", network="apt"),
    Task("pip install",
         # An image without Python (the bare one) gets it from Debian first; PEP 668 asks pip to be told
         # that a root shell may install into the system's Python.
         ("command -v pip || { apt-get update -qq && apt-get install -y -qq python3-pip >/dev/null; }",
          "pip install -q --break-system-packages tabulate", "python3 table.py > table.txt"),
         check='python3 -c "import tabulate" && test "$(cat table.txt)" = "1  2"',
         changed="table.txt", network="pypi"),
    Task("chmod +x",
         ("chmod +x build.sh && ./build.sh",),
         check="test -x build.sh && ./build.sh && grep -qx built build.out",
         changed="build.out"),
    Task("root-only directory",
         ("rev secret/token > secret/answer",),
         check='test "$(stat -c %a secret)" = 700 && test "$(cat secret/answer)" = "$(rev secret/token)"',
         changed="secret/answer"),
    Task("script in /tmp",
         ("printf '#!/bin/sh\\nseq 1 5\\n' > /tmp/gen.sh && chmod +x /tmp/gen.sh && /tmp/gen.sh > numbers.txt",),
         check="test -x /tmp/gen.sh && /tmp/gen.sh | cmp - numbers.txt",
         changed="numbers.txt"),
]


@pytest.fixture(scope="module")
def task_image(docker_client, sandbox_image) -> str:  # noqa: F811 - fixtures
    """The tasks' image, on the sandbox image of this checkout (tagged after it, so a new sandbox image
    gets a new task image)."""
    return build_image(docker_client, TASKS_DOCKERFILE.format(base=sandbox_image, project=PROJECT),
                 f"cairn-test-tasks:{sandbox_image.rpartition(':')[2]}")


@pytest.fixture(scope="module")
def bare_task_image(docker_client, sandbox_image) -> str:  # noqa: F811 - fixtures
    """The same project on a plain Debian without Python, as many task images are: the toolbox runs on
    the Python cairn carries in."""
    try:
        docker_client.api.inspect_image(BASE_WITHOUT_PYTHON)
    except docker.errors.ImageNotFound:
        pytest.skip(f"{BASE_WITHOUT_PYTHON} is not in the engine")
    return build_image(docker_client, TASKS_DOCKERFILE.format(base=BASE_WITHOUT_PYTHON, project=PROJECT),
                 "cairn-test-tasks-bare:latest")


@pytest.fixture(scope="module")
def reachable(docker_client, task_image) -> dict[str, str | None]:  # noqa: F811
    """Whether a container on the bridge network reaches the Debian mirror and PyPI, probed once: None
    when it does, else why not (the tasks that need it skip with that reason)."""
    probe = ("curl -fsS -o /dev/null --max-time 20 {url} 2>&1 && echo ok")
    out = {}
    for name, url in (("apt", APT_MIRROR), ("pypi", PYPI)):
        try:
            said = docker_client.containers.run(task_image, ["sh", "-c", probe.format(url=url)], network="bridge",
                                                remove=True, stderr=True).decode().strip()
        except docker.errors.ContainerError as exc:
            said = (exc.stderr or b"").decode().strip() or str(exc)
        out[name] = None if said.endswith("ok") else f"a container cannot reach {url}: {said[-300:]}"
    return out


def play(cairn: Cairn, image: str, task: Task, commands: tuple[str, ...], *options: str
         ) -> tuple[subprocess.CompletedProcess, dict]:
    """One run of `task` with the scripted model running `commands`, a step each, then task_done."""
    turns = [turn(call("shell_exec", command=command)) for command in commands] + [done()]
    network = ["--network", "bridge"] if task.network else []
    out, _ = cairn.run("run", f"task: {task.name}", "--image", image, "--workdir", "/app", *network, *options,
                       "--check", task.check, "--max-steps", "10", "--json", "--model", cairn.script(turns),
                       timeout=600)
    assert out.stdout.strip(), out.stderr[-3000:]
    return out, json.loads(out.stdout)


def shown(cairn: Cairn, *args: str) -> subprocess.CompletedProcess:
    out, _ = cairn.here(*args)
    assert out.returncode == 0, out.stderr[-2000:]
    return out


def outputs(doc: dict) -> str:
    """What the agent's shell commands printed, as the run recorded it."""
    return "\n".join(c["result"] or "" for step in doc["steps"] for c in step["tool_calls"])


@pytest.fixture
def cairn(tmp_path: Path) -> Cairn:
    return Cairn(tmp_path)


@pytest.mark.parametrize("task", TASKS, ids=[t.name for t in TASKS])
@pytest.mark.parametrize("image", ["task_image", "bare_task_image"], ids=["sandbox-base", "no-python"])
def test_the_solution_passes_the_check_and_leaves_its_work_to_see(request, cairn, reachable, image, task):
    needs = {task.network, "apt" if task.network == "pypi" else None} - {None}  # pip may come from Debian
    for registry in sorted(needs):
        if reachable[registry]:
            pytest.skip(reachable[registry])
    out, doc = play(cairn, request.getfixturevalue(image), task, task.solution)
    assert out.returncode == 0, (doc.get("check"), outputs(doc)[-3000:], out.stderr[-2000:])
    assert doc["status"] == "done"
    run_id = doc["id"]

    assert json.loads(shown(cairn, "show", run_id, "--json").stdout)["check"]["passed"] is True
    files = shown(cairn, "files", run_id).stdout
    changed_at = {row[-1]: int(row[0]) for row in map(str.split, files.splitlines()) if row and row[0].isdigit()}
    assert changed_at.get(task.changed, 0) >= 1, files  # step 0 is the project as the image had it
    workspace = cairn.runs_dir / run_id / "workspace"
    owners = {str(p.relative_to(workspace)): p.lstat().st_uid for p in [workspace, *workspace.rglob("*")]}
    assert set(owners.values()) == {os.getuid()}, owners
    [row] = json.loads(shown(cairn, "ls", "--json").stdout)
    assert row["container"] == "stopped"


def test_every_tasks_check_fails_on_the_project_as_given(docker_client, task_image):  # noqa: F811 - fixtures
    """Each check tells a solved task from an untouched one: on the project as the image has it, in /app,
    every check fails. (One container per check, without a run: how a run reports a failed check is the
    next test's.)"""
    passed = []
    for task in TASKS:
        try:
            docker_client.containers.run(task_image, ["sh", "-c", task.check], network_mode="none", remove=True)
            passed.append(task.name)
        except docker.errors.ContainerError:
            pass
    assert passed == [], f"checks that pass with nothing done: {passed}"


def test_a_no_op_fails_the_check(cairn, task_image):
    """task_done at once: the check fails, the run is `done` with its check failed, exit code 1. (A no-op
    needs no network, so this runs where the mirror cannot be reached too.)"""
    [task] = [t for t in TASKS if t.name == "chmod +x"]
    out, doc = play(cairn, task_image, Task(task.name, (), task.check, task.changed), ())
    assert out.returncode == 1, out.stderr[-2000:]
    assert doc["status"] == "done" and doc["check"]["passed"] is False and doc["check"]["exit_code"] != 0


def test_under_lockdown_a_script_in_tmp_cannot_run_and_the_check_fails(cairn, task_image):
    """The cage: the agent is not root, the root filesystem is read-only, /tmp is noexec. What the user
    sees: the agent's command says `Permission denied` (exit code 126), the run ends `done`, its check
    `failed`, and cairn exits 1."""
    [task] = [t for t in TASKS if t.name == "script in /tmp"]
    probe = "id -u; touch /usr/cairn-probe; grep ' /tmp ' /proc/mounts"
    out, doc = play(cairn, task_image, task, (probe, *task.solution), "--lockdown")
    assert out.returncode == 1, out.stderr[-2000:]
    assert doc["status"] == "done" and doc["check"]["passed"] is False
    said = outputs(doc)
    assert "Read-only file system" in said and "noexec" in said, said
    assert "\n0\n" not in f"\n{said}"  # not root
    assert "/tmp/gen.sh: Permission denied" in said, said


def test_under_lockdown_apt_get_cannot_install_and_the_check_fails(cairn, task_image):
    """The cage refuses package installs. What the user sees: apt-get stops at once on the read-only root
    (`E: List directory /var/lib/apt/lists/partial is missing. - Acquire (30: Read-only file system)`,
    exit code 100), the next command finds no jq, and the check fails. No mirror is needed to see it."""
    [task] = [t for t in TASKS if t.name == "apt-get install"]
    out, doc = play(cairn, task_image, task, task.solution, "--lockdown")
    assert out.returncode == 1, out.stderr[-2000:]
    assert doc["status"] == "done" and doc["check"]["passed"] is False
    said = outputs(doc)
    assert "(30: Read-only file system) [exit code 100" in said and "jq: command not found" in said, said
