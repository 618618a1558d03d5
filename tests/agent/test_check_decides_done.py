"""`--check CMD`, `--check-rounds N` and `--settings FILE`: a check that says whether the task is done, a
definition-of-done loop, and run settings from a file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.context.offload import check_path
from orchestrator.errors import UsageError
from orchestrator.runs.settings import resolve_config, settings_file
from tests.batch.test_thread_batches import tool, write_script
from tests.cli.test_cli import cairn, cairn_here

# The check of these tests: the task is done when answer.txt says 42.
CHECK = "grep -qx 42 answer.txt || { echo \"answer.txt is wrong: $(cat answer.txt 2>&1)\"; exit 1; }"
WRITE_ANSWER = tool("shell_exec", command="echo 42 > answer.txt")
DONE = tool("task_done", summary="answered")


def run_json(runs_dir: Path, *args: str, env: dict[str, str] | None = None):  # noqa: ANN201
    out = cairn("run", "write 42 to answer.txt", *args, "--json", runs_dir=runs_dir, env=env)
    doc = json.loads(out.stdout) if out.stdout.strip() else None
    return out, doc


def on_host(runs_dir: Path, run_id: str, path: str) -> Path:
    """Where a file of cairn's own that the sandbox names `path` is on the host: under the workspace, or in
    `<run>/cairn/` when cairn's files are mounted at /cairn."""
    if path.startswith("/cairn/"):
        return runs_dir / run_id / "cairn" / path.removeprefix("/cairn/")
    return runs_dir / run_id / "workspace" / path


def config_of(runs_dir: Path, run_id: str) -> dict:
    return json.loads((runs_dir / run_id / "state" / "run.json").read_text())["config"]


@pytest.mark.docker
def test_a_check_that_passes_exits_0_and_show_json_says_passed(runs_dir, sandbox_image, tmp_path):
    script = write_script(tmp_path / "s.json", WRITE_ANSWER, DONE)
    out, doc = run_json(runs_dir, "--model", f"scripted:{script}", "--check", CHECK)
    assert out.returncode == 0, out.stderr[-2000:]
    shown = json.loads(cairn_here("show", doc["id"], "--json", runs_dir=runs_dir).stdout)
    assert shown["status"] == "done"
    assert shown["check"] == {"command": CHECK, "passed": True, "exit_code": 0,
                              "output_path": check_path(1)}
    [row] = json.loads(cairn_here("ls", "--json", runs_dir=runs_dir).stdout)
    assert row["check"] == "passed"


@pytest.mark.docker
def test_a_no_op_that_fails_the_check_is_exit_1_with_status_done_and_its_output_saved(runs_dir, sandbox_image, tmp_path):
    script = write_script(tmp_path / "s.json", DONE)
    out, doc = run_json(runs_dir, "--model", f"scripted:{script}", "--check", CHECK)
    assert out.returncode == 1, out.stderr[-2000:]
    assert doc["status"] == "done"
    assert doc["check"] == {"command": CHECK, "passed": False, "exit_code": 1,
                            "output_path": check_path(1)}
    saved = on_host(runs_dir, doc["id"], check_path(1))
    assert "answer.txt is wrong: cat: answer.txt: No such file or directory" in saved.read_text()
    assert "check failed (exit code 1)" in cairn_here("show", doc["id"], runs_dir=runs_dir).stdout
    listing = cairn_here("ls", runs_dir=runs_dir).stdout.splitlines()
    assert listing[0].split()[:3] == ["ID", "STATUS", "CHECK"] and listing[1].split()[1:3] == ["done", "failed"]
    page = tmp_path / "report.html"
    assert cairn_here("report", doc["id"], "-o", str(page), runs_dir=runs_dir).returncode == 0
    assert 'id="check" data-passed="failed"' in page.read_text()


