"""The sandbox as seen from inside: hardening, limits, the shell, and recovering from what breaks it."""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator

import docker
import pytest

from orchestrator.config import SandboxConfig
from orchestrator.errors import SandboxError, UsageError
from orchestrator.sandbox.docker.sandbox import DockerSandbox
from orchestrator.errors import ToolError
from orchestrator.sandbox.docker.container import gc
from orchestrator.sandbox.docker.profile import ROOT_CAPABILITIES, run_options, sandbox_user
from tests.sandbox_fixtures import build_image, docker_client, sandbox_image  # noqa: F401 - fixtures

pytestmark = pytest.mark.docker

FAKE_SECRET = "sk-test-must-not-enter-the-sandbox"
CONFIG = SandboxConfig(memory="256m", pids_limit=128, env={"CAIRN_GREETING": "hello"},
                       pass_env=["CAIRN_TEST_PASSED"], max_output_file_bytes=10 * 2**20)


def shell(sandbox: DockerSandbox, command: str, **args: object) -> dict:
    return sandbox.call("shell", command=command, **args)


@pytest.fixture(scope="module")
def sandbox(docker_client, sandbox_image, tmp_path_factory) -> Iterator[DockerSandbox]:
    """One sandbox for the tests that do not break it, started while the host has a secret in its env."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OPENAI_API_KEY", FAKE_SECRET)
        patch.setenv("CAIRN_TEST_PASSED", "passed")
        box = DockerSandbox(f"test-shared-{os.getpid()}", tmp_path_factory.mktemp("ws"), CONFIG, sandbox_image, docker_client,
                      cairn_mount=tmp_path_factory.mktemp("cairn"))
        box.start()
    yield box
    box.stop()


@pytest.fixture(scope="module")
def locked(docker_client, sandbox_image, tmp_path_factory) -> Iterator[DockerSandbox]:
    """A sandbox with the lockdown profile."""
    box = DockerSandbox(f"test-locked-{os.getpid()}", tmp_path_factory.mktemp("ws"), CONFIG.model_copy(update={"lockdown": True}),
                  sandbox_image, docker_client)
    box.start()
    yield box
    box.stop()


@pytest.fixture
def own_sandbox(docker_client, sandbox_image, tmp_path, request) -> Iterator[DockerSandbox]:
    """A sandbox for one test that breaks it on purpose."""
    box = DockerSandbox(f"test-{request.node.name.replace('_', '-')[:40]}", tmp_path / "ws", CONFIG, sandbox_image,
                  docker_client)
    box.start()
    yield box
    box.stop()


# The default profile: root inside, a wall outside

# Bit numbers of linux/capability.h
CAPABILITY_BITS = {"CHOWN": 0, "DAC_OVERRIDE": 1, "FOWNER": 3, "FSETID": 4, "KILL": 5, "SETGID": 6, "SETUID": 7,
                   "SETPCAP": 8, "NET_BIND_SERVICE": 10, "NET_RAW": 13, "SYS_CHROOT": 18, "SYS_ADMIN": 21,
                   "MKNOD": 27, "AUDIT_WRITE": 29, "SETFCAP": 31}


def capability_mask(names: list[str]) -> str:
    return f"{sum(1 << CAPABILITY_BITS[name] for name in names):016x}"


def test_agent_is_root_with_home_at_root(sandbox):
    assert shell(sandbox, 'id -u; id -g; echo "$HOME"')["output"] == "0\n0\n/root\n"


def test_capabilities_are_exactly_the_named_set(sandbox):
    status = shell(sandbox, "grep -E '^Cap(Eff|Bnd)' /proc/self/status")["output"]
    mask = capability_mask(ROOT_CAPABILITIES)
    assert status == f"CapEff:\t{mask}\nCapBnd:\t{mask}\n"
    for dropped in ("NET_RAW", "MKNOD", "SYS_ADMIN", "SETFCAP", "SETPCAP", "SYS_CHROOT", "AUDIT_WRITE"):
        assert dropped not in ROOT_CAPABILITIES


def test_raw_sockets_and_device_nodes_are_refused(sandbox):
    raw = shell(sandbox, "python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, 1)'")
    assert raw["exit_code"] != 0 and "Operation not permitted" in raw["output"]
    node = shell(sandbox, "mknod /tmp/null2 c 1 3")
    assert node["exit_code"] != 0 and "Operation not permitted" in node["output"]


def test_no_new_privileges_and_dockers_seccomp_filter_are_on(sandbox):
    status = shell(sandbox, "grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status")["output"]
    assert status == "NoNewPrivs:\t1\nSeccomp:\t2\n"


def test_root_filesystem_is_the_containers_own_and_writable(sandbox):
    script = "printf '#!/bin/sh\\necho from-usr\\n' > /usr/local/bin/hello && chmod 755 /usr/local/bin/hello && hello"
    assert shell(sandbox, script)["output"] == "from-usr\n"


def test_a_script_in_tmp_and_in_home_runs(sandbox):
    result = shell(sandbox, "for d in /tmp \"$HOME\"; do printf '#!/bin/sh\\necho ran\\n' > $d/s.sh; "
                            "chmod +x $d/s.sh; $d/s.sh; done")
    assert result["output"] == "ran\nran\n"


def test_chmod_chown_tar_and_shred_work_as_in_a_root_shell(sandbox):
    result = shell(sandbox, "cd /tmp && mkdir -p t/d && echo x > t/d/f && chown -R nobody:nogroup t && chmod 4750 t/d/f "
                            "&& stat -c '%U %a' t/d/f && tar czf t.tgz t && tar xzf t.tgz -C /opt && "
                            "stat -c '%U' /opt/t/d/f && shred -u t/d/f && test ! -e t/d/f && echo shredded")
    assert result["output"] == "nobody 4750\nnobody\nshredded\n", result


def test_pip_installs_into_the_system_without_network(sandbox):
    project = ("mkdir -p /tmp/pkg/cairn_probe && echo 'VALUE = 42' > /tmp/pkg/cairn_probe/__init__.py && "
               "printf '[project]\\nname = \"cairn-probe\"\\nversion = \"1.0\"\\n' > /tmp/pkg/pyproject.toml && "
               "pip install -q --no-build-isolation --no-index /tmp/pkg 2>&1 | grep -v WARNING; "
               "cd / && python3 -c 'import cairn_probe; print(cairn_probe.VALUE)'")
    result = shell(sandbox, project, timeout=120)
    assert result["output"].strip().splitlines()[-1] == "42", result


def test_no_docker_socket_and_no_host_path_but_the_workspace(sandbox):
    assert shell(sandbox, "ls /var/run/docker.sock /run/docker.sock 2>&1 | grep -c 'No such'")["output"] == "2\n"
    mounts = {m["Destination"]: m["RW"] for m in sandbox.container.attrs["Mounts"] if m["Type"] == "bind"}
    # the workspace, cairn's own files of the run, and the toolbox's folder, read-only
    assert mounts == {"/workspace": True, "/cairn": True, "/opt/cairn": False}


def test_apt_get_install_works_with_network_bridge(docker_client, sandbox_image, tmp_path):
    with DockerSandbox("test-apt", tmp_path / "ws", SandboxConfig(network="bridge"), sandbox_image, docker_client) as box:
        update = shell(box, "apt-get update -q", timeout=300)
        if update["exit_code"] != 0:
            pytest.skip(f"no Debian mirror reachable from a container: {update['output'][-300:]}")
        result = shell(box, "apt-get install -y -q --no-install-recommends cowsay >/dev/null 2>&1; "
                            "/usr/games/cowsay moo | grep -c moo", timeout=300)
        assert result["output"] == "1\n", result


# The lockdown profile: the cage


def test_locked_down_agent_runs_as_the_expected_non_root_uid(locked):
    uid, gid = sandbox_user()
    assert shell(locked, "id -u; id -g")["output"] == f"{uid}\n{gid}\n"
    assert uid != 0


def test_locked_down_agent_has_no_capabilities(locked):
    assert "CapEff:\t0000000000000000" in shell(locked, "grep CapEff /proc/self/status")["output"]
    assert shell(locked, "grep NoNewPrivs /proc/self/status")["output"] == "NoNewPrivs:\t1\n"


def test_locked_down_root_filesystem_is_read_only(locked):
    result = shell(locked, "touch /usr/x")
    assert result["exit_code"] != 0 and "Read-only file system" in result["output"]


def test_locked_down_tmp_and_home_are_writable_but_not_executable(locked):
    result = shell(locked, 'touch /tmp/x "$HOME/x" /workspace/x && echo "$HOME" && '
                           "printf '#!/bin/sh\\necho ran\\n' > /tmp/s.sh && chmod +x /tmp/s.sh && /tmp/s.sh")
    assert result["output"].startswith("/home/cairn\n") and "Permission denied" in result["output"]
    assert result["exit_code"] != 0


def test_uid_0_is_refused_only_with_lockdown(tmp_path):
    assert run_options(SandboxConfig(user="0:0"), "r1", tmp_path)["user"] == "0:0"
    with pytest.raises(UsageError, match="uid 0 with --lockdown"):
        run_options(SandboxConfig(user="0:0", lockdown=True), "r1", tmp_path)


def test_run_options_of_both_profiles(tmp_path):
    default = run_options(SandboxConfig(), "r1", tmp_path)
    assert default["user"] == "0:0" and not default["read_only"] and "tmpfs" not in default
    assert default["cap_drop"] == ["ALL"] and default["cap_add"] == ROOT_CAPABILITIES
    locked = run_options(SandboxConfig(lockdown=True), "r1", tmp_path)
    assert locked["read_only"] and "cap_add" not in locked and not locked["user"].startswith("0:")
    assert all("noexec" in options for options in locked["tmpfs"].values())
    for options in (default, locked):
        assert options["security_opt"] == ["no-new-privileges"] and "seccomp" not in str(options)
        assert options["init"] and options["network_mode"] == "none"
        assert options["memswap_limit"] == options["mem_limit"]
        assert options["labels"] == {"cairn.managed": "1", "cairn.run": "r1"} and options["name"] == "cairn-r1"
        assert all("docker.sock" not in path for path in options["volumes"])


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


# Files the root agent leaves behind, and other runtimes


@pytest.mark.skipif(os.getuid() != 0, reason="making a folder owned by uid 1000 needs root")
def test_the_host_user_owns_every_file_the_root_agent_left_in_a_workspace_folder(docker_client, sandbox_image,
                                                                                 tmp_path):
    folder, cairn_files = tmp_path / "folder", tmp_path / "run" / "cairn"
    folder.mkdir()
    cairn_files.mkdir(parents=True)
    (folder / "before.txt").write_text("the user's\n")
    os.chown(folder, 1000, 1000)
    os.chown(folder / "before.txt", 1000, 1000)
    with DockerSandbox("test-give-back", folder, SandboxConfig(), sandbox_image, docker_client,
                 cairn_mount=cairn_files, external=True) as box:
        shell(box, "mkdir -p deep/er && echo x > deep/er/f && chmod 700 deep && ln -s deep/er/f link && "
                   "echo y >> before.txt && echo z > /cairn/note && echo w > given && chown 33:33 given")
        assert box.give_back_files() == ["/workspace"]  # as at each checkpoint ...
        shell(box, "touch late.txt")
    owners = {str(p.relative_to(folder)): (p.lstat().st_uid, p.lstat().st_gid) for p in folder.rglob("*")}
    assert owners.pop("given") == (33, 33)  # what the agent gave to another user on purpose stays so
    assert set(owners) == {"before.txt", "deep", "deep/er", "deep/er/f", "link", "late.txt"}
    assert set(owners.values()) == {(1000, 1000)}  # ... and when it stops
    assert (cairn_files / "note").stat().st_uid == os.getuid()


@pytest.mark.skipif(os.getuid() != 0, reason="making a folder owned by uid 1000 needs root")
def test_files_are_given_back_from_the_change_list_and_by_a_walk_when_it_is_lost(docker_client, sandbox_image,
                                                                                  tmp_path, monkeypatch):
    from orchestrator.sandbox.docker import ownership
    from orchestrator.store.change_list import ChangeWatch

    folder, cairn_files = tmp_path / "folder", tmp_path / "run" / "cairn"
    (folder / "old").mkdir(parents=True)
    cairn_files.mkdir(parents=True)
    for path in (folder, folder / "old"):
        os.chown(path, 1000, 1000)
    watch = ChangeWatch([folder, cairn_files])
    walks = []
    walk = ownership.owned_by
    monkeypatch.setattr(ownership, "owned_by", lambda *a, **k: walks.append(a[0]) or walk(*a, **k))
    try:
        with DockerSandbox("test-give-back-list", folder, SandboxConfig(), sandbox_image, docker_client,
                           cairn_mount=cairn_files, external=True, watch=watch) as box:
            watch.start()
            shell(box, "echo a > first")
            assert box.give_back_files() == ["/workspace"] and walks  # the first time: nothing known, a walk
            walks.clear()
            shell(box, "mkdir -p new/deep && echo b > new/deep/f && echo c > old/g && echo d > /cairn/note")
            assert box.give_back_files() == ["/workspace"]  # (cairn/ is the host user's own: root's, here)
            assert box.give_back_files() == [] and not walks  # from the change list alone: no walk
            watch.close()  # the list is lost: the next time is a walk again
            shell(box, "echo e > after-the-loss")
            assert box.give_back_files() == ["/workspace"] and walks
    finally:
        watch.close()
    owners = {str(p.relative_to(folder)): p.lstat().st_uid for p in folder.rglob("*")}
    assert set(owners.values()) == {1000}, owners
    assert (cairn_files / "note").stat().st_uid == os.getuid()


def test_runsc_runs_the_sandbox_under_gvisor(docker_client, sandbox_image, tmp_path):
    if "runsc" not in (docker_client.info().get("Runtimes") or {}):
        pytest.skip("the engine has no runsc runtime (scripts/test-tools.sh registers it on Debian as root)")
    with DockerSandbox("test-runsc", tmp_path / "ws", SandboxConfig(runtime="runsc"), sandbox_image, docker_client) as box:
        assert "gVisor" in shell(box, "dmesg")["output"]
        assert shell(box, "id -u; echo hi > /workspace/f; cat /workspace/f")["output"] == "0\nhi\n"


def test_an_unknown_runtime_is_a_clear_error(docker_client, sandbox_image, tmp_path):
    with pytest.raises(SandboxError, match="the Docker engine has no runtime 'no-such-runtime'"):
        DockerSandbox("test-bad-runtime", tmp_path, SandboxConfig(runtime="no-such-runtime"), sandbox_image,
                docker_client).start()


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
def locked_sandbox(docker_client, sandbox_image, tmp_path_factory) -> Iterator[DockerSandbox]:
    with DockerSandbox("test-locked", tmp_path_factory.mktemp("ws"), CONFIG.model_copy(update={"lockdown": True}),
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


def test_a_toolbox_that_speaks_before_the_engines_answer_is_read_still_starts(docker_client, sandbox_image,
                                                                             tmp_path, monkeypatch):
    """On a loaded machine (or an ssh:// engine) the toolbox's ready line can arrive together with the
    engine's HTTP answer and land in the HTTP client's buffer instead of on the socket."""
    import http.client
    import time

    begin = http.client.HTTPResponse.begin

    def slow_begin(self) -> None:  # the answer is read late: the process has spoken by then
        time.sleep(0.4)
        begin(self)

    monkeypatch.setattr(http.client.HTTPResponse, "begin", slow_begin)
    box = DockerSandbox(f"test-early-ready-{os.getpid()}", tmp_path / "ws", CONFIG.model_copy(update={"start_timeout": 10}),
                  sandbox_image, docker_client)
    try:
        box.start()
        assert shell(box, "echo fine")["output"] == "fine\n"
    finally:
        box.stop()


# Other images, and cleaning up


def test_image_without_the_toolbox_gets_it_mounted_and_the_workspace_stays_clean(docker_client, sandbox_image,
                                                                                 tmp_path):
    image = build_image(docker_client, f"FROM {sandbox_image}\nUSER root\nRUN rm -r /opt/cairn\n",
                        "cairn-test-no-toolbox:latest")
    with DockerSandbox("test-no-toolbox", tmp_path / "ws", SandboxConfig(), image, docker_client) as box:
        assert shell(box, "echo ok")["output"] == "ok\n"
        assert "/opt/cairn" in box.toolbox.argv
    assert list((tmp_path / "ws").iterdir()) == []


def test_missing_image_is_a_clear_error(docker_client, tmp_path):
    with pytest.raises(SandboxError, match="cairn-no-such-image:0 is not in the Docker engine"):
        DockerSandbox("test-no-image", tmp_path, SandboxConfig(), "cairn-no-such-image:0", docker_client).start()


def test_gc_removes_containers_of_runs_that_are_not_live(docker_client, sandbox_image, sandbox, tmp_path):
    live = sandbox.run_id
    with DockerSandbox("test-gc-dead", tmp_path / "a", SandboxConfig(), sandbox_image, docker_client):
        removed = gc(docker_client, live_run_ids={live}, known_run_ids={"test-gc-dead", live})
    assert "cairn-test-gc-dead" in removed and f"cairn-{live}" not in removed
    with pytest.raises(docker.errors.NotFound):
        docker_client.containers.get("cairn-test-gc-dead")


def test_gc_leaves_a_busy_container_of_an_unknown_run_alone(docker_client, sandbox_image, tmp_path):
    with DockerSandbox("test-gc-elsewhere", tmp_path / "b", SandboxConfig(), sandbox_image, docker_client) as box:
        box.call("shell", command="true", timeout=5)
        removed = gc(docker_client, live_run_ids=set())
        assert "cairn-test-gc-elsewhere" not in removed
        assert docker_client.containers.get("cairn-test-gc-elsewhere").status == "running"


HOST_SCRIPT = """
import sys
from pathlib import Path
from orchestrator.config import SandboxConfig
from orchestrator.sandbox.docker.sandbox import DockerSandbox
box = DockerSandbox(sys.argv[1], Path(sys.argv[2]), SandboxConfig(), sys.argv[3])
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
