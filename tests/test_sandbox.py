"""The sandbox as seen from inside: hardening, limits, the shell, and recovering from what breaks it."""

from __future__ import annotations

import io
import os
import resource
import tarfile
from collections.abc import Iterator

import docker
import pytest

from orchestrator.config import SandboxConfig
from orchestrator.errors import SandboxError
from orchestrator.sandbox import Sandbox, ToolError
from orchestrator.sandbox.container import gc, run_options, sandbox_user
from tests.sandbox_fixtures import docker_client, sandbox_image  # noqa: F401 - fixtures

pytestmark = pytest.mark.docker

FAKE_SECRET = "sk-test-must-not-enter-the-sandbox"
CONFIG = SandboxConfig(memory="256m", pids_limit=128, env={"CAIRN_GREETING": "hello"},
                       pass_env=["CAIRN_TEST_PASSED"], max_output_file_bytes=10 * 2**20)


def shell(sandbox: Sandbox, command: str, **args: object) -> dict:
    return sandbox.call("shell", command=command, **args)


@pytest.fixture(scope="module")
def sandbox(docker_client, sandbox_image, tmp_path_factory) -> Iterator[Sandbox]:
    """One sandbox for the tests that do not break it, started while the host has a secret in its env."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OPENAI_API_KEY", FAKE_SECRET)
        patch.setenv("CAIRN_TEST_PASSED", "passed")
        box = Sandbox("test-shared", tmp_path_factory.mktemp("ws"), CONFIG, sandbox_image, docker_client,
                      cairn_mount=tmp_path_factory.mktemp("cairn"))
        box.start()
    yield box
    box.stop()


@pytest.fixture
def own_sandbox(docker_client, sandbox_image, tmp_path, request) -> Iterator[Sandbox]:
    """A sandbox for one test that breaks it on purpose."""
    box = Sandbox(f"test-{request.node.name.replace('_', '-')[:40]}", tmp_path / "ws", CONFIG, sandbox_image,
                  docker_client)
    box.start()
    yield box
    box.stop()


# Hardening


def test_agent_runs_as_the_expected_non_root_uid(sandbox):
    uid, gid = sandbox_user()
    assert shell(sandbox, "id -u; id -g")["output"] == f"{uid}\n{gid}\n"
    assert uid != 0


def test_no_capabilities_are_left(sandbox):
    assert "CapEff:\t0000000000000000" in shell(sandbox, "grep CapEff /proc/self/status")["output"]


def test_no_new_privileges_is_set(sandbox):
    assert shell(sandbox, "grep NoNewPrivs /proc/self/status")["output"] == "NoNewPrivs:\t1\n"


def test_root_filesystem_is_read_only(sandbox):
    result = shell(sandbox, "touch /usr/x")
    assert result["exit_code"] != 0 and "Read-only file system" in result["output"]


def test_tmp_home_and_workspace_are_writable(sandbox):
    result = shell(sandbox, 'touch /tmp/x "$HOME/x" /workspace/x && echo "$HOME"')
    assert (result["exit_code"], result["output"]) == (0, "/home/cairn\n")


def test_pids_and_memory_limits_are_in_the_cgroup(sandbox):
    pids = shell(sandbox, "cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max")
    memory = shell(sandbox, "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null "
                            "|| cat /sys/fs/cgroup/memory.max")
    assert pids["output"] == "128\n"
    assert memory["output"] == f"{256 * 2**20}\n"


def test_network_is_only_loopback(sandbox):
    assert shell(sandbox, "ls /sys/class/net")["output"] == "lo\n"
    assert not sandbox.network_enabled


def test_host_secrets_stay_out_and_named_variables_come_in(sandbox):
    env = shell(sandbox, "env")["output"]
    assert FAKE_SECRET not in env and "OPENAI_API_KEY" not in env
    assert "CAIRN_GREETING=hello\n" in env and "CAIRN_TEST_PASSED=passed\n" in env


def test_run_options_are_hardened(tmp_path):
    options = run_options(SandboxConfig(), "r1", tmp_path)
    assert options["cap_drop"] == ["ALL"] and options["security_opt"] == ["no-new-privileges"]
    assert options["read_only"] and options["init"] and options["network_mode"] == "none"
    assert options["memswap_limit"] == options["mem_limit"]
    assert options["labels"] == {"cairn.managed": "1", "cairn.run": "r1"} and options["name"] == "cairn-r1"
    assert not options["user"].startswith("0:")
    assert all("docker.sock" not in path for path in options["volumes"])


# The shell


def test_shell_state_persists_between_calls(sandbox):
    shell(sandbox, "cd /tmp && export SEEN=1 && python3 -m venv --help >/dev/null; kept=ok")
    assert shell(sandbox, 'pwd; echo "$SEEN $kept"')["output"] == "/tmp\n1 ok\n"
    shell(sandbox, "cd /workspace")


def test_timeout_kills_the_command_and_the_shell_survives(sandbox):
    result = shell(sandbox, "sleep 60", timeout=1)
    assert (result["exit_code"], result["timed_out"], result["shell_restarted"]) == (124, True, False)
    assert shell(sandbox, "echo fine")["output"] == "fine\n"


def test_huge_output_lands_in_a_file_not_in_host_memory(sandbox):
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    result = shell(sandbox, "yes | head -c 300000000", timeout=60)
    assert result["output_bytes"] == 300_000_000 and result["truncated"]
    assert len(result["output"]) <= CONFIG.inline_output_bytes + 200
    assert result["output_path"].startswith("/cairn/obs/")
    saved = sandbox.cairn_mount / result["output_path"][len("/cairn/"):]
    assert CONFIG.max_output_file_bytes <= saved.stat().st_size < CONFIG.max_output_file_bytes + 200
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before < 50 * 1024


@pytest.fixture(scope="module")
def locked_sandbox(docker_client, sandbox_image, tmp_path_factory) -> Iterator[Sandbox]:
    with Sandbox("test-locked", tmp_path_factory.mktemp("ws"), CONFIG.model_copy(update={"lockdown": True}),
                 sandbox_image, docker_client) as box:
        yield box


@pytest.mark.parametrize("path", ["../etc/passwd", "/etc/passwd", "escape/passwd"])
def test_under_lockdown_paths_that_leave_the_workspace_are_refused(locked_sandbox, path):
    shell(locked_sandbox, "ln -sfn /etc /workspace/escape")
    with pytest.raises(ToolError, match=r"outside /workspace \(it resolves to /etc/passwd\)"):
        locked_sandbox.call("read", path=path)


def test_absolute_paths_reach_the_whole_container(sandbox):
    assert "ID=" in sandbox.call("read", path="/etc/os-release")["content"]


def test_file_ops_work_inside_the_workspace(sandbox):
    sandbox.call("write", path="notes/a.txt", content="alpha\nbeta\n")
    sandbox.call("edit", path="notes/a.txt", old="beta", new="gamma")
    assert sandbox.call("read", path="notes/a.txt", offset=2)["content"] == "gamma\n"
    assert (sandbox.workspace / "notes" / "a.txt").read_text() == "alpha\ngamma\n"


def test_fetch_without_network_says_so(sandbox):
    with pytest.raises(ToolError, match="no network"):
        sandbox.call("fetch", url="http://example.com/")


# Breaking it


def test_sandbox_restarts_after_docker_kill_and_keeps_the_workspace(own_sandbox, docker_client):
    own_sandbox.call("write", path="survivor.txt", content="still here\n")
    docker_client.api.kill(own_sandbox.container.id)
    docker_client.api.wait(own_sandbox.container.id, timeout=30)
    result = own_sandbox.call("read", path="survivor.txt")
    assert result["content"] == "still here\n"
    assert "sandbox_restarted" in result and "stopped" in result["sandbox_restarted"]
    assert shell(own_sandbox, "echo ok")["output"] == "ok\n"


def test_fork_bomb_is_stopped_and_the_shell_works_after(own_sandbox):
    result = shell(own_sandbox, "bomb() { bomb | bomb & }; bomb; sleep 1", timeout=30)
    assert "process limit" in result["note"]
    assert shell(own_sandbox, "echo ok; ls / >/dev/null && echo forked")["output"] == "ok\nforked\n"


def test_memory_bomb_is_killed_and_the_sandbox_works_after(own_sandbox):
    result = shell(own_sandbox, "python3 -c \"a = [b'x' * (16 << 20) for _ in range(64)]\"", timeout=60)
    assert result["exit_code"] == 137 and "memory" in result["note"]
    assert "sandbox_restarted" not in result
    assert shell(own_sandbox, "echo ok")["output"] == "ok\n"


# Other images, and cleaning up


def test_image_without_the_toolbox_gets_it_mounted_and_the_workspace_stays_clean(docker_client, sandbox_image,
                                                                                 tmp_path):
    dockerfile = f"FROM {sandbox_image}\nUSER root\nRUN rm /opt/cairn/toolbox.py\n"
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        tar.addfile(info, io.BytesIO(dockerfile.encode()))
    context.seek(0)
    image, _ = docker_client.images.build(fileobj=context, custom_context=True, tag="cairn-test-no-toolbox:latest")
    with Sandbox("test-no-toolbox", tmp_path / "ws", SandboxConfig(), image.tags[0], docker_client) as box:
        assert shell(box, "echo ok")["output"] == "ok\n"
        assert "/opt/cairn/toolbox.py" in box.toolbox.argv
    assert list((tmp_path / "ws").iterdir()) == []


def test_missing_image_is_a_clear_error(docker_client, tmp_path):
    with pytest.raises(SandboxError, match="cairn-no-such-image:0 is not in the Docker engine"):
        Sandbox("test-no-image", tmp_path, SandboxConfig(), "cairn-no-such-image:0", docker_client).start()


def test_gc_removes_containers_of_runs_that_are_not_live(docker_client, sandbox_image, tmp_path):
    with Sandbox("test-gc-dead", tmp_path / "a", SandboxConfig(), sandbox_image, docker_client):
        removed = gc(docker_client, live_run_ids={"test-shared"}, known_run_ids={"test-gc-dead", "test-shared"})
    assert "cairn-test-gc-dead" in removed and "cairn-test-shared" not in removed
    with pytest.raises(docker.errors.NotFound):
        docker_client.containers.get("cairn-test-gc-dead")


def test_gc_leaves_a_busy_container_of_an_unknown_run_alone(docker_client, sandbox_image, tmp_path):
    with Sandbox("test-gc-elsewhere", tmp_path / "b", SandboxConfig(), sandbox_image, docker_client) as box:
        box.call("shell", command="true", timeout=5)
        removed = gc(docker_client, live_run_ids=set())
        assert "cairn-test-gc-elsewhere" not in removed
        assert docker_client.containers.get("cairn-test-gc-elsewhere").status == "running"


HOST_SCRIPT = """
import sys
from pathlib import Path
from orchestrator.config import SandboxConfig
from orchestrator.sandbox import Sandbox
box = Sandbox(sys.argv[1], Path(sys.argv[2]), SandboxConfig(), sys.argv[3])
box.start()
print("started", flush=True)
box.call("shell", command="touch started.txt; sleep 30; touch late.txt", timeout=60)
"""


def test_a_command_dies_with_the_cairn_process_that_ran_it(docker_client, sandbox_image, tmp_path):
    import subprocess
    import sys
    import time

    workspace = tmp_path / "ws"
    workspace.mkdir()
    host = subprocess.Popen([sys.executable, "-c", HOST_SCRIPT, "test-orphan", str(workspace), sandbox_image],
                            stdout=subprocess.PIPE, text=True, cwd=os.getcwd())
    try:
        assert host.stdout.readline().strip() == "started"
        for _ in range(100):
            if (workspace / "started.txt").exists():
                break
            time.sleep(0.1)
        host.kill()  # SIGKILL: what a crash or `kill -9` of cairn does
        host.wait()
        container = docker_client.containers.get("cairn-test-orphan")
        for _ in range(50):
            commands = [process[-1] for process in container.top()["Processes"]]
            if not any("sleep 30" in c or "toolbox" in c for c in commands):
                break
            time.sleep(0.1)
        assert not any("sleep 30" in c or "toolbox" in c for c in commands), commands
    finally:
        host.kill()
        try:
            docker_client.containers.get("cairn-test-orphan").remove(force=True)
        except docker.errors.NotFound:
            pass
    time.sleep(0.5)
    assert not (workspace / "late.txt").exists()