@pytest.mark.docker
def test_check_rounds_send_the_failing_output_back_and_the_fixed_task_passes(runs_dir, sandbox_image, tmp_path):
    script = write_script(tmp_path / "s.json", DONE, WRITE_ANSWER, DONE)
    log = tmp_path / "requests.jsonl"
    out, doc = run_json(runs_dir, "--model", f"scripted:{script}", "--check", CHECK, "--check-rounds", "1",
                        env={"CAIRN_SCRIPTED_LOG": str(log)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert doc["status"] == "done" and doc["check"]["passed"] is True
    assert doc["check"]["output_path"] == check_path(2)
    assert [(c["round"], c["passed"], c["sent_back"]) for c in doc["checks"]] == [(1, False, True), (2, True, False)]
    requests = [json.loads(line) for line in log.read_text().splitlines()]
    told = [m["content"] for m in requests[1]["messages"] if m["role"] == "user" and "The check" in m["content"]]
    assert len(told) == 1 and "answer.txt is wrong" in told[0] and "call task_done again" in told[0]
    assert "(check round 1 of 1)" in told[0]


@pytest.mark.docker
def test_a_big_check_output_goes_back_as_a_preview_of_its_saved_file(runs_dir, sandbox_image, tmp_path):
    script = write_script(tmp_path / "s.json", DONE, DONE)
    log = tmp_path / "requests.jsonl"
    out, doc = run_json(runs_dir, "--model", f"scripted:{script}", "--check", "seq 1 200000; exit 1",
                        "--check-rounds", "1", env={"CAIRN_SCRIPTED_LOG": str(log)})
    assert out.returncode == 1, out.stderr[-2000:]
    saved = on_host(runs_dir, doc["id"], check_path(1))
    assert saved.read_text().splitlines()[-1] == "200000" and len(saved.read_text().splitlines()) == 200000
    second = json.loads(log.read_text().splitlines()[1])
    [told] = [m["content"] for m in second["messages"] if m["role"] == "user" and "The check" in m["content"]]
    assert f"saved whole to {check_path(1)}" in told and len(told) < 20_000
    assert told.count("\n1\n") + told.count("\n200000\n") >= 1  # its head or its tail


@pytest.mark.docker
def test_rounds_run_out_and_the_run_ends_with_its_check_failed(runs_dir, sandbox_image, tmp_path):
    script = write_script(tmp_path / "s.json", DONE, DONE, DONE)
    out, doc = run_json(runs_dir, "--model", f"scripted:{script}", "--check", CHECK, "--check-rounds", "1")
    assert out.returncode == 1, out.stderr[-2000:]
    assert doc["status"] == "done" and len(doc["steps"]) == 2
    assert [(c["passed"], c["sent_back"]) for c in doc["checks"]] == [(False, True), (False, False)]


@pytest.mark.docker
def test_the_check_runs_in_the_work_directory_in_a_fresh_shell(runs_dir, sandbox_image, tmp_path):
    """What the agent did to its own shell (cd, variables, functions) neither helps nor breaks the check."""
    script = write_script(tmp_path / "s.json",
                          tool("shell_exec", command="cd /tmp && export SECRET=agent && grep() { return 0; }"), DONE)
    check = 'test "$(pwd)" = /workspace && test -z "${SECRET+set}" && ! grep -q x /dev/null'
    out, doc = run_json(runs_dir, "--model", f"scripted:{script}", "--check", check)
    assert out.returncode == 0, (out.stderr[-2000:], doc and doc["check"])


@pytest.mark.docker
@pytest.mark.parametrize("name", ["cd", "builtin", "command", "env", "exec"])
def test_a_function_in_the_agents_shell_cannot_make_a_failing_check_pass(runs_dir, sandbox_image, tmp_path, name):
    """The check runs in a shell process of its own: nothing the agent defined in its shell exists there,
    not even a function shadowing the builtins a wrapper around the check would use."""
    script = write_script(tmp_path / "s.json", tool("shell_exec", command=f"{name}() {{ exit 0; }}; export -f {name}"),
                          DONE)
    out, doc = run_json(runs_dir, "--model", f"scripted:{script}", "--check", "false")
    assert out.returncode == 1, (out.stderr[-2000:], doc and doc["check"])
    assert doc["check"]["passed"] is False and doc["check"]["exit_code"] == 1


@pytest.mark.docker
def test_what_a_check_leaves_running_is_killed_when_it_ends(runs_dir, sandbox_image, tmp_path):
    script = write_script(tmp_path / "s.json", DONE, tool("shell_exec", command="pgrep -f 'sleep 1234' || echo none"),
                          DONE)
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"check": {"command": "sleep 1234 & false", "rounds": 1}}))
    out, doc = run_json(runs_dir, "--model", f"scripted:{script}", "--settings", str(settings))
    shown = json.loads(cairn_here("show", doc["id"], "--json", runs_dir=runs_dir).stdout)
    [pgrep] = [call for step in shown["steps"] for call in step["tool_calls"] if call["name"] == "shell_exec"]
    assert "none" in pgrep["result"], pgrep


@pytest.mark.docker
def test_a_check_that_runs_too_long_is_killed_and_fails(runs_dir, sandbox_image, tmp_path):
    script = write_script(tmp_path / "s.json", DONE)
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"check": {"command": "sleep 30", "timeout": 1}}))
    out, doc = run_json(runs_dir, "--model", f"scripted:{script}", "--settings", str(settings))
    assert out.returncode == 1, out.stderr[-2000:]
    assert doc["check"]["exit_code"] == 124 and doc["checks"][0]["timed_out"] is True


