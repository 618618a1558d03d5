"""The conventions a person expects of a CLI they live in (issue 11): every end says why, in show, ls and
the report; --version, rm, stop, @last, short ids, report without -o; diff with --stat, paths and
--all; output that fits where it goes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.in_process import cairn_in_process

ROOT = Path(__file__).resolve().parents[2]
LONG_TASK = "write the files a.txt and src/b.txt, print twenty thousand numbers, and then carry on with the rest"


def cairn(*args: str, runs_dir: Path, cwd: Path | None = None, env: dict[str, str] | None = None,
          timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args],
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, cwd=cwd or ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "CAIRN_RUNS_DIR": str(runs_dir), "CAIRN_MODEL": "scripted:demo",
             **(env or {})},
    )


def cairn_here(*args: str, runs_dir: Path, cwd: Path | None = None, env: dict[str, str] | None = None
               ) -> subprocess.CompletedProcess:
    """`cairn` in this process (tests/in_process.py): for commands that end without a sandbox."""
    return cairn_in_process(*args, cwd=cwd or ROOT, env={**os.environ, "CAIRN_RUNS_DIR": str(runs_dir),
                                                         "CAIRN_MODEL": "scripted:demo", **(env or {})})


def script(path: Path, *turns: dict) -> str:
    path.write_text(json.dumps({"turns": list(turns)}))
    return f"scripted:{path}"


def shell(command: str) -> dict:
    return {"tool_calls": [{"name": "shell_exec", "arguments": {"command": command}}]}


DONE = {"tool_calls": [{"name": "task_done", "arguments": {"summary": "ok"}}]}


@pytest.fixture(scope="module")
def failed(tmp_path_factory, sandbox_image):
    """A run whose first step writes two files, a file where runs made before /cairn kept cairn's own
    files (workspace/.cairn), and a long output (saved to cairn's own files, now outside the workspace),
    and whose model then refuses the second request: it fails with a reason."""
    base = tmp_path_factory.mktemp("failed")
    runs_dir = base / "runs"
    model = script(base / "script.json", shell("echo hi > a.txt; mkdir -p src .cairn; echo x > src/b.txt; echo o > .cairn/n; "
                                                  "seq 1 20000"),
                   {"fail": 401})
    out = cairn("run", LONG_TASK, "--model", model, runs_dir=runs_dir)
    [run] = [p.name for p in runs_dir.iterdir()]
    return {"runs_dir": runs_dir, "id": run, "out": out}


# -- every end says why -------------------------------------------------------------------------


@pytest.mark.docker
def test_a_failed_run_exits_1_and_says_why(failed):
    assert failed["out"].returncode == 1
    assert re.search(r"run \S+: failed: .*401", failed["out"].stderr)


@pytest.mark.docker
def test_show_says_why_a_failed_run_ended(failed):
    out = cairn_here("show", failed["id"], runs_dir=failed["runs_dir"])
    assert out.returncode == 0
    [line] = [line for line in out.stdout.splitlines() if line.startswith("failed: ")]
    assert "401" in line


@pytest.mark.docker
def test_show_json_gives_the_reason_and_the_event_it_came_from(failed):
    doc = json.loads(cairn_here("show", failed["id"], "--json", runs_dir=failed["runs_dir"]).stdout)
    assert doc["status"] == "failed" and "401" in doc["error"]["reason"] and "\n" not in doc["error"]["reason"]
    lines = (failed["runs_dir"] / failed["id"] / "state/events.jsonl").read_text().splitlines()
    event = json.loads(lines[doc["error"]["event"]["index"]])
    assert event["type"] == doc["error"]["event"]["type"] == "status"
    assert event["status"] == "failed" and event["reason"] == doc["error"]["reason"]
    assert {"id", "status", "task", "model", "steps", "usage", "result"} <= doc.keys()  # the contract's, kept


@pytest.mark.docker
def test_ls_gives_the_reason_of_a_run_that_did_not_finish(failed):
    [row] = json.loads(cairn_here("ls", "--json", runs_dir=failed["runs_dir"]).stdout)
    assert "401" in row["reason"]
    head, line = cairn_here("ls", runs_dir=failed["runs_dir"]).stdout.splitlines()
    assert head.split()[-1] == "REASON" and line.endswith(row["reason"])  # piped: whole, not cut


@pytest.mark.docker
def test_report_without_o_writes_beside_the_run_with_a_banner_saying_why(failed, tmp_path):
    out = cairn_here("report", failed["id"][:6], runs_dir=failed["runs_dir"], cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    written = Path(out.stdout.strip())
    assert written == (failed["runs_dir"] / failed["id"] / "report.html").absolute()
    page = written.read_text()
    banner = re.search(r'<div class="banner failed" id="reason"[^>]*>(.*?)</div>', page)
    assert banner and "401" in banner.group(1)


# -- diff ---------------------------------------------------------------------------------------


@pytest.mark.docker
def test_diff_leaves_out_cairns_own_files_unless_all(failed):
    shown = cairn_here("diff", failed["id"], runs_dir=failed["runs_dir"]).stdout
    assert "+++ b/a.txt" in shown and "+++ b/src/b.txt" in shown and ".cairn/" not in shown
    everything = cairn_here("diff", failed["id"], "--all", runs_dir=failed["runs_dir"]).stdout
    assert "+++ b/.cairn/n" in everything


@pytest.mark.docker
def test_diff_stat_lists_the_files_and_how_much_changed(failed):
    out = cairn_here("diff", failed["id"], "--stat", runs_dir=failed["runs_dir"]).stdout.splitlines()
    assert [line.split("|")[0].strip() for line in out[:-1]] == ["a.txt", "src/b.txt"]
    assert out[-1].strip() == "2 files changed, 2 insertions(+)"


@pytest.mark.docker
def test_diff_path_arguments_limit_it_to_those_paths(failed):
    out = cairn_here("diff", failed["id"], "--", "src/", runs_dir=failed["runs_dir"]).stdout
    assert "+++ b/src/b.txt" in out and "a.txt" not in out


@pytest.mark.docker
def test_diff_of_a_step_the_run_does_not_have_is_a_usage_error(failed):
    out = cairn_here("diff", failed["id"], "--step", "99", runs_dir=failed["runs_dir"])
    assert out.returncode == 2
    assert out.stderr.strip() == f"cairn: error: run {failed['id']} has no step 99: its steps are 0 to 1"


@pytest.mark.docker
def test_piped_output_is_never_wrapped(failed):
    assert f"task: {LONG_TASK}\n" in cairn_here("show", failed["id"], runs_dir=failed["runs_dir"]).stdout
    # the live display's action line, piped (rich would wrap it at 80 columns)
    assert ('[1] $ echo hi > a.txt; mkdir -p src .cairn; echo x > src/b.txt; '
            'echo o > .cairn/n; seq 1 20000\n') in failed["out"].stderr
    assert "\x1b[" not in failed["out"].stderr  # and no escape codes


@pytest.mark.docker
def test_show_step_prints_the_step_whole_as_text(failed):
    out = cairn_here("show", failed["id"], "--step", "1", runs_dir=failed["runs_dir"])
    assert out.returncode == 0
    assert out.stdout.startswith("step 1: 1 model request(s)")
    assert "── shell_exec (done," in out.stdout and "    19999\n" in out.stdout  # the whole output
    step = cairn_here("show", failed["id"], "--step", "1", "--json", runs_dir=failed["runs_dir"])
    assert json.loads(step.stdout)["index"] == 1


# -- naming runs ----------------------------------------------------------------------------------


def _made(runs_dir: Path, created: float, name: str | None = None) -> str:
    from orchestrator.store.run_dir import RunDir

    run = RunDir.create(runs_dir, {"task": f"made at {created}", "status": "done"})
    meta = run.read_meta()
    if name is not None:  # a run named as cairn named runs before
        run.root.rename(runs_dir / name)
        run = RunDir(runs_dir / name)
    run.write_meta({**meta, "id": run.id, "created": created})
    return run.id


def test_at_last_and_dash_name_the_newest_run(runs_dir):
    _made(runs_dir, 3000.0)
    newest = _made(runs_dir, 5000.0)
    _made(runs_dir, 4000.0)
    for ref in ("@last", "-"):
        assert json.loads(cairn_here("show", ref, "--json", runs_dir=runs_dir).stdout)["id"] == newest


def test_at_last_without_any_run_is_a_usage_error(runs_dir):
    out = cairn_here("show", "@last", runs_dir=runs_dir)
    assert out.returncode == 2 and out.stderr.startswith("cairn: error: @last names the newest run, and there is none")


def test_new_run_ids_start_with_their_random_part_so_a_short_prefix_is_unique(runs_dir):
    ids = [_made(runs_dir, 1000.0 + i) for i in range(5)]
    assert all(re.fullmatch(r"[0-9a-z]{6}-\d{8}-\d{4}", i) for i in ids)
    for run_id in ids:
        prefix = next(run_id[:n] for n in range(1, 7) if sum(i.startswith(run_id[:n]) for i in ids) == 1)
        assert json.loads(cairn_here("show", prefix, "--json", runs_dir=runs_dir).stdout)["id"] == run_id


def test_an_old_date_first_id_still_resolves_by_prefix(runs_dir):
    old = _made(runs_dir, 1000.0, name="20261121-181300-3fa9c1")
    _made(runs_dir, 2000.0)
    assert json.loads(cairn_here("show", "2026112", "--json", runs_dir=runs_dir).stdout)["id"] == old


def test_ls_says_a_run_that_never_recorded_its_end_crashed_and_can_resume(runs_dir):
    from orchestrator.store.run_dir import RunDir

    run = RunDir.create(runs_dir, {"task": "crashed", "status": "running"})
    run.release()  # as the kernel does when the process that drove it is killed
    [row] = json.loads(cairn_here("ls", "--json", runs_dir=runs_dir).stdout)
    assert row["status"] == "interrupted" and "a crash or a kill" in row["reason"] and "cairn resume" in row["reason"]
    assert row["id"] == run.id


def test_ls_lists_runs_oldest_first_whatever_their_ids(runs_dir):
    made = [_made(runs_dir, 1000.0 + i) for i in range(4)]
    assert [r["id"] for r in json.loads(cairn_here("ls", "--json", runs_dir=runs_dir).stdout)] == made


# -- conventional commands ------------------------------------------------------------------------


def test_version_prints_the_package_version(runs_dir):
    out = cairn_here("--version", runs_dir=runs_dir)
    assert out.returncode == 0 and out.stdout == f"cairn {version('cairn-agent')}\n"


def test_option_help_has_no_type_labels(runs_dir):
    out = cairn_here("show", "--help", runs_dir=runs_dir, env={"COLUMNS": "120"}).stdout
    assert "<bool>" not in out and "<str>" not in out and "<int>" not in out
    assert re.search(r"--step\s+N\s", out) and "Usage: cairn show [OPTIONS] RUN" in out


def _pretend_live(runs_dir: Path, run_id: str):  # noqa: ANN202 - a RunDir, kept while it should stay live
    """This test's own process holds the run's lock: for cairn, the run is live."""
    from orchestrator.store.run_dir import RunDir

    run = RunDir(runs_dir / run_id)
    run.hold()
    return run


def test_rm_refuses_a_live_run_and_removes_nothing(runs_dir):
    live, other = _made(runs_dir, 1000.0), _made(runs_dir, 2000.0)
    held = _pretend_live(runs_dir, live)  # noqa: F841 - the lock lasts as long as the object
    out = cairn_here("rm", other, live, runs_dir=runs_dir)
    assert out.returncode == 2 and f"run {live} is running; stop it first" in out.stderr
    assert (runs_dir / live).is_dir() and (runs_dir / other).is_dir()


def test_rm_without_an_engine_removes_the_run_and_says_the_container_is_left(runs_dir):
    run = _made(runs_dir, 1000.0)
    out = cairn_here("rm", run, runs_dir=runs_dir, env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert out.returncode == 0 and out.stdout == f"removed run {run}\n"
    assert "no Docker engine answers" in out.stderr and f"cairn-{run}" in out.stderr
    assert not (runs_dir / run).exists()


@pytest.mark.docker
def test_rm_removes_the_run_directory_and_its_container(runs_dir, sandbox_image):
    import docker

    from orchestrator.sandbox.docker.container import container_name

    run = _made(runs_dir, 1000.0)
    client = docker.from_env()
    client.containers.create(sandbox_image, ["true"], name=container_name(run),
                             labels={"cairn.managed": "1", "cairn.run": run})
    out = cairn("rm", run[:6], runs_dir=runs_dir)
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"removed run {run} and its container cairn-{run}\n"
    assert not (runs_dir / run).exists()
    with pytest.raises(docker.errors.NotFound):
        client.containers.get(container_name(run))


def test_stop_of_a_run_that_is_not_live_says_so_and_exits_1(runs_dir):
    run = _made(runs_dir, 1000.0)
    out = cairn_here("stop", run, runs_dir=runs_dir)
    assert out.returncode == 1
    assert out.stderr.strip() == f"cairn: error: run {run} is not running (its status: done)"
    assert not (runs_dir / run / "state" / "stop").exists()


def _wait_for(predicate, seconds: float = 120) -> None:  # noqa: ANN001
    deadline = time.time() + seconds
    while not predicate():
        assert time.time() < deadline
        time.sleep(0.2)


def _started(runs_dir: Path, command: str) -> bool:
    return any(command in line for log in runs_dir.glob("*/state/events.jsonl") for line in log.read_text().splitlines()
               if '"tool_started"' in line)


@pytest.mark.docker
def test_stop_cuts_a_long_command_short_at_once_and_the_run_resumes(runs_dir, sandbox_image, tmp_path):
    model = script(tmp_path / "slow.json", shell("echo started > started.txt; sleep 60; echo never > never.txt"),
                   shell("echo second"), DONE)
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "run", "slow", "--model", model, "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "CAIRN_RUNS_DIR": str(runs_dir)})
    _wait_for(lambda: list(runs_dir.glob("*/workspace/started.txt")))
    asked = time.monotonic()
    stopped = cairn("stop", "@last", runs_dir=runs_dir)
    assert stopped.returncode == 0 and "stops now" in stopped.stdout, stopped.stderr
    out, _ = proc.communicate(timeout=60)
    assert time.monotonic() - asked < 10, "the stop waited for the command"
    assert proc.returncode == 130
    doc = json.loads(out)
    assert doc["status"] == "interrupted" and doc["error"]["reason"] == "stopped by cairn stop"
    [call] = [c for s in doc["steps"] for c in s["tool_calls"]]
    assert call["name"] == "shell_exec" and call["error"] and "interrupted" in call["result"]
    run = runs_dir / doc["id"]
    assert not (run / "workspace" / "never.txt").exists()  # nothing more of the command line ran
    model = script(tmp_path / "rest.json", shell("echo second"), DONE)
    again = cairn("resume", doc["id"], "--json", "--model", model, runs_dir=runs_dir)
    assert again.returncode == 0, again.stderr[-2000:]
    resumed = json.loads(again.stdout)
    assert resumed["status"] == "done"
    assert [c["name"] for s in resumed["steps"] for c in s["tool_calls"]] == ["shell_exec", "shell_exec", "task_done"]


@pytest.mark.docker
def test_stop_after_step_lets_the_running_call_finish_and_it_resumes(runs_dir, sandbox_image, tmp_path):
    model = script(tmp_path / "slow.json", shell("sleep 4"), shell("echo second"), DONE)
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "run", "slow", "--model", model, "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "CAIRN_RUNS_DIR": str(runs_dir)})
    _wait_for(lambda: _started(runs_dir, "sleep 4"))
    stopped = cairn("stop", "@last", "--after-step", runs_dir=runs_dir)
    assert stopped.returncode == 0 and "after its running call" in stopped.stdout, stopped.stderr
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130
    doc = json.loads(out)
    assert doc["status"] == "interrupted" and doc["error"]["reason"] == "stopped by cairn stop"
    [call] = [c for s in doc["steps"] for c in s["tool_calls"]]
    assert not call["error"]  # the sleep finished, and no more ran
    again = cairn("resume", doc["id"], "--json", runs_dir=runs_dir)
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads(again.stdout)["status"] == "done"


@pytest.mark.docker
def test_stop_ends_a_run_of_a_batch(runs_dir, sandbox_image, tmp_path):
    script(tmp_path / "slow.json", shell("sleep 4"), shell("echo second"), DONE)
    (tmp_path / "b.jsonl").write_text(json.dumps({"task": "slow", "model": "scripted:slow.json"}) + "\n")
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "batch", str(tmp_path / "b.jsonl"), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "CAIRN_RUNS_DIR": str(runs_dir)})
    _wait_for(lambda: _started(runs_dir, "sleep 4"))
    assert cairn("stop", "@last", runs_dir=runs_dir).returncode == 0
    out, _ = proc.communicate(timeout=120)
    [row] = json.loads(out)["runs"]
    assert row["status"] == "interrupted" and row["error"] == "stopped by cairn stop"


# -- show -----------------------------------------------------------------------------------------


@pytest.mark.docker
def test_show_prints_the_messages_said_to_a_run(runs_dir, sandbox_image, tmp_path):
    first = cairn("run", "talk", "--model", script(tmp_path / "a.json", {"content": "which one?"}), "--json",
                  runs_dir=runs_dir)
    run = json.loads(first.stdout)["id"]
    assert cairn("say", run, "use the second option, please", runs_dir=runs_dir).returncode == 0
    again = cairn("resume", run, "--model", script(tmp_path / "b.json", DONE), runs_dir=runs_dir)
    assert again.returncode == 0, again.stderr[-2000:]
    lines = cairn_here("show", run, runs_dir=runs_dir).stdout.splitlines()
    said = lines.index("   2 ✉say          use the second option, please")
    assert lines[said + 1].startswith("   2  done: ")  # where it reached the run: before step 2's call (task_done)


# -- interactive mode -----------------------------------------------------------------------------


@pytest.mark.docker
def test_interactive_mode_shows_the_answer_and_a_clean_prompt(runs_dir, sandbox_image, tmp_path):
    import pty
    import select

    model = script(tmp_path / "chat.json", {"content": "Hello! Which file should I start with?"}, DONE)
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "run", "--model", model],
                            stdin=follower, stdout=follower, stderr=follower, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "CAIRN_RUNS_DIR": str(runs_dir)})
    os.close(follower)

    def read_until(prompt: bytes, seconds: float = 120) -> bytes:
        seen, deadline = b"", time.time() + seconds
        while prompt not in seen:
            assert time.time() < deadline, seen
            if select.select([leader], [], [], 1)[0]:
                seen += os.read(leader, 4096)
        return seen

    read_until(b"task> ")
    os.write(leader, b"say hello\n")
    turn = read_until(b"you> ")
    assert b"Hello! Which file should I start with?" in turn  # the answer, whole
    assert b"status: stopped" not in turn  # a text answer ends the turn; it is not news
    assert not select.select([leader], [], [], 1.5)[0]  # no status line redrawn under the prompt
    os.write(leader, b"a.txt\n")
    read_until(b"you> ")
    os.write(leader, b"\x04")
    assert proc.wait(timeout=60) == 0
