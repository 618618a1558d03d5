"""Messages to a run from outside it (`cairn say`), and `cairn watch`. (A workspace file is never a
message: tests/ui/test_host_reads_of_run_content.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from orchestrator.store import inbox
from tests.loop_helpers import play as docker_play
from tests.fake_loop import call, done, play, resume, turn
from tests.in_process import cairn_in_process


CAIRN = [sys.executable, "-m", "orchestrator.cli"]


def _env(runs: Path) -> dict[str, str]:
    return {**os.environ, "CAIRN_RUNS_DIR": str(runs), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def _when_running(tmp_path: Path, command: str, then, timeout: float = 60) -> threading.Thread:
    """In a thread: waits until the run's tool call running `command` has started, then calls then(run_root)."""

    def wait() -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            for events in (tmp_path / "runs").glob("*/state/events.jsonl"):
                if f'"command": "{command}"' in events.read_text().replace('\\"', '"'):
                    then(events.parent.parent)
                    return
            time.sleep(0.05)

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    return thread


def _user_messages(request: dict) -> list[str]:
    return [m["content"] for m in request["messages"][2:-1] if m["role"] == "user"]  # system, task ... tail


@pytest.mark.docker  # the LiveRun: its own model clients, its pid
def test_say_to_a_live_run_reaches_the_next_request_and_watch_follows_it(tmp_path, sandbox_image):
    runs = tmp_path / "runs"
    said: dict[str, subprocess.CompletedProcess] = {}
    watching: dict[str, subprocess.Popen] = {}

    def say_and_watch(root: Path) -> None:
        watching["p"] = subprocess.Popen(CAIRN + ["watch", root.name], env=_env(runs), stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True)
        said["p"] = subprocess.run(CAIRN + ["say", root.name, "Also write SAID-MARKER in notes."],
                                   env=_env(runs), capture_output=True, text=True, timeout=60)

    thread = _when_running(tmp_path, "sleep 3", say_and_watch)
    out = docker_play(tmp_path, [
        turn(call("shell_exec", command="sleep 3")),
        turn(call("file_write", path="notes.md", content="SAID-MARKER\n")),
        turn(call("shell_exec", command="sleep 1.5")),
        done(),
    ])
    thread.join(10)
    assert out.status == "done"
    assert said["p"].returncode == 0 and "next step" in said["p"].stderr
    assert "Also write SAID-MARKER in notes." not in json.dumps(out.requests[0])
    assert _user_messages(out.requests[1]) == ["Also write SAID-MARKER in notes."]
    assert _user_messages(out.requests[-1]) == ["Also write SAID-MARKER in notes."]
    [message] = out.events("user_message")
    assert message.source == "say" and message.step == 2

    stdout, stderr = watching["p"].communicate(timeout=30)
    assert watching["p"].returncode == 0, stderr
    assert "✉ message (say): Also write SAID-MARKER" in stdout
    assert "] write notes.md" in stdout  # the event ...
    assert {"+ notes.md", "~ notes.md"} & {line.strip() for line in stdout.splitlines()}  # ... and its file change
    last = stdout.rstrip().splitlines()
    assert last[-2] == "status: done (task_done)" and last[-1].startswith("(run ") and " is done" in last[-1]


def test_a_said_message_is_delivered_once_across_resumes(tmp_path):
    out = play(tmp_path, [turn(call("shell_exec", command="true")), {"content": "pausing"}])
    assert out.status == "stopped"
    said = cairn_in_process("say", out.run.id, "RESUME-MARKER please", env=_env(tmp_path / "runs"))
    assert said.returncode == 0 and "when it is resumed" in said.stderr
    inbox.say(out.run.state, "SECOND-MARKER")

    again = resume(out, turns=[turn(call("shell_exec", command="true")), {"content": "pausing again"}], tmp_path=tmp_path)
    assert _user_messages(again.requests[0]) == ["RESUME-MARKER please", "SECOND-MARKER"]
    (tmp_path / "second").mkdir()  # a new script path: the scripted model is kept per path
    third = resume(again, turns=[done()], tmp_path=tmp_path / "second")
    assert third.status == "done"
    assert _user_messages(third.requests[0]) == ["RESUME-MARKER please", "SECOND-MARKER"]
    says = [e for e in third.events("user_message") if e.source == "say"]
    assert [e.text for e in says] == ["RESUME-MARKER please", "SECOND-MARKER"]
    assert says[-1].model_extra["inbox_offset"] == (out.run.state / "inbox.jsonl").stat().st_size


def test_watch_on_a_finished_run_prints_its_events_and_exits(tmp_path):
    out = play(tmp_path, [turn(call("shell_exec", command="echo WATCH-ME")), done("finished")])
    watched = cairn_in_process("watch", out.run.id[:12], env=_env(tmp_path / "runs"))
    assert watched.returncode == 0, watched.stderr
    lines = watched.stdout.splitlines()
    assert lines[0] == "task: test task"
    assert "[1] $ echo WATCH-ME" in lines
    assert lines[-2] == "status: done (task_done)"
    assert lines[-1].startswith("(run ") and " is done: " in lines[-1]  # how it stands, as ls says it