@pytest.mark.docker
def test_resuming_a_run_whose_check_failed_gives_the_agent_the_check_output(runs_dir, sandbox_image, tmp_path):
    out, doc = run_json(runs_dir, "--model", f"scripted:{write_script(tmp_path / 'a.json', DONE)}", "--check", CHECK)
    assert out.returncode == 1, out.stderr[-2000:]
    log = tmp_path / "requests.jsonl"
    fix = write_script(tmp_path / "b.json", WRITE_ANSWER, DONE)
    out = cairn("resume", doc["id"], "--model", f"scripted:{fix}", "--json", runs_dir=runs_dir,
                env={"CAIRN_SCRIPTED_LOG": str(log)})
    assert out.returncode == 0, out.stderr[-2000:]
    resumed = json.loads(out.stdout)
    assert resumed["check"] == {"command": CHECK, "passed": True, "exit_code": 0,
                                "output_path": check_path(2)}
    first = json.loads(log.read_text().splitlines()[0])
    told = [m["content"] for m in first["messages"] if m["role"] == "user" and "answer.txt is wrong" in m["content"]]
    assert len(told) == 1 and told[0].startswith("The check of this task failed")


@pytest.mark.docker
def test_a_sub_agents_task_done_does_not_run_the_check(runs_dir, sandbox_image, tmp_path):
    script = write_script(tmp_path / "s.json", tool("agent_delegate", task="say done"),
                          DONE,  # the sub-agent's turn
                          WRITE_ANSWER, DONE)
    out, doc = run_json(runs_dir, "--model", f"scripted:{script}", "--check", CHECK)
    assert out.returncode == 0, out.stderr[-2000:]
    assert [c["round"] for c in doc["checks"]] == [1]


# -- --settings FILE ---------------------------------------------------------------------------------


def test_settings_come_between_the_template_and_the_command_line(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"model": {"context_window": 32768}, "context": {"high_water": 0.8},
                                "sandbox": {"network": "none", "memory": "1g"}, "check": {"command": "make test"}}))
    cfg = resolve_config({"sandbox": {"memory": "3g"}, "check": {"rounds": 2}}, template="research",
                         layers=[settings_file(path)])
    assert cfg.model.context_window == 32768 and cfg.context.high_water == 0.8
    assert cfg.sandbox.network == "none"  # the file over the template's bridge
    assert cfg.sandbox.memory == "3g"  # the command line over the file
    assert (cfg.check.command, cfg.check.rounds) == ("make test", 2)


@pytest.mark.parametrize("content, says", [
    ("{nope", "not valid JSON"),
    ("[1, 2]", "must be a JSON object of settings"),
    ('{"context": {"hihg_water": 0.8}}', "invalid setting context.hihg_water: unknown setting (a typo?)"),
    ('{"check": {"rounds": -1}}', "invalid setting check.rounds"),
])
def test_a_bad_settings_file_is_a_one_line_usage_error_naming_it(tmp_path, content, says):
    path = tmp_path / "settings.json"
    path.write_text(content)
    with pytest.raises(UsageError) as caught:
        settings_file(path)
    assert caught.value.message.startswith(f"--settings {path}: ") and says in caught.value.message
    assert "\n" not in caught.value.message


def test_run_refuses_a_bad_settings_file_before_any_run_exists(runs_dir, tmp_path):
    out = cairn_here("run", "task", "--settings", str(tmp_path / "missing.json"), runs_dir=runs_dir)
    assert out.returncode == 2
    assert out.stderr.splitlines() == [f"cairn: error: --settings {tmp_path / 'missing.json'}: cannot read it "
                                       "(No such file or directory)"]
    assert not runs_dir.exists() or not list(runs_dir.iterdir())


def test_run_stores_the_settings_files_values_and_the_options_win(runs_dir, tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"limits": {"max_steps": 7, "max_cost": 2.5}, "check": {"command": "true"}}))
    # No engine: the run is made, with its config, and fails to start; that is enough to read its settings.
    cairn_here("run", "task", "--settings", str(path), "--max-steps", "5", "--check-rounds", "3", runs_dir=runs_dir,
               env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    [run] = [p for p in runs_dir.iterdir() if (p / "state").is_dir()]
    cfg = config_of(runs_dir, run.name)
    assert cfg["limits"]["max_steps"] == 5 and cfg["limits"]["max_cost"] == 2.5
    assert cfg["check"] == {"command": "true", "rounds": 3, "timeout": 600.0}


def test_an_agent_folders_cairn_json_carries_its_check(runs_dir, tmp_path):
    folder = tmp_path / "agent"
    folder.mkdir()
    (folder / "agent.json").write_text(json.dumps({"servers": []}))
    (folder / "cairn.json").write_text(json.dumps({"check": {"command": "pytest -q", "rounds": 1}}))
    cairn_here("run", "task", "--config", str(folder), runs_dir=runs_dir,
               env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    [run] = [p for p in runs_dir.iterdir() if (p / "state").is_dir()]
    assert config_of(runs_dir, run.name)["check"]["command"] == "pytest -q"
