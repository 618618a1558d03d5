"""Runs that survive: cairn killed with SIGKILL (or Ctrl-C) at several points, then resumed to the end.

cairn runs as a subprocess with the real sandbox and the scripted model; the tests read its event log,
its workspace and the requests the scripted model received (CAIRN_SCRIPTED_LOG). The scripted model
numbers its call ids per script (`call_<turn>_<n>`), and each resume plays a new script, so a call is
identified by its step and its id.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import docker
import pytest

from orchestrator.store.liveness import process_identity, run_is_live
from orchestrator.sandbox.docker.container import LABEL_RUN, container_name
from orchestrator.store.archive import check_members, import_run
from orchestrator.store.run_dir import RunDir
from orchestrator.errors import UsageError
from tests.in_process import cairn_in_process
from tests.loop_helpers import call, done, play, turn

CUT_OFF = "[killed: the run stopped while this command ran; it may have partly run (it ran "
WAIT = 180.0  # starting cairn imports litellm: slow on a busy machine


# -- driving cairn in a subprocess ------------------------------------------------------------------

class Cairn:
    """cairn commands against one runs directory, each with its own scripted-model request log."""

    def __init__(self, tmp_path: Path, runs_dir: Path | None = None) -> None:
        self.tmp = tmp_path
        self.runs_dir = runs_dir or tmp_path / "runs"
        self.n = 0

    def script(self, turns: list[dict[str, Any]]) -> str:
        self.n += 1
        path = self.tmp / f"script-{self.n}.json"
        path.write_text(json.dumps({"turns": turns}))
        return f"scripted:{path}"

    def env(self, log: Path) -> dict[str, str]:
        return {**os.environ, "CAIRN_RUNS_DIR": str(self.runs_dir), "CAIRN_SCRIPTED_LOG": str(log),
                "LITELLM_LOCAL_MODEL_COST_MAP": "True"}

    def start(self, *args: str) -> tuple[subprocess.Popen, Path]:
        log = self.tmp / f"requests-{self.n}-{time.monotonic_ns()}.jsonl"
        proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", *args], env=self.env(log),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return proc, log

    def run(self, *args: str, timeout: float = WAIT) -> tuple[subprocess.CompletedProcess, Path]:
        proc, log = self.start(*args)
        out, err = proc.communicate(timeout=timeout)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), log

    def here(self, *args: str) -> tuple[subprocess.CompletedProcess, Path]:
        """As `run`, in this process (tests/in_process.py): for commands that end without a sandbox."""
        log = self.tmp / f"requests-{self.n}-{time.monotonic_ns()}.jsonl"
        return cairn_in_process(*args, env=self.env(log)), log

    def the_run(self) -> RunDir:
        runs = RunDir.all(self.runs_dir)
        assert len(runs) == 1, runs
        return runs[0]


def wait_for(what: Callable[[], Any], proc: subprocess.Popen | None = None, timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = what()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"cairn ended ({proc.returncode}) before the moment came: {proc.stderr.read()}")
        time.sleep(0.05)
    raise AssertionError("timed out waiting")


def events(runs_dir: Path) -> list[dict[str, Any]]:
    """The raw event lines of the only run (none while it has not been created)."""
    files = list(runs_dir.glob("*/state/events.jsonl"))
    if not files:
        return []
    lines = files[0].read_bytes().split(b"\n")
    return [json.loads(line) for line in lines[:-1] if line.strip()]  # a line is whole once its \n is there


def requests(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    proc.stdout.close()
    proc.stderr.close()


def the_call(evs: list[dict[str, Any]], command_part: str) -> tuple[int, str]:
    """(step, call id) of the shell_exec whose command holds `command_part`."""
    for e in evs:
        if e["type"] == "assistant_message":
            for c in e["message"].get("tool_calls") or []:
                if command_part in c["function"]["arguments"]:
                    return e["step"], c["id"]
    raise AssertionError(f"no call with {command_part!r}")


def has(evs: list[dict[str, Any]], kind: str, step: int, call_id: str) -> bool:
    return any(e["type"] == kind and e["step"] == step and e["call_id"] == call_id for e in evs)


def check_invariants(evs: list[dict[str, Any]]) -> None:
    """No event lost or duplicated: each call started at most once, finished exactly once; steps go up."""
    calls = [(e["step"], c["id"]) for e in evs if e["type"] == "assistant_message"
             for c in e["message"].get("tool_calls") or []]
    assert len(calls) == len(set(calls)), calls
    started = Counter((e["step"], e["call_id"]) for e in evs if e["type"] == "tool_started")
    finished = Counter((e["step"], e["call_id"]) for e in evs if e["type"] == "tool_finished")
    assert all(n == 1 for n in started.values()), started
    assert all(n == 1 for n in finished.values()), finished
    assert set(finished) == set(calls), "every assistant tool call has exactly one result"
    assert set(started) <= set(calls)
    steps = [e["step"] for e in evs if e["type"] == "assistant_message"]
    assert steps == sorted(set(steps)) and steps == list(range(1, len(steps) + 1)), steps
    assert [e["step"] for e in evs if e["type"] == "model_request"] == steps
    everything = [e["step"] for e in evs]
    assert everything == sorted(everything), "steps never go back"
    assert len({json.dumps(e, sort_keys=True) for e in evs}) == len(evs), "no event twice"


def container_of(run: RunDir) -> Any:
    client = docker.from_env()
    found = client.containers.list(all=True, filters={"label": f"{LABEL_RUN}={run.id}"})
    return found[0] if found else None


def checkpoint_changes(run: RunDir) -> set[str] | None:
    """Workspace paths that differ from the last checkpoint, if the run keeps checkpoints.git."""
    git_dir = run.state / "checkpoints.git"
    if not git_dir.is_dir():
        return None
    out = subprocess.run(["git", f"--git-dir={git_dir}", f"--work-tree={run.workspace}", "status", "--porcelain",
                          "--untracked-files=all"], capture_output=True, text=True, check=True).stdout
    return {line[3:] for line in out.splitlines() if not line[3:].startswith(".cairn/")}


# -- SIGKILL at three points, one run ---------------------------------------------------------------

def test_sigkill_during_a_model_call_a_tool_call_and_after_a_result_then_resume_to_done(tmp_path, sandbox_image):
    cairn = Cairn(tmp_path)
    # (a) killed while the model is answering (a held request); its container is removed too.
    proc, log = cairn.start("run", "crash test", "--model", cairn.script([
        turn(call("shell_exec", command="echo a >> log.txt")), {"fail": "timeout"}]))
    wait_for(lambda: len(requests(log)) == 2, proc)
    kill(proc)
    run = cairn.the_run()
    before_stop = requests(log)[-1]
    assert (run.workspace / "log.txt").read_text() == "a\n"
    assert run.read_meta()["status"] == "running"  # it never wrote its end ...
    assert (run.state / "pid").exists() and not run_is_live(run)  # ... and its pid file is stale
    assert container_of(run) is not None, "after SIGKILL the old container is still there"
    subprocess.run(["docker", "rm", "-f", container_name(run.id)], check=True, capture_output=True)

    # (b) resumed, then killed during a slow command: it appended "start" and was cut off.
    proc, log = cairn.start("resume", run.id, "--model", cairn.script([
        turn(call("shell_exec", command="echo start >> log.txt; sleep 300; echo end >> log.txt"))]))
    wait_for(lambda: any(e["type"] == "tool_started" and e["step"] == 2 for e in events(cairn.runs_dir)), proc)
    wait_for(lambda: "start" in (run.workspace / "log.txt").read_text(), proc)
    first_after = requests(log)[0]
    assert first_after["messages"][:-1] == before_stop["messages"][:-1], "the same history bytes after the crash"
    assert "resumed in a new sandbox" in json.dumps(first_after["messages"][-1])
    kill(proc)
    changed = checkpoint_changes(run)
    if changed is not None:
        assert changed <= {"log.txt"}, changed  # the last checkpoint plus what the cut-off step did
    assert container_of(run) is not None  # left running again: this time the resume stops and reuses it

    # (c) resumed, then killed as soon as a command that appends one line has its result.
    proc, log = cairn.start("resume", run.id, "--model", cairn.script([
        turn(call("shell_exec", command="echo c >> log.txt")), turn(call("shell_exec", command="sleep 300"))]))
    wait_for(lambda: any(e["type"] == "tool_finished" and e["step"] == 3 for e in events(cairn.runs_dir)), proc)
    kill(proc)
    assert (run.workspace / "log.txt").read_text() == "a\nstart\nc\n"

    # The last resume runs to the end.
    result, log = cairn.run("resume", run.id, "--model", cairn.script([done("survived")]))
    assert result.returncode == 0, result.stderr
    assert run.read_meta()["status"] == "done"
    evs = events(cairn.runs_dir)
    check_invariants(evs)
    cut_step, cut_id = the_call(evs, "sleep 300; echo end")
    assert has(evs, "tool_started", cut_step, cut_id)
    [cut] = [e.get("output") or e["content"] for e in evs if e["type"] == "tool_finished" and e["call_id"] == cut_id
             and e["step"] == cut_step]  # as the tool gave it, not as the context frames it
    assert cut.startswith(CUT_OFF), cut
    # Nothing that finished ran twice, and the cut-off command was never run again.
    assert (run.workspace / "log.txt").read_text() == "a\nstart\nc\n"
    assert container_of(run).status == "exited", "the run's container is kept, stopped, when it ends"
    assert not (run.state / "pid").exists()


def test_sigkill_during_a_sub_agent_then_resume_goes_on_with_the_sub_agent(tmp_path, sandbox_image):
    cairn = Cairn(tmp_path)
    # The parent delegates; the child appends a line, then is killed while its model answers.
    proc, log = cairn.start("run", "parent task", "--model", cairn.script([
        turn(call("agent_delegate", task="append two lines to child.txt")),
        turn(call("shell_exec", command="echo one >> child.txt")), {"fail": "timeout"}]))
    wait_for(lambda: len(requests(log)) == 3, proc)
    kill(proc)
    run = cairn.the_run()
    [child_log] = run.state.glob("children/*/events.jsonl")
    assert (run.workspace / "child.txt").read_text() == "one\n"

    # The resume plays the child's next turns first, then the parent's (with the person's message).
    result, log = cairn.run("resume", run.id, "--message", "then finish", "--model", cairn.script([
        turn(call("shell_exec", command="echo two >> child.txt")), done("appended both"), done("parent done")]))
    assert result.returncode == 0, result.stderr
    assert run.read_meta()["status"] == "done"
    assert (run.workspace / "child.txt").read_text() == "one\ntwo\n", "nothing ran twice"
    first, *_, last = requests(log)
    assert first["messages"][1]["content"] == "append two lines to child.txt", "the child went on first"
    assert "echo one >> child.txt" in json.dumps(first["messages"]), "with its history from before the crash"
    evs = events(cairn.runs_dir)
    [finished] = [e for e in evs if e["type"] == "tool_finished" and e["name"] == "agent_delegate"]
    assert finished["child"]["status"] == "done" and finished["child"]["steps"] == 3
    assert finished["child"]["paths"] == [{"path": "child.txt", "change": "added"}]
    assert "appended both" in finished["content"] and "added    child.txt" in finished["content"]
    # The parent's next request: the call, its result right after it, then the person's message.
    roles = [m["role"] for m in last["messages"]]
    delegating = next(i for i, m in enumerate(last["messages"]) if "agent_delegate" in json.dumps(m.get("tool_calls")))
    assert roles[delegating + 1] == "tool" and "appended both" in last["messages"][delegating + 1]["content"]
    assert last["messages"][delegating + 2] == {"role": "user", "content": "then finish"}
    child_events = [json.loads(line) for line in child_log.read_text().splitlines()]
    assert [e["status"] for e in child_events if e["type"] == "status"][-1] == "done"


# -- torn event line, same request bytes ------------------------------------------------------------

def test_a_torn_last_line_is_set_aside_and_the_request_bytes_survive_a_sigkill(tmp_path, sandbox_image):
    cairn = Cairn(tmp_path)
    proc, log = cairn.start("run", "torn", "--model", cairn.script([
        turn(call("shell_exec", command="seq 1 400")), turn(call("file_write", path="notes.md", content="n\n")),
        {"fail": "timeout"}]))
    wait_for(lambda: len(requests(log)) == 3, proc)
    kill(proc)
    run = cairn.the_run()
    before_stop = requests(log)[-1]
    torn = '{"type": "notice", "text": "half a li'
    with open(run.state / "events.jsonl", "a") as f:
        f.write(torn)

    result, log = cairn.run("resume", run.id, "--model", cairn.script([done()]))
    assert result.returncode == 0, result.stderr
    asides = list(run.state.glob("events.torn-*.txt"))
    assert len(asides) == 1 and asides[0].read_text() == torn + "\n"
    evs = events(cairn.runs_dir)
    assert any(e["type"] == "notice" and asides[0].name in e["text"] for e in evs), "reported, not dropped"
    assert (run.state / "events.jsonl").read_bytes().endswith(b"\n")
    check_invariants(evs)
    after = requests(log)[0]
    assert json.dumps(after["messages"][:-1], sort_keys=True) == json.dumps(before_stop["messages"][:-1], sort_keys=True)
    assert json.dumps(after["tools"], sort_keys=True) == json.dumps(before_stop["tools"], sort_keys=True)


# -- the container removed while cairn waits on the model --------------------------------------------

def test_container_removed_during_a_model_call_the_next_tool_call_gets_a_fresh_sandbox(tmp_path, sandbox_image):
    runs = tmp_path / "runs"
    log = tmp_path / "requests.jsonl"

    def remove_when_the_model_is_waiting() -> None:
        wait_for(lambda: len(requests(log)) >= 2, timeout=120)
        (run_root,) = [p for p in runs.iterdir() if p.is_dir()]
        subprocess.run(["docker", "rm", "-f", container_name(run_root.name)], check=True, capture_output=True)

    remover = threading.Thread(target=remove_when_the_model_is_waiting, daemon=True)
    remover.start()
    out = play(tmp_path, [turn(call("shell_exec", command="echo kept > f.txt")), {"fail": "timeout"},
                          turn(call("shell_exec", command="cat f.txt")), done()],
               settings={"model": {"request_timeout": 4}})
    remover.join(5)
    assert out.status == "done"
    result = [e for e in out.events("tool_finished") if e.step == 2][0]
    assert "kept" in result.content and not result.error
    assert "the sandbox container was removed" in result.content
    # The agent is told in the next request's tail.
    assert "The sandbox was restarted" in json.dumps(out.requests[-1]["messages"][-1])


# -- Ctrl-C ----------------------------------------------------------------------------------------

def test_ctrl_c_cuts_the_running_command_short_with_exit_130_then_resumes(tmp_path, sandbox_image):
    cairn = Cairn(tmp_path)
    proc, log = cairn.start("run", "slow", "--model", cairn.script([
        turn(call("shell_exec", command="echo started >> log.txt; sleep 60; echo slept >> log.txt")),
        done("resumed")]))
    wait_for(lambda: any(e["type"] == "tool_started" for e in events(cairn.runs_dir)), proc)
    run = cairn.the_run()
    wait_for(lambda: (run.workspace / "log.txt").exists(), proc)
    pressed = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=WAIT)
    assert time.monotonic() - pressed < 10, "Ctrl-C waited for the command"
    assert proc.returncode == 130, err
    assert run.read_meta()["status"] == "interrupted"
    assert (run.workspace / "log.txt").read_text() == "started\n", "the command was cut short"
    finished = [e for e in events(cairn.runs_dir) if e["type"] == "tool_finished"]
    assert len(finished) == 1 and finished[0]["error"] and "interrupted" in finished[0]["content"]
    assert len(requests(log)) == 1
    assert not (run.state / "pid").exists()

    result, _ = cairn.run("resume", run.id, "--model", cairn.script([done("resumed")]))
    assert result.returncode == 0, result.stderr
    assert run.read_meta()["status"] == "done"
    check_invariants(events(cairn.runs_dir))


# -- export and import -----------------------------------------------------------------------------

def test_export_import_into_a_fresh_runs_dir_and_resume_to_done(tmp_path, sandbox_image):
    out = play(tmp_path, [turn(call("shell_exec", command="printf '#!/bin/sh\\necho hi\\n' > run.sh && chmod 755 run.sh"
                                                          " && echo secret > private.txt && chmod 600 private.txt"
                                                          " && mkdir -p d && ln -s ../run.sh d/link")),
                          done("first part")])
    assert out.status == "done"
    source = out.run
    archive = tmp_path / "moved.tar.gz"
    cairn = Cairn(tmp_path, runs_dir=tmp_path / "runs")
    result, _ = cairn.run("export", source.id, "-o", str(archive))
    assert result.returncode == 0, result.stderr
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert f"{source.id}/state/events.jsonl" in names and f"{source.id}/workspace/run.sh" in names
    assert f"{source.id}/state/pid" not in names
    if (source.state / "checkpoints.git").is_dir():
        assert any(n.startswith(f"{source.id}/state/checkpoints.git/") for n in names)

    fresh = Cairn(tmp_path, runs_dir=tmp_path / "elsewhere")
    result, _ = fresh.run("import", str(archive))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == source.id
    moved = RunDir(fresh.runs_dir / source.id)
    assert (moved.workspace / "run.sh").stat().st_mode & 0o777 == 0o755
    assert (moved.workspace / "private.txt").stat().st_mode & 0o777 == 0o600
    assert os.readlink(moved.workspace / "d" / "link") == "../run.sh"
    assert (moved.workspace / "run.sh").stat().st_uid == os.getuid(), "ownership follows the importer"
    assert (moved.state / "events.jsonl").read_bytes() == (source.state / "events.jsonl").read_bytes()

    again, _ = fresh.run("import", str(archive))
    assert again.returncode == 2
    assert again.stderr.splitlines()[0] == f"cairn: error: run {source.id} already exists in {fresh.runs_dir}; not imported"

    result, log = fresh.run("resume", source.id, "--message", "one more thing",
                            "--model", fresh.script([turn(call("shell_exec", command="./run.sh")), done("second part")]))
    assert result.returncode == 0, result.stderr
    assert moved.read_meta()["status"] == "done"
    evs = events(fresh.runs_dir)
    assert [e.get("output") or e["content"] for e in evs if e["type"] == "tool_finished"][-2].startswith("hi")
    check_invariants(evs)


def _tar(tmp_path: Path, build: Callable[[tarfile.TarFile], None]) -> Path:
    path = tmp_path / "evil.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        build(tar)
    return path


def _add(tar: tarfile.TarFile, name: str, kind: bytes = tarfile.DIRTYPE, data: bytes = b"", link: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, 0o755
    if kind == tarfile.REGTYPE:
        info.size = len(data)
        import io

        tar.addfile(info, io.BytesIO(data))
    else:
        tar.addfile(info)


def _run_skeleton(tar: tarfile.TarFile, rid: str = "20260101-000000-abcdef") -> str:
    for d in (rid, f"{rid}/state", f"{rid}/workspace"):
        _add(tar, d)
    _add(tar, f"{rid}/state/run.json", tarfile.REGTYPE, json.dumps({"id": rid}).encode())
    _add(tar, f"{rid}/state/events.jsonl", tarfile.REGTYPE, b"")
    return rid


@pytest.mark.parametrize("evil, why", [
    (lambda t, r: _add(t, "etc/evil", tarfile.REGTYPE, b"x"), "outside the run directory"),
    (lambda t, r: _add(t, "/etc/evil", tarfile.REGTYPE, b"x"), "absolute path"),
    (lambda t, r: _add(t, f"/{r}/workspace/x", tarfile.REGTYPE, b"x"), "absolute path"),
    (lambda t, r: _add(t, f"{r}/workspace/../../x", tarfile.REGTYPE, b"x"), "'..'"),
    (lambda t, r: _add(t, f"{r}/workspace/l", tarfile.SYMTYPE, link="/etc/passwd"), "leading outside"),
    (lambda t, r: _add(t, f"{r}/workspace/l", tarfile.SYMTYPE, link="../../.."), "leading outside"),
    (lambda t, r: (_add(t, f"{r}/workspace/l", tarfile.SYMTYPE, link="."),
                   _add(t, f"{r}/workspace/l/x", tarfile.REGTYPE, b"x")), "under a symlink"),
    (lambda t, r: _add(t, f"{r}/workspace/h", tarfile.LNKTYPE, link="etc/passwd"), "hard link"),
    (lambda t, r: _add(t, f"{r}/workspace/dev", tarfile.CHRTYPE), "device"),
    (lambda t, r: _add(t, f"{r}/workspace/fifo", tarfile.FIFOTYPE), "device, fifo"),
    (lambda t, r: _add(t, f"{r}/other", tarfile.REGTYPE, b"x"), "not under workspace/, cairn/ or state/"),
    (lambda t, r: _add(t, f"{r}/state/run.json", tarfile.REGTYPE, b"{}"), "twice"),
])
def test_import_refuses_unsafe_members(tmp_path, evil, why):
    def build(tar: tarfile.TarFile) -> None:
        rid = _run_skeleton(tar)
        evil(tar, rid)

    runs = tmp_path / "runs"
    with pytest.raises(UsageError) as refused:
        import_run(_tar(tmp_path, build), runs)
    assert why in refused.value.message and "\n" not in refused.value.message
    assert not runs.exists() or not any(runs.iterdir()), "nothing is left behind"


def test_import_accepts_a_clean_archive_and_refuses_a_taken_id(tmp_path):
    path = _tar(tmp_path, lambda tar: (_run_skeleton(tar), _add(tar, "20260101-000000-abcdef/workspace/l",
                                                                 tarfile.SYMTYPE, link="../state")))
    runs = tmp_path / "runs"
    run = import_run(path, runs)
    assert run.id == "20260101-000000-abcdef" and (run.state / "run.json").is_file()
    with pytest.raises(UsageError, match="already exists"):
        import_run(path, runs)
    with tarfile.open(path) as tar:
        assert check_members(tar.getmembers()) == run.id


# -- the pid file ----------------------------------------------------------------------------------

def test_a_stale_pid_file_does_not_look_live(tmp_path):
    run = RunDir(tmp_path / "r")
    run.state.mkdir(parents=True)
    pid_file = run.state / "pid"
    me = process_identity(os.getpid())
    pid_file.write_text(json.dumps(me))
    assert run_is_live(run)
    pid_file.write_text(json.dumps({**me, "start": (me["start"] or 0) + 1}))  # the pid reused by another process
    assert not run_is_live(run)
    pid_file.write_text(json.dumps({**me, "host": socket.gethostname() + "-elsewhere"}))
    assert not run_is_live(run)
    dead = subprocess.Popen(["true"])
    dead.wait()
    pid_file.write_text(json.dumps(process_identity(dead.pid)))
    assert not run_is_live(run)
    pid_file.write_text(str(os.getpid()))  # the older format: a bare pid
    assert run_is_live(run)
    pid_file.write_text("garbage")
    assert not run_is_live(run)


def test_an_in_place_run_is_exported_as_an_ordinary_run(tmp_path):
    from orchestrator.store.archive import export_run

    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "main.py").write_text("print(1)\n")
    run = RunDir.create(tmp_path / "runs", {"task": "t", "status": "stopped"}, workspace=folder)
    (run.state / "events.jsonl").write_text("")
    (run.cairn_dir / "obs").mkdir(parents=True)
    (run.cairn_dir / "obs" / "1.txt").write_text("saved output\n")
    archive = tmp_path / "r.tar.gz"
    export_run(run, archive)
    moved = import_run(archive, tmp_path / "elsewhere")
    assert moved.external_workspace is None and "workspace" not in moved.read_meta()
    assert (moved.workspace / "main.py").read_text() == "print(1)\n"
    assert (moved.cairn_dir / "obs" / "1.txt").read_text() == "saved output\n"
    assert not (moved.workspace / ".cairn").exists()
