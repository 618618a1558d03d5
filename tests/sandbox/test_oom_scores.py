"""Who the out-of-memory killer takes first (sandbox_image/PROTOCOL.md): a command while it runs, never
what the agent leaves running (a server a task's tests will call), nor the toolbox."""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator

import pytest

from orchestrator.config import SandboxConfig
from orchestrator.sandbox.docker.sandbox import DockerSandbox
from tests.sandbox_fixtures import docker_client, sandbox_image, toolbox  # noqa: F401 - fixtures

def own_value(pid: int) -> int:
    with open(f"/proc/{pid}/oom_score_adj") as f:
        return int(f.read())


def shell_output(toolbox, command: str) -> str:
    return toolbox.result("shell", command=command)["output"]


def test_a_command_runs_first_in_line_and_what_it_leaves_running_does_not_stay_there(toolbox):
    base = own_value(toolbox.process.pid)
    assert shell_output(toolbox, "cat /proc/self/oom_score_adj") == "1000\n"  # a command, while it runs

    job = shell_output(toolbox, "sleep 120 >/dev/null 2>&1 & echo $!").strip()
    nohup = shell_output(toolbox, "nohup sleep 120 >/dev/null 2>&1 & echo $!").strip()

    # Read from here, not by a command (which would run at 1000 itself): both are back at the toolbox's.
    assert own_value(int(job)) == base and own_value(int(nohup)) == base
    shell = [int(p) for p in os.listdir("/proc") if p.isdigit() and _parent(int(p)) == toolbox.process.pid]
    assert shell and all(own_value(pid) == base for pid in shell)  # the shell too, between commands
    toolbox.result("shell", command=f"kill {job} {nohup}")


def test_a_terminal_session_runs_at_the_toolboxs_own_value(toolbox):
    base = own_value(toolbox.process.pid)
    started = toolbox.result("session_start", command="cat /proc/self/oom_score_adj; sleep 120", name="adj", wait=1)
    assert base64.b64decode(started["head"]).decode().strip() == str(base)
    toolbox.result("session_stop", name="adj")


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return int(stat[stat.rfind(b")") + 2:].split()[1])


@pytest.fixture
def docker_box(docker_client, sandbox_image, tmp_path) -> Iterator[DockerSandbox]:
    box = DockerSandbox(f"test-oom-{os.getpid()}", tmp_path / "ws", SandboxConfig(), sandbox_image, docker_client)
    box.start()
    yield box
    box.stop()


@pytest.mark.docker
def test_in_a_container_even_a_daemon_that_left_the_shells_session_is_lowered(docker_box):
    daemon = docker_box.call("shell", command="setsid sleep 300 >/dev/null 2>&1 < /dev/null & sleep 0.3; "
                                              "pgrep -x -f 'sleep 300'")["output"].strip()
    server = docker_box.call("shell", command="(python3 -m http.server 8765 >/dev/null 2>&1 &) ; sleep 0.5; "
                                              "pgrep -f 'http.server 8765'")["output"].strip()
    # One command reads them all; its own `cat` runs at 1000, so each value is read by a fresh process.
    values = docker_box.call("shell", command=f"for p in {daemon} {server} $$; do "
                                              f"echo $(cat /proc/$p/oom_score_adj); done")["output"].split()
    assert values == ["0", "0", "1000"]  # the daemon, the server; and bash, raised while this command runs
    assert docker_box.call("shell", command="cat /proc/self/oom_score_adj")["output"] == "1000\n"


def test_the_shells_own_options_do_not_break_the_raise_and_the_fall(toolbox):
    base = own_value(toolbox.process.pid)
    toolbox.result("shell", command="set -e -C")  # errexit and noclobber: both would trip a plain `echo >`
    assert shell_output(toolbox, "cat /proc/self/oom_score_adj") == "1000\n"
    job = shell_output(toolbox, "sleep 120 >/dev/null 2>&1 & echo $!").strip()
    assert own_value(int(job)) == base
    result = toolbox.result("shell", command="echo still here")
    assert result["output"] == "still here\n" and not result["shell_restarted"]
    toolbox.result("shell", command=f"set +e +C; kill {job}")
