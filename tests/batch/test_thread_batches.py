"""`cairn batch`: many runs at once, a failing one not stopping the others, resuming a batch, DOCKER_HOST."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest

from orchestrator.batch.threads import Batch
from orchestrator.config import RunConfig
from orchestrator.context.offload import check_path
from orchestrator.store.run_dir import RunDir
from tests.cli.test_cli import cairn, cairn_here


def write_script(path: Path, *turns: dict) -> Path:
    path.write_text(json.dumps({"turns": list(turns)}))
    return path


def tool(name: str, **arguments) -> dict:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def ok_script(path: Path, summary: str = "printed hi") -> Path:
    return write_script(path, tool("file_write", path="hello.py", content="print('hi')\n"),
                        tool("shell_exec", command="python3 hello.py"), tool("task_done", summary=summary))


def write_batch(path: Path, *lines: dict | str) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def test_a_bad_line_is_a_usage_error_naming_its_number_and_nothing_starts(tmp_path, runs_dir):
    batch = write_batch(tmp_path / "b.jsonl", {"task": "fine"}, "", {"model": "scripted:demo"}, {"task": "late"})
    out = cairn_here("batch", str(batch), runs_dir=runs_dir)
    assert out.returncode == 2
    assert out.stderr.splitlines()[0] == 'cairn: error: b.jsonl line 3: "task" is required and must be a non-empty string'
    assert not runs_dir.exists() or not list(runs_dir.iterdir())

    for bad, says in (("{not json", "line 1: not JSON"), ('{"task": "t", "max_steps": 0}', "line 1: invalid limits.max_steps"),
                      ('{"task": "t", "colour": "red"}', "line 1: unknown key 'colour'"),
                      ('{"task": "t", "template": "nope"}', "line 1: no workspace template 'nope'"),
                      ('{"task": "t", "model": "scripted:missing.json"}', "line 1: no script file")):
        (tmp_path / "one.jsonl").write_text(bad + "\n")
        out = cairn_here("batch", str(tmp_path / "one.jsonl"), runs_dir=runs_dir)
        assert out.returncode == 2 and says in out.stderr, (bad, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1


def test_what_a_second_pass_does_with_each_status(tmp_path):
    """done: skipped; interrupted and crashed (running, no live process): resumed; the rest: left as is."""
    runs = tmp_path / "runs"
    statuses = ["done", "interrupted", "running", "failed", "budget", "waiting", "stopped"]
    batch_file = write_batch(tmp_path / "b.jsonl", *({"task": f"task {s}"} for s in statuses))
    first = Batch(batch_file, runs)
    for job, status in zip(first.todo, statuses):
        run = RunDir.create(first.runs_dir, {"task": job.task, "status": status,
                                             "config": RunConfig().model_dump(mode="json")})
        run.release()  # as when the process that made it is gone
        first.manifest.record(job.key, job.line, run.id)
    again = Batch(batch_file, runs)
    work = again.plan()
    assert [again.todo[i].task for i, run in work] == ["task interrupted", "task running"]
    assert all(run is not None for _, run in work)
    actions = {r.task: (r.action, r.status) for r in again.rows}
    assert actions["task done"] == ("skipped", "done")
    assert actions["task failed"] == ("left", "failed") and actions["task budget"] == ("left", "budget")


@pytest.mark.docker
def test_a_batch_with_a_failing_task_and_its_second_pass(tmp_path, runs_dir, sandbox_image):
    ok_script(tmp_path / "a.json")
    write_script(tmp_path / "b.json", {"fail": 401})
    ok_script(tmp_path / "c.json")
    batch = write_batch(tmp_path / "tasks.jsonl",
                        {"task": "write and run hello.py", "model": "scripted:a.json"},  # beside the batch file
                        {"task": "this one's model refuses", "model": f"scripted:{tmp_path / 'b.json'}"},
                        {"task": "the same again", "model": "scripted:c.json", "max_steps": 10})
    out = cairn("batch", str(batch), "--jobs", "3", "--json", runs_dir=runs_dir)
    assert out.returncode == 1, out.stderr[-3000:]
    doc = json.loads(out.stdout)
    a, b, c = doc["runs"]
    assert [r["line"] for r in doc["runs"]] == [1, 2, 3]
    assert (a["status"], b["status"], c["status"]) == ("done", "failed", "done")
    assert a["action"] == b["action"] == c["action"] == "started"
    assert a["steps"] == c["steps"] == 3 and a["result"] == "printed hi"
    assert a["tokens"] == a["prompt_tokens"] + a["completion_tokens"] > 0
    assert "401" in b["error"] and b["steps"] == 0
    assert doc["totals"] == {"runs": 3, "done": 2, "steps": 6, "tokens": a["tokens"] + b["tokens"] + c["tokens"],
                             "cost_usd": None,  # the scripted model has no price
                             "checks_passed": 0, "checks_failed": 0}
    assert doc["exit_code"] == 1 and doc["interrupted"] is False
    assert (runs_dir / a["id"] / "workspace" / "hello.py").is_file()
    assert json.loads(cairn_here("show", c["id"], "--json", runs_dir=runs_dir).stdout)["steps"][1]["tool_calls"][0][
        "result"].startswith("hi")

    # C crashes during its second model call: its log ends at step 1, run.json still says running, and
    # no process holds its lock any more.
    run_c = RunDir(runs_dir / c["id"])
    lines = run_c.events.path.read_text().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if '"type":"checkpoint"' in line.replace(" ", "")
               and json.loads(line)["step"] == 1)
    run_c.events.path.write_text("".join(lines[: cut + 1]))
    run_c.update_meta(status="running")
    write_script(tmp_path / "c.json", tool("task_done", summary="finished after the crash"))
    a_log = (runs_dir / a["id"] / "state" / "events.jsonl").read_bytes()

    out = cairn("batch", str(batch), "--jobs", "3", "--json", runs_dir=runs_dir)
    assert out.returncode == 1, out.stderr[-3000:]
    a2, b2, c2 = json.loads(out.stdout)["runs"]
    assert (a2["id"], b2["id"], c2["id"]) == (a["id"], b["id"], c["id"])  # no new runs
    assert (a2["action"], a2["status"]) == ("skipped", "done")
    assert (b2["action"], b2["status"]) == ("left", "failed") and "401" in b2["error"]
    assert (c2["action"], c2["status"], c2["result"]) == ("resumed", "done", "finished after the crash")
    assert c2["steps"] == 2
    assert (runs_dir / a["id"] / "state" / "events.jsonl").read_bytes() == a_log  # the done run was not touched
    assert len([p for p in runs_dir.iterdir() if (p / "state").is_dir()]) == 3

    out = cairn("batch", str(batch), runs_dir=runs_dir)  # the summary table, for a person
    assert out.returncode == 1
    assert "2/3 done" in out.stdout and "skipped" in out.stdout and "401" in out.stdout


def test_line_keys_image_workdir_check_api_base_and_settings_reach_the_runs_config(tmp_path):
    (tmp_path / "small.json").write_text(json.dumps({"model": {"context_window": 32768, "api_base": "http://file/v1"},
                                                     "check": {"command": "make check", "rounds": 2}}))
    batch_file = write_batch(
        tmp_path / "b.jsonl",
        {"task": "plain"},
        {"task": "own endpoint", "api_base": "http://line/v1", "image": "my-image:1", "workdir": "/app",
         "check": "pytest -q"},
        {"task": "from a file", "settings": "small.json", "check": {"command": "make test", "timeout": 60}},
    )
    plain, own, from_file = (job.cfg for job in Batch(batch_file, tmp_path / "runs", api_base="http://batch/v1").todo)
    assert plain.model.api_base == "http://batch/v1" and plain.check.command is None  # --api-base: lines naming none
    assert own.model.api_base == "http://line/v1"
    assert (own.sandbox.image, own.sandbox.workdir, own.check.command) == ("my-image:1", "/app", "pytest -q")
    assert from_file.model.api_base == "http://file/v1" and from_file.model.context_window == 32768
    assert (from_file.check.command, from_file.check.rounds, from_file.check.timeout) == ("make test", 2, 60)


@pytest.mark.parametrize("line, says", [
    ({"task": "t", "settings": "missing.json"}, "line 1: settings file "),
    ({"task": "t", "check": ""}, "line 1: invalid check.command"),
    ({"task": "t", "check": {"command": "x", "rounds": -1}}, "line 1: invalid check.rounds"),
    ({"task": "t", "template": 3}, 'line 1: "template" must be the name'),
])
def test_a_bad_check_or_settings_on_a_line_is_a_usage_error_naming_it(tmp_path, runs_dir, line, says):
    out = cairn_here("batch", str(write_batch(tmp_path / "b.jsonl", line)), runs_dir=runs_dir)
    assert out.returncode == 2 and says in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert not runs_dir.exists() or not list(runs_dir.iterdir())


@pytest.mark.docker
def test_a_batch_reports_each_runs_check_and_a_failed_check_fails_the_batch(tmp_path, runs_dir, sandbox_image):
    check = "test -f hello.py"
    ok_script(tmp_path / "a.json")
    write_script(tmp_path / "b.json", tool("task_done", summary="did nothing"))
    batch = write_batch(tmp_path / "tasks.jsonl",
                        {"task": "write hello.py", "model": "scripted:a.json", "check": check},
                        {"task": "write hello.py too", "model": "scripted:b.json", "check": check})
    out = cairn("batch", str(batch), "--api-base", "http://127.0.0.1:9/v1", "--json", runs_dir=runs_dir)
    assert out.returncode == 1, out.stderr[-3000:]
    doc = json.loads(out.stdout)
    a, b = doc["runs"]
    assert (a["status"], a["check"]["passed"], b["status"], b["check"]["passed"]) == ("done", True, "done", False)
    assert b["check"] == {"command": check, "passed": False, "exit_code": 1, "output_path": check_path(1),
                          "round": 1}
    assert (doc["totals"]["checks_passed"], doc["totals"]["checks_failed"]) == (1, 1)
    assert json.loads((runs_dir / a["id"] / "state" / "run.json").read_text())["config"]["model"]["api_base"] \
        == "http://127.0.0.1:9/v1"

    again = cairn("batch", str(batch), runs_dir=runs_dir)  # the done run is skipped; the failed check is left
    assert again.returncode == 1
    rows = [line.split() for line in again.stdout.splitlines()[1:3]]
    assert rows[0][2:4] == ["done", "passed"] and "skipped" in rows[0]
    assert rows[1][2:4] == ["done", "failed"] and "left" in rows[1]
    assert "1 passed, 1 failed" in again.stdout


class EngineProxy:
    """A second address of the local Docker engine: tcp://127.0.0.1:PORT forwarded to its unix socket.
    Counts the connections and keeps what clients sent, to show requests went through it."""

    def __init__(self, target: str = "/var/run/docker.sock") -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self.sent = bytearray()
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            engine = socket.socket(socket.AF_UNIX)
            engine.connect(self.target)
            with self.lock:
                self.connections += 1
            threading.Thread(target=self._pipe, args=(client, engine, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(engine, client, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, record: bool) -> None:
        try:
            while data := src.recv(65536):
                if record:
                    with self.lock:
                        self.sent += data[:4096]
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.listener.close()


@pytest.mark.docker
def test_docker_host_names_the_engine_the_sandboxes_run_on(tmp_path, runs_dir, sandbox_image):
    if not Path("/var/run/docker.sock").exists():
        pytest.skip("the engine has no local unix socket to forward to")
    proxy = EngineProxy()
    try:
        ok_script(tmp_path / "a.json")
        batch = write_batch(tmp_path / "one.jsonl", {"task": "hello through another address", "model": "scripted:a.json"})
        out = cairn("batch", str(batch), "--json", runs_dir=runs_dir,
                    env={"DOCKER_HOST": f"tcp://127.0.0.1:{proxy.port}"})
        assert out.returncode == 0, out.stderr[-3000:]
        [row] = json.loads(out.stdout)["runs"]
        assert row["status"] == "done" and row["steps"] == 3
        sent = bytes(proxy.sent)
        assert proxy.connections >= 1
        assert b"POST /v" in sent and b"/containers/create?name=cairn-" + row["id"].encode() in sent
        assert b"/exec" in sent  # the toolbox's stream went through the proxy too
    finally:
        proxy.close()


@pytest.mark.docker
@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM"])  # Ctrl-C, and kill / docker stop / a scheduler
def test_ctrl_c_or_sigterm_stops_every_run_between_actions_and_the_next_pass_resumes_them(
        tmp_path, runs_dir, sandbox_image, stop):
    import signal
    import subprocess
    import sys
    import time

    for name in ("s1.json", "s2.json"):
        write_script(tmp_path / name, tool("shell_exec", command="sleep 4"), tool("task_done", summary="ok"))
    batch = write_batch(tmp_path / "b.jsonl", {"task": "a", "model": "scripted:s1.json"},
                        {"task": "b", "model": "scripted:s2.json"})
    import os

    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "batch", str(batch), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
                            env={**os.environ, "CAIRN_RUNS_DIR": str(runs_dir)})
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:  # both runs are inside their `sleep 4`
        logs = [p.read_text() for p in runs_dir.glob("*/state/events.jsonl")]
        if len(logs) == 2 and all('"tool_started"' in log for log in logs):
            break
        time.sleep(0.2)
    else:
        proc.kill()
        out, err = proc.communicate(timeout=60)
        pytest.fail(f"the two runs never were inside their sleep at once: {out[-2000:]} {err[-2000:]}")
    proc.send_signal(getattr(signal, stop))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out[-2000:] + err[-3000:]
    doc = json.loads(out)
    assert [r["status"] for r in doc["runs"]] == ["interrupted", "interrupted"] and doc["interrupted"] is True
    assert all(r["steps"] == 1 for r in doc["runs"])  # the step of the sleep, cut short
    by = "Ctrl-C" if stop == "SIGINT" else "SIGTERM"
    for log in runs_dir.glob("*/state/events.jsonl"):
        ends = [e for e in map(json.loads, log.read_text().splitlines()) if e["type"] == "status"]
        assert ends[-1]["reason"] == f"stopped by {by}"
    again = cairn("batch", str(batch), "--json", runs_dir=runs_dir)
    assert again.returncode == 0, again.stderr[-3000:]
    rows = json.loads(again.stdout)["runs"]
    assert [(r["action"], r["status"], r["id"]) for r in rows] == [("resumed", "done", r["id"]) for r in doc["runs"]]


def test_without_ray_installed_batch_ray_says_how_to_install_it_and_other_commands_never_import_it(tmp_path, runs_dir):
    import os
    import subprocess
    import sys

    batch = write_batch(tmp_path / "b.jsonl", {"task": "t"})
    code = ("import sys; sys.modules['ray'] = None\n"  # `import ray` raises ImportError, as when it is not installed
            "from orchestrator.cli import main\n"
            f"sys.argv = ['cairn', 'batch', {str(batch)!r}, '--ray']\n"
            "main()")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "CAIRN_RUNS_DIR": str(runs_dir)})
    assert out.returncode == 2
    assert out.stderr.splitlines()[0] == ("cairn: error: --ray needs Ray, which is not installed: "
                                          "pip install 'cairn-agent[ray]'")
    assert not runs_dir.exists() or not list(runs_dir.iterdir())

    code = ("import sys; from orchestrator.cli import app; from typer.testing import CliRunner; "
            "CliRunner().invoke(app, ['ls']); CliRunner().invoke(app, ['batch', '--help']); "
            "print('ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "CAIRN_RUNS_DIR": str(runs_dir)})
    assert out.stdout.strip() == "False"


def test_a_rows_model_retry_says_what_it_waits_for_not_a_countdown_that_stops():
    """The live table is redrawn four times a second: a row must not freeze on `retry 2/6 in 8 s`."""
    from orchestrator import events as ev
    from orchestrator.batch.rows import Row, RowDisplay

    row = Row(1, "a task")
    state = type("State", (), {"step": 3, "totals": type("Totals", (), {"prompt_tokens": 0, "completion_tokens": 0,
                                                                          "cost_usd": 0.0, "cost_known": True})()})()
    RowDisplay(row).event(ev.Notice(step=3, text="retry 2/6 in 8 s: the endpoint answered 503", kind="model_retry"),
                          state)
    assert row.status == "running: waiting for the model (retry 2/6)"
