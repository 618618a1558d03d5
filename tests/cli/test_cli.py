"""The `cairn` command as a person or a script uses it: exit codes, one-line errors, JSON documents."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.in_process import cairn_in_process


def cairn(*args: str, runs_dir: Path, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args],
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        env={**os.environ, "CAIRN_RUNS_DIR": str(runs_dir), "CAIRN_MODEL": "scripted:demo", **(env or {})},
    )


def cairn_here(*args: str, runs_dir: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`cairn` in this process (tests/in_process.py): for commands that end without a sandbox."""
    return cairn_in_process(*args, env={**os.environ, "CAIRN_RUNS_DIR": str(runs_dir), "CAIRN_MODEL": "scripted:demo",
                                        **(env or {})})


def test_commands_that_call_no_model_do_not_import_litellm(runs_dir):
    code = ("import sys; from orchestrator.cli import app; from typer.testing import CliRunner; "
            "CliRunner().invoke(app, ['ls']); CliRunner().invoke(app, ['--help']); "
            "print('litellm' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "CAIRN_RUNS_DIR": str(runs_dir)})
    assert out.stdout.strip() == "False"


@pytest.mark.docker
def test_reading_a_real_run_does_not_import_litellm(runs_dir, sandbox_image, tmp_path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": [
        {"tool_calls": [{"name": "todo_write", "arguments": {"content": "- [x] say ok"}}]},
        {"tool_calls": [{"name": "task_done", "arguments": {"summary": "ok"}}]}]}))
    assert cairn("run", "say ok", "--model", f"scripted:{script}", runs_dir=runs_dir).returncode == 0
    code = ("import sys; from orchestrator.cli import app; from typer.testing import CliRunner; "
            "codes = [CliRunner().invoke(app, [command, '@last']).exit_code for command in ('show', 'todo', 'files')]; "
            "codes.append(CliRunner().invoke(app, ['ls']).exit_code); "
            "print(codes, 'litellm' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "CAIRN_RUNS_DIR": str(runs_dir)})
    assert out.stdout.strip() == "[0, 0, 0, 0] False"


def test_an_unknown_run_id_is_a_one_line_usage_error(runs_dir):
    out = cairn_here("show", "no-such-run", runs_dir=runs_dir)
    assert out.returncode == 2
    assert out.stderr.splitlines()[0] == f"cairn: error: no run 'no-such-run' in {runs_dir}"


def test_a_bad_option_value_is_a_one_line_usage_error(runs_dir):
    out = cairn_here("run", "task", "--network", "host", runs_dir=runs_dir)
    assert out.returncode == 2
    assert "sandbox.network" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert not list(runs_dir.glob("*"))  # nothing was created for a run that could not start


def test_a_run_without_any_model_is_a_usage_error_and_nothing_starts(runs_dir):
    out = cairn_here("run", "task", runs_dir=runs_dir, env={"CAIRN_MODEL": ""})
    assert out.returncode == 2
    assert out.stderr.startswith("cairn: error: no model given: pass --model M")
    assert not runs_dir.exists() or not list(runs_dir.iterdir())


def test_a_malformed_script_is_a_usage_error_and_no_run_is_made(runs_dir, tmp_path):
    script = tmp_path / "script.json"
    script.write_text('{"turns": 5}')
    out = cairn_here("run", "task", "--model", f"scripted:{script}", runs_dir=runs_dir)
    assert out.returncode == 2
    assert out.stderr.splitlines()[0] == f'cairn: error: script {script} must be a JSON object with a "turns" list'
    assert not runs_dir.exists() or not list(runs_dir.iterdir())


def test_resume_with_a_missing_script_keeps_the_run_as_it_was(runs_dir):
    cairn_here("run", "task", runs_dir=runs_dir, env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    [meta_path] = runs_dir.glob("*/state/run.json")
    before = meta_path.read_text()
    out = cairn_here("resume", meta_path.parents[1].name, "--model", "scripted:no-such-script", runs_dir=runs_dir)
    assert out.returncode == 2
    assert "no script file or built-in script named 'no-such-script'" in out.stderr
    assert meta_path.read_text() == before


def test_no_task_and_no_terminal_is_a_usage_error(runs_dir):
    out = cairn_here("run", runs_dir=runs_dir)
    assert out.returncode == 2
    assert "no task given" in out.stderr


def test_a_missing_docker_engine_exits_4_with_what_to_do(runs_dir):
    out = cairn_here("run", "task", runs_dir=runs_dir, env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert out.returncode == 4
    assert "no Docker engine answers" in out.stderr and "hint:" in out.stderr
    [meta] = [json.loads(p.read_text()) for p in runs_dir.glob("*/state/run.json")]
    assert meta["status"] == "failed"


def test_ls_on_an_empty_runs_dir_says_so(runs_dir):
    out = cairn_here("ls", runs_dir=runs_dir)
    assert out.returncode == 0 and "no runs yet" in out.stdout
    assert json.loads(cairn_here("ls", "--json", runs_dir=runs_dir).stdout) == []


@pytest.mark.docker
def test_the_demo_finishes_and_show_json_follows_the_contract(runs_dir, sandbox_image):
    out = cairn("demo", runs_dir=runs_dir)
    assert out.returncode == 0, out.stderr[-2000:]
    # What the README promises it ends with: the run's timeline, a line a call, never a JSON document.
    printed = out.stdout.strip().splitlines()
    assert printed[0].startswith("run ") and "[done]" in printed[0], out.stdout[:500]
    assert any("$ python3 primes.py 10" in line for line in printed)
    assert any(line.startswith("result: ") for line in printed)
    assert len(printed) < 40 and not out.stdout.lstrip().startswith("{")
    [row] = json.loads(cairn_here("ls", "--json", runs_dir=runs_dir).stdout)
    assert row["status"] == "done" and row["steps"] == 8
    doc = json.loads(cairn_here("show", row["id"][:12], "--json", runs_dir=runs_dir).stdout)
    assert {"id", "status", "task", "model", "steps", "usage"} <= doc.keys()
    assert {"prompt_tokens", "cached_tokens", "completion_tokens", "cost_usd", "cache_hit_ratio"} <= doc["usage"].keys()
    call = doc["steps"][4]["tool_calls"][0]
    assert {"name", "arguments", "result", "error", "offloaded_to"} <= call.keys()
    assert call["offloaded_to"] == "/cairn/obs/5-shell_exec.txt"
    assert doc["steps"][2]["tool_calls"][0]["error"] is True  # the NameError
    assert "7919" in doc["result"]
    assert (runs_dir / row["id"] / "workspace" / "primes.py").is_file()


@pytest.mark.docker
def test_run_json_prints_only_the_document(runs_dir, sandbox_image, tmp_path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": [{"tool_calls": [{"name": "task_done", "arguments": {"summary": "ok"}}]}]}))
    out = cairn("run", "say ok", "--model", f"scripted:{script}", "--json", runs_dir=runs_dir)
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)
    assert doc["status"] == "done" and doc["result"] == "ok"


@pytest.mark.docker
def test_a_budget_stop_exits_3(runs_dir, sandbox_image, tmp_path):
    script = tmp_path / "script.json"
    turn = {"tool_calls": [{"name": "shell_exec", "arguments": {"command": "true"}}]}
    script.write_text(json.dumps({"turns": [turn] * 5}))
    out = cairn("run", "loop", "--model", f"scripted:{script}", "--max-steps", "2", "--json", runs_dir=runs_dir)
    assert out.returncode == 3
    assert json.loads(out.stdout)["status"] == "budget"


@pytest.mark.docker
def test_a_run_stopped_by_its_budget_resumes_with_a_raised_one(runs_dir, sandbox_image, tmp_path):
    first, rest = tmp_path / "first.json", tmp_path / "rest.json"
    first.write_text(json.dumps({"turns": [{"tool_calls": [{"name": "shell_exec", "arguments": {"command": "true"}}]}] * 3}))
    rest.write_text(json.dumps({"turns": [{"tool_calls": [{"name": "task_done", "arguments": {"summary": "ok"}}]}]}))
    out = cairn("run", "loop", "--model", f"scripted:{first}", "--max-steps", "2", "--json", runs_dir=runs_dir)
    run_id = json.loads(out.stdout)["id"]
    again = cairn("resume", run_id, "--max-steps", "5", "--model", f"scripted:{rest}", "--json", runs_dir=runs_dir)
    assert again.returncode == 0, again.stderr[-2000:]
    doc = json.loads(again.stdout)
    assert doc["status"] == "done" and len(doc["steps"]) == 3


@pytest.mark.docker
def test_interactive_mode_continues_the_same_run_with_each_message(runs_dir, sandbox_image, tmp_path):
    import pty
    import select
    import time

    script = tmp_path / "script.json"
    done = {"tool_calls": [{"name": "task_done", "arguments": {"summary": "ok"}}]}
    script.write_text(json.dumps({"turns": [done, done]}))
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "run", "--model", f"scripted:{script}"],
        stdin=follower, stdout=follower, stderr=follower,
        env={**os.environ, "CAIRN_RUNS_DIR": str(runs_dir)},
    )
    os.close(follower)

    def wait_for(prompt: bytes, seconds: float = 120) -> None:
        seen, deadline = b"", time.time() + seconds
        while prompt not in seen:
            assert time.time() < deadline, seen
            if select.select([leader], [], [], 1)[0]:
                seen += os.read(leader, 1024)

    wait_for(b"task> ")
    os.write(leader, b"first task\n")
    wait_for(b"you> ")
    os.write(leader, b"and one more thing\n")
    wait_for(b"you> ")
    os.write(leader, b"\x04")  # Ctrl-D ends the session
    assert proc.wait(timeout=60) == 0
    [run] = [p for p in runs_dir.iterdir()]
    users = [json.loads(line) for line in (run / "state/events.jsonl").read_text().splitlines()]
    texts = [e["text"] for e in users if e["type"] == "user_message"]
    assert texts == ["and one more thing"]
    assert [e["task"] for e in users if e["type"] == "run_started"] == ["first task"]


@pytest.mark.docker
def test_shell_opens_in_the_runs_kept_container_on_its_workspace(runs_dir, sandbox_image, tmp_path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": [{"tool_calls": [{"name": "task_done", "arguments": {"summary": "ok"}}]}]}))
    assert cairn("run", "nothing", "--model", f"scripted:{script}", "--json", runs_dir=runs_dir).returncode == 0
    [run] = list(runs_dir.iterdir())
    out = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "shell", run.name],
        input="echo made-in-shell > from-shell.txt; id -u; touch /usr/x && echo writable root\n",
        capture_output=True, text=True, timeout=300, env={**os.environ, "CAIRN_RUNS_DIR": str(runs_dir)},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert (run / "workspace" / "from-shell.txt").read_text() == "made-in-shell\n"
    assert out.stdout.splitlines() == ["0", "writable root"]  # the agent's machine: root inside the wall
    assert "a shell in the container of run" in out.stderr


@pytest.mark.docker
def test_an_ssh_docker_host_runs_the_whole_demo_through_paramiko(runs_dir, sandbox_image, tmp_path):
    sshd = Path("/usr/sbin/sshd")
    if not sshd.exists() or os.geteuid() != 0:
        pytest.skip("needs root and openssh-server (scripts/setup.sh installs it on Debian)")
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    keygen = ["ssh-keygen", "-q", "-t", "ed25519", "-N", ""]
    subprocess.run([*keygen, "-f", str(tmp_path / "host_key")], check=True)
    subprocess.run([*keygen, "-f", str(home / ".ssh" / "id_ed25519")], check=True)
    (tmp_path / "authorized_keys").write_text((home / ".ssh" / "id_ed25519.pub").read_text())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    host_key = (tmp_path / "host_key.pub").read_text().split()
    (home / ".ssh" / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_key[0]} {host_key[1]}\n")
    Path("/run/sshd").mkdir(exist_ok=True)  # its privilege separation directory
    server = subprocess.Popen([str(sshd), "-D", "-e", "-p", str(port), "-h", str(tmp_path / "host_key"),
                               "-o", "ListenAddress=127.0.0.1", "-o", f"AuthorizedKeysFile={tmp_path}/authorized_keys",
                               "-o", "StrictModes=no", "-o", "PermitRootLogin=prohibit-password",
                               "-o", f"PidFile={tmp_path}/sshd.pid"], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not _accepts(port):
            assert server.poll() is None and time.monotonic() < deadline, server.stderr.read()
            time.sleep(0.1)
        out = cairn("demo", runs_dir=runs_dir,
                    env={"DOCKER_HOST": f"ssh://root@127.0.0.1:{port}", "HOME": str(home)})
    finally:
        server.terminate()
        _, log = server.communicate(timeout=30)
    assert out.returncode == 0, out.stderr[-3000:]
    [meta] = [json.loads(p.read_text()) for p in runs_dir.glob("*/state/run.json")]
    assert meta["status"] == "done" and meta["steps"] == 8
    assert "Accepted publickey for root from 127.0.0.1" in log  # the engine was reached through ssh


def _accepts(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize("value", ["soon", "5x", "-1", "0", "1h30"])
def test_a_bad_max_time_is_a_one_line_usage_error_for_run_and_resume(runs_dir, value):
    for command in (["run", "task"], ["resume", "some-run"]):
        out = cairn_here(*command, "--max-time", value, runs_dir=runs_dir)
        assert out.returncode == 2
        assert out.stderr.splitlines() == [f"cairn: error: --max-time {value!r} is not a duration: give 90m, 1h30m, 45s "
                                           "or a number of seconds"]
    assert not runs_dir.exists() or not list(runs_dir.iterdir())


def test_max_time_is_the_runs_time_limit_and_resume_sets_it_again(runs_dir):
    no_engine = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}  # the run is made, its sandbox never starts
    cairn_here("run", "task", "--max-time", "1h30m", runs_dir=runs_dir, env=no_engine)
    [meta_path] = runs_dir.glob("*/state/run.json")
    assert json.loads(meta_path.read_text())["config"]["limits"]["max_wall_seconds"] == 5400
    cairn_here("resume", meta_path.parents[1].name, "--max-time", "7200", runs_dir=runs_dir, env=no_engine)
    assert json.loads(meta_path.read_text())["config"]["limits"]["max_wall_seconds"] == 7200
