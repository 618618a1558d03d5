"""A run is live from the moment it is made until its process is gone, and two processes never drive it.

The process that makes a run (or resumes it) holds an exclusive lock on `state/lock` (store/liveness.py);
`ls`, `watch`, `resume`, `rm`, `gc` and batches ask that lock. These tests make and drive runs in other
processes, as people do from two terminals, and look at the run from every instant of its start."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import orchestrator
from orchestrator.errors import CairnError, UsageError
from orchestrator.store.liveness import RunIsLive, RunLock, lock_is_held, run_is_live
from orchestrator.store.run_dir import RunDir
from tests.in_process import cairn_in_process

MAKE_AND_HOLD = """
import sys, time
from pathlib import Path
from orchestrator.store.run_dir import RunDir
run = RunDir.create(Path(sys.argv[1]), {"task": "held", "status": "running"})
print(run.id, flush=True)
time.sleep(600)
"""


def _here(*args: str, runs_dir: Path) -> subprocess.CompletedProcess:
    return cairn_in_process(*args, env={**os.environ, "CAIRN_RUNS_DIR": str(runs_dir), "CAIRN_MODEL": "scripted:demo"})


def test_a_run_is_live_while_the_process_that_made_it_runs_and_not_after_a_kill(tmp_path):
    runs_dir = tmp_path / "runs"
    maker = subprocess.Popen([sys.executable, "-c", MAKE_AND_HOLD, str(runs_dir)], stdout=subprocess.PIPE, text=True)
    try:
        run = RunDir(runs_dir / maker.stdout.readline().strip())
        assert run_is_live(run) and not (run.state / "pid").exists()  # live with no pid file at all
        assert [r["status"] for r in json.loads(_here("ls", "--json", runs_dir=runs_dir).stdout)] == ["running"]
        with pytest.raises(RunIsLive, match=f"run {run.id} is running in another process"):
            RunDir(run.root).hold()
        refused = _here("resume", run.id, runs_dir=runs_dir)
        assert refused.returncode == 2 and f"run {run.id} is running in another process" in refused.stderr
        refused = _here("rm", run.id, runs_dir=runs_dir)
        assert refused.returncode == 2 and "is running; stop it first" in refused.stderr and run.root.is_dir()
    finally:
        maker.send_signal(signal.SIGKILL)
        maker.wait()
    assert not run_is_live(run)  # the kernel let go of the lock with the process
    row = json.loads(_here("ls", "--json", runs_dir=runs_dir).stdout)[0]
    assert row["status"] == "interrupted" and "cairn resume" in row["reason"]
    mine = RunDir(run.root)
    mine.hold()  # now this process may drive it
    assert run_is_live(run)
    mine.release()
    assert not run_is_live(run)


def test_a_program_that_goes_on_after_a_failed_run_or_resume_leaves_the_run_free(tmp_path, monkeypatch):
    """The Python API (and a batch, and Harbor's process) goes on after a run that could not start, or a
    resume refused for its model: the run must be free at once, not whenever the garbage collector
    closes the lock's file, or the program's next resume is told another process drives it."""
    runs_dir = tmp_path / "runs"
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    gc.disable()  # what the lock's release must not depend on
    try:
        with pytest.raises(CairnError) as failed:  # kept, as a program that logs its errors keeps them
            orchestrator.run("task", model="scripted:demo", runs_dir=runs_dir)
        [run] = RunDir.all(runs_dir)
        assert lock_is_held(run.state) is False
        with pytest.raises(UsageError, match="no script file or built-in script") as refused:
            orchestrator.resume(run.id, model="scripted:no-such-script", runs_dir=runs_dir)
        assert lock_is_held(run.state) is False
        assert failed.traceback and refused.traceback  # both still refer to the frames that held the lock
    finally:
        gc.enable()


def test_a_probe_never_makes_a_taker_believe_the_run_is_live(tmp_path):
    """`ls` holds a shared lock for an instant; a `resume` that meets it waits for it, not for the run."""
    state = tmp_path / "state"
    state.mkdir()
    RunLock.take(state).release()  # the lock file exists
    probing = subprocess.Popen([sys.executable, "-c", (
        "import sys\nfrom pathlib import Path\nfrom orchestrator.store.liveness import lock_is_held\n"
        "lock_is_held(Path(sys.argv[1])); print('probing', flush=True)\n"
        "while True: lock_is_held(Path(sys.argv[1]))\n"), str(state)], stdout=subprocess.PIPE, text=True)
    try:
        assert probing.stdout.readline() == "probing\n"  # the probes run all through the takes below
        for _ in range(500):
            lock = RunLock.take(state)
            assert lock is not None
            assert lock_is_held(state)
            lock.release()
        assert probing.poll() is None
    finally:
        probing.kill()
        probing.wait()


def test_a_lock_file_decides_over_a_pid_file(tmp_path):
    """A pid file naming a live process (this one) says nothing once the run has a lock file nobody holds."""
    from orchestrator.store.liveness import write_pid_file

    run = RunDir(tmp_path / "r")
    run.state.mkdir(parents=True)
    write_pid_file(run)
    assert run_is_live(run)  # a run of an older cairn: its pid file decides
    RunLock.take(run.state).release()
    assert not run_is_live(run)


# -- the race, with a real run --------------------------------------------------------------------

@pytest.mark.docker
def test_watch_ls_and_resume_never_see_a_starting_run_dead_nor_drive_it_twice(tmp_path, runs_dir, sandbox_image):
    """From the first instant the run's directory exists to the end of its process, `ls` says running (or
    its end), `resume` is refused, and every `watch` started on the way follows it to `done`."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": [
        {"tool_calls": [{"name": "shell_exec", "arguments": {"command": "sleep 6; echo slept"}}]},
        {"tool_calls": [{"name": "task_done", "arguments": {"summary": "finished"}}]}]}))
    env = {**os.environ, "CAIRN_RUNS_DIR": str(runs_dir), "CAIRN_MODEL": f"scripted:{script}"}
    runner = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "run", "sleep a little"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watchers: list[subprocess.Popen] = []
    seen: list[str] = []
    refusals: list[str] = []
    try:
        while not list(runs_dir.glob("*/state/run.json")):
            assert runner.poll() is None, runner.communicate()
            time.sleep(0.005)
        [run_json] = runs_dir.glob("*/state/run.json")
        run_id = run_json.parent.parent.name
        last_watch = 0.0
        while runner.poll() is None:
            if len(watchers) < 6 and time.monotonic() - last_watch > 0.4:  # watches from many points of its start
                watchers.append(subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "watch", run_id],
                                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
                last_watch = time.monotonic()
            rows = json.loads(_here("ls", "--json", runs_dir=runs_dir).stdout)
            seen.append(rows[0]["status"])
            resumed = _here("resume", run_id, runs_dir=runs_dir)
            assert resumed.returncode == 2, resumed.stderr  # never a second driver
            refusals.append(resumed.stderr.splitlines()[0])
        out, err = runner.communicate()
        assert runner.returncode == 0, err
        for watcher in watchers:
            w_out, w_err = watcher.communicate(timeout=60)
            assert "not live" not in w_out and "no longer live" not in w_out, w_out
            assert "done: finished" in w_out or "task_done" in w_out, w_out
    finally:
        for process in [runner, *watchers]:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert len(seen) >= 10 and len(watchers) >= 3
    assert set(seen) <= {"running", "done"} and seen[0] == "running"  # never interrupted, never crashed
    assert all("is running in another process" in line or "is done" in line for line in refusals), set(refusals)
    events = [json.loads(line) for line in (runs_dir / run_id / "state" / "events.jsonl").read_text().splitlines()]
    assert [e["type"] for e in events].count("run_started") == 1
    assert sum(1 for e in events if e["type"] == "tool_started") == 2  # each call ran once: one driver
