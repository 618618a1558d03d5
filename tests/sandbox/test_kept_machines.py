"""A machine that survives: a run's container is kept when the run stops, started again by `resume`,
carried by `export --with-machine`, shown by `ls`, opened by `shell` and removed by `gc`."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from orchestrator.config import SandboxConfig
from orchestrator.sandbox.docker.sandbox import DockerSandbox
from orchestrator.sandbox.docker.container import container_name
from orchestrator.sandbox.docker.machine import machine_tag
from orchestrator.store.run_dir import RunDir
from tests.loop_helpers import call, done, turn
from tests.sandbox_fixtures import docker_client  # noqa: F401 - fixture
from tests.runs.test_survives_sigkill import Cairn

pytestmark = pytest.mark.docker

INSTALL = "printf '#!/bin/sh\\necho tool-ok\\n' > /usr/local/bin/mytool && chmod +x /usr/local/bin/mytool"


def shell(sandbox: DockerSandbox, command: str) -> str:
    return sandbox.call("shell", command=command, timeout=30)["output"]


def previews(out: subprocess.CompletedProcess) -> str:
    """Every tool call's result preview in a `--json` document, joined."""
    doc = json.loads(out.stdout)
    return "\n".join(c["result"] or "" for s in doc["steps"] for c in s["tool_calls"])


def requests(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def state_of(client: docker.DockerClient, run_id: str) -> str | None:
    try:
        return client.containers.get(container_name(run_id)).status
    except docker.errors.NotFound:
        return None


@pytest.fixture
def cairn(tmp_path: Path, docker_client, sandbox_image) -> Iterator[Cairn]:
    """cairn commands on a runs directory of this test; the containers and machine images its runs made
    are removed afterwards (they are kept on purpose otherwise)."""
    made = Cairn(tmp_path)
    yield made
    for runs_dir in {made.runs_dir, tmp_path / "runs2", tmp_path / "other"}:
        for run in RunDir.all(runs_dir):
            docker_client.api.remove_container(container_name(run.id), force=True) if state_of(
                docker_client, run.id) else None
            try:
                docker_client.api.remove_image(machine_tag(run.id))
            except docker.errors.NotFound:
                pass


def install_a_tool(cairn: Cairn) -> RunDir:
    out, _ = cairn.run("run", "install a tool", "--model",
                       cairn.script([turn(call("shell_exec", command=INSTALL)), done("installed")]))
    assert out.returncode == 0, out.stderr
    return cairn.the_run()


def use_the_tool(cairn: Cairn, run: RunDir, *options: str) -> tuple[subprocess.CompletedProcess, Path]:
    return cairn.run("resume", run.id, "--message", "use the tool", "--json", *options, "--model",
                     cairn.script([turn(call("shell_exec", command="mytool || echo no-tool")), done("used")]))


# Kept, and started again


def moved_with_its_machine(cairn: Cairn, docker_client, tmp_path: Path) -> tuple[RunDir, Path, Cairn, RunDir]:
    """A run that installed a tool, exported `--with-machine`, its container gone (as on another machine),
    and imported into another runs dir: (the run, the archive, the other runs dir's cairn, the import)."""
    run = install_a_tool(cairn)
    archive = tmp_path / "run.tar.gz"
    out, _ = cairn.run("export", run.id, "-o", str(archive), "--with-machine")
    assert out.returncode == 0, out.stderr
    docker_client.api.remove_container(container_name(run.id), force=True)  # "another machine"
    elsewhere = Cairn(tmp_path, runs_dir=tmp_path / "runs2")
    out, _ = elsewhere.run("import", str(archive))
    assert out.returncode == 0, out.stderr
    return run, archive, elsewhere, elsewhere.the_run()


def test_a_stopped_run_keeps_its_container_and_resume_finds_what_the_agent_installed(cairn, docker_client):
    run = install_a_tool(cairn)
    assert state_of(docker_client, run.id) == "exited"
    out, log = use_the_tool(cairn, run)
    assert out.returncode == 0, out.stderr
    assert "tool-ok" in previews(out)
    assert "resumed in the same sandbox" in json.dumps(requests(log)[0]["messages"])


def test_resume_starts_afresh_where_the_container_is_gone_and_tells_the_agent(cairn, docker_client):
    run = install_a_tool(cairn)
    docker_client.api.remove_container(container_name(run.id), force=True)
    out, log = use_the_tool(cairn, run)
    assert "no-tool" in previews(out)
    assert "resumed in a new sandbox" in json.dumps(requests(log)[0]["messages"])


def test_a_crashed_sessions_container_is_reused_once_its_processes_are_dead(docker_client, sandbox_image, tmp_path):
    first = DockerSandbox(f"test-crashed-{tmp_path.name[-12:]}", tmp_path / "ws", SandboxConfig(), sandbox_image,
                    docker_client, keep=True)
    first.start()
    try:
        shell(first, f"{INSTALL}; nohup sleep 1000 >/dev/null 2>&1 &")
        first.toolbox.close()  # what a SIGKILL of cairn leaves: the container runs on, with the sleep in it
        second = DockerSandbox(first.run_id, tmp_path / "ws", SandboxConfig(), sandbox_image, docker_client, keep=True)
        second.start()
        assert second.reused and second.container.id == first.container.id
        assert shell(second, "pgrep -f 'sleep 1000' || echo none; mytool") == "none\ntool-ok\n"
    finally:
        first.remove()


def test_kill_stray_processes_ends_every_process_of_the_session_and_keeps_the_files(docker_client, sandbox_image,
                                                                                     tmp_path):
    with DockerSandbox(f"test-strays-{tmp_path.name[-12:]}", tmp_path / "ws", SandboxConfig(), sandbox_image,
                 docker_client) as box:
        shell(box, f"{INSTALL}; nohup sleep 1000 >/dev/null 2>&1 &")
        box.kill_stray_processes()
        assert shell(box, "pgrep -f 'sleep 1000' || echo none; mytool") == "none\ntool-ok\n"


def test_a_kept_container_made_with_other_settings_is_replaced_and_says_why(docker_client, sandbox_image, tmp_path):
    name = f"test-replaced-{tmp_path.name[-12:]}"
    box = DockerSandbox(name, tmp_path / "ws", SandboxConfig(), sandbox_image, docker_client, keep=True)
    try:
        box.start()
        box.stop()
        box = DockerSandbox(name, tmp_path / "ws", SandboxConfig(memory="300m"), sandbox_image, docker_client, keep=True)
        box.start()
        assert not box.reused and "other settings" in box.replaced
    finally:
        box.remove()


# Carried to another machine


def test_export_with_machine_and_import_keep_what_the_agent_installed(cairn, docker_client, tmp_path):
    run, archive, elsewhere, imported = moved_with_its_machine(cairn, docker_client, tmp_path)
    with tarfile.open(archive) as tar:
        assert f"{run.id}/state/machine.tar" in tar.getnames()
    out, _ = use_the_tool(elsewhere, imported)  # the machine is an image from someone else: it waits for trust
    assert out.returncode == 2
    assert "machine = \"state/machine.tar\" (this container image from the archive would be loaded" in out.stderr
    out, log = use_the_tool(elsewhere, imported, "--trust")
    assert out.returncode == 0, out.stderr
    assert "tool-ok" in previews(out)
    image = imported.read_meta()["machine"]["image"]  # by its id: no tag can re-point it
    assert image.startswith("sha256:") and docker_client.api.inspect_image(machine_tag(run.id))["Id"] == image
    assert not (imported.state / "machine.tar").exists()  # loaded into the engine, then deleted


def test_an_untrusted_machine_is_never_loaded_and_safe_defaults_go_on_without_it(cairn, docker_client, tmp_path):
    run, _archive, elsewhere, imported = moved_with_its_machine(cairn, docker_client, tmp_path)
    out, _ = use_the_tool(elsewhere, imported, "--safe-defaults")
    assert out.returncode == 0, out.stderr
    assert "no-tool" in previews(out)  # a fresh container of cairn's image: the tool is not there
    assert "machine" not in imported.read_meta()
    with pytest.raises(docker.errors.ImageNotFound):
        docker_client.api.inspect_image(machine_tag(run.id))


def test_export_with_machine_carries_no_value_passed_into_the_container(cairn, docker_client, tmp_path,
                                                                         monkeypatch):
    """Docker records the container's config in the committed image (`container_config`) and in each saved
    layer's `json`: the values of `sandbox.env` and `pass_env` are blanked in all of them."""
    monkeypatch.setenv("CAIRN_TEST_PASSED", "passed-secret-4f1c")
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"sandbox": {"env": {"CAIRN_TEST_SET": "set-secret-9b2e"},
                                                "pass_env": ["CAIRN_TEST_PASSED"]}}))
    out, _ = cairn.run("run", "install a tool", "--settings", str(settings), "--model", cairn.script(
        [turn(call("shell_exec", command=f"{INSTALL} && echo $CAIRN_TEST_PASSED $CAIRN_TEST_SET")), done()]))
    assert out.returncode == 0, out.stderr
    run = cairn.the_run()
    archive = tmp_path / "run.tar.gz"
    out, _ = cairn.run("export", run.id, "-o", str(archive), "--with-machine")
    assert out.returncode == 0, out.stderr
    with tarfile.open(archive) as outer:
        machine = outer.extractfile(f"{run.id}/state/machine.tar")
        with tarfile.open(fileobj=machine, mode="r|") as saved:
            metadata = {m.name: saved.extractfile(m).read() for m in saved
                        if m.isreg() and not m.name.endswith("layer.tar")}
    configs = [name for name in metadata if name.endswith("json")]
    assert "manifest.json" in configs and len(configs) >= 3, configs  # the manifest, the config, layers' json
    for name, data in metadata.items():
        assert b"passed-secret-4f1c" not in data and b"set-secret-9b2e" not in data, name
    assert b"CAIRN_TEST_PASSED=" in b"".join(metadata.values())  # the names stay, blank


def test_loading_a_machine_moves_no_tag_of_this_engine(cairn, docker_client, sandbox_image, tmp_path):
    """A machine whose manifest claims an existing tag (every run's cairn-sandbox:<hash> is predictable)
    is loaded by content and tagged cairn-machine:<run id> only: the claimed tag stays where it was."""
    victim = f"cairn-test-victim:{tmp_path.name[-12:].lower()}"
    docker_client.api.tag(sandbox_image, *victim.split(":"))
    before = docker_client.api.inspect_image(victim)["Id"]
    try:
        run, _archive, elsewhere, imported = moved_with_its_machine(cairn, docker_client, tmp_path)
        claim_tags(imported.state / "machine.tar", [victim, machine_tag(run.id)])
        out, _ = use_the_tool(elsewhere, imported, "--trust")
        assert out.returncode == 0, out.stderr
        assert "tool-ok" in previews(out)
        assert docker_client.api.inspect_image(victim)["Id"] == before
    finally:
        docker_client.api.remove_image(victim)


def claim_tags(path: Path, tags: list[str]) -> None:
    """Rewrite a saved image so that its manifest (and the older `repositories`) claim `tags`."""
    crafted = path.with_name("crafted.tar")
    with tarfile.open(path) as tar, tarfile.open(crafted, "w") as out:
        for m in tar:
            if m.name == "manifest.json":
                manifest = json.loads(tar.extractfile(m).read())
                manifest[0]["RepoTags"] = tags
                data = json.dumps(manifest).encode()
                m.size = len(data)
                out.addfile(m, io.BytesIO(data))
            else:
                out.addfile(m, tar.extractfile(m) if m.isreg() else None)
    crafted.replace(path)


def test_export_with_machine_of_a_run_without_a_container_is_a_one_line_error(cairn, docker_client, tmp_path):
    run = install_a_tool(cairn)
    docker_client.api.remove_container(container_name(run.id), force=True)
    out, _ = cairn.run("export", run.id, "-o", str(tmp_path / "x.tar.gz"), "--with-machine")
    assert out.returncode == 2
    assert out.stderr.splitlines()[-1].startswith(f"cairn: error: run {run.id} holds no container")
    assert not (tmp_path / "x.tar.gz").exists()


# Listed, opened, removed


def test_ls_shows_which_runs_hold_a_container(cairn, docker_client):
    run = install_a_tool(cairn)
    out, _ = cairn.here("ls", "--json")
    assert [row["container"] for row in json.loads(out.stdout)] == ["stopped"]
    out, _ = cairn.here("ls", "--wide")  # the container is a detail: --wide shows it (and --json always)
    assert "CONTAINER" in out.stdout.splitlines()[0].split() and " stopped " in out.stdout
    docker_client.api.remove_container(container_name(run.id), force=True)
    out, _ = cairn.here("ls", "--json")
    assert [row["container"] for row in json.loads(out.stdout)] == [None]


def test_ls_without_an_engine_is_quick_and_says_null(cairn, tmp_path):
    install_a_tool(cairn)
    code = ("import sys, time; t = time.monotonic(); from orchestrator.ui.inspect.listing import list_runs; "
            f"rows = list_runs(__import__('pathlib').Path({str(cairn.runs_dir)!r})); "
            "print(rows[0]['container'], 'docker' in sys.modules, time.monotonic() - t < 2)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock", "PATH": "/usr/bin:/bin"})
    assert out.stdout.split() == ["None", "False", "True"]


def test_gc_older_than_removes_only_this_runs_dirs_containers_unused_that_long(cairn, docker_client, tmp_path):
    run = install_a_tool(cairn)
    other = install_a_tool(Cairn(tmp_path, runs_dir=tmp_path / "other"))
    out, _ = cairn.run("gc", "--older-than", "1d")
    assert out.returncode == 0 and out.stdout.startswith("removed 0 container(s)")
    assert state_of(docker_client, run.id) == "exited"
    time.sleep(1.1)
    out, _ = cairn.run("gc", "--older-than", "1s")
    assert f"cairn-{run.id}" in out.stdout and state_of(docker_client, run.id) is None
    assert state_of(docker_client, other.id) == "exited"  # another runs dir's kept machine


def test_gc_refuses_a_duration_it_cannot_read(cairn):
    out, _ = cairn.run("gc", "--older-than", "soon")
    assert out.returncode == 2 and out.stderr.startswith("cairn: error: --older-than 'soon' is not a duration")


def test_shell_opens_in_the_kept_container_and_leaves_it_stopped(cairn, docker_client):
    run = install_a_tool(cairn)
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "shell", run.id], input="mytool; id -u\n",
                          capture_output=True, text=True, timeout=120, env=cairn.env(cairn.tmp / "unused.jsonl"))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "tool-ok\n0\n"
    assert state_of(docker_client, run.id) == "exited"


# The run options


def test_an_unknown_runtime_is_a_one_line_error_with_exit_code_4(cairn):
    out, _ = cairn.run("run", "x", "--runtime", "no-such-runtime", "--model", cairn.script([done()]))
    assert out.returncode == 4
    errors = [line for line in out.stderr.splitlines() if line.startswith("cairn: error:")]
    assert errors == [errors[0]] and errors[0].startswith("cairn: error: the Docker engine has no runtime 'no-such-runtime'")


def test_lockdown_runs_the_agent_in_the_cage(cairn):
    out, _ = cairn.run("run", "x", "--lockdown", "--json", "--model", cairn.script([
        turn(call("shell_exec", command="id -u; touch /usr/x")), done()]))
    assert out.returncode == 0, out.stderr
    assert "Read-only file system" in previews(out) and "\n0\n" not in previews(out)
    assert cairn.the_run().read_meta()["config"]["sandbox"]["lockdown"] is True


def test_a_copy_of_a_run_beside_its_original_gets_its_own_container(docker_client, sandbox_image, tmp_path):
    name = f"test-copy-{tmp_path.name[-12:]}"
    for copy in ("original", "copy"):
        (tmp_path / copy / "state").mkdir(parents=True)
    original = DockerSandbox(name, tmp_path / "ws1", SandboxConfig(), sandbox_image, docker_client, keep=True,
                       run_dir=tmp_path / "original")
    copy = DockerSandbox(name, tmp_path / "ws2", SandboxConfig(), sandbox_image, docker_client, keep=True,
                   run_dir=tmp_path / "copy")
    try:
        original.start()
        shell(original, INSTALL)
        original.stop()
        copy.start()
        assert not copy.reused and copy.container.name == f"cairn-{name}-" + copy.container.name[-8:]
        assert shell(copy, "command -v mytool || echo no-tool") == "no-tool\n"
        copy.stop()
        original.start()
        assert original.reused and shell(original, "mytool") == "tool-ok\n"
    finally:
        original.remove()
        copy.remove()


def test_rm_of_copies_of_one_run_in_two_runs_dirs_removes_each_ones_own_container(docker_client, sandbox_image,
                                                                                   tmp_path):
    """The same run imported into two runs directories: the second copy's container is
    cairn-<id>-<hash> (the name is the first's), and `cairn rm` of either removes its own, not the other's."""
    original = Cairn(tmp_path, runs_dir=tmp_path / "a")
    out, _ = original.run("run", "a task", "--model", original.script([done()]))
    assert out.returncode == 0, out.stderr
    first = original.the_run()
    copy = Cairn(tmp_path, runs_dir=tmp_path / "b")
    shutil.copytree(first.root, copy.runs_dir / first.id, symlinks=True)
    # A script of its own: the run played the first one to its end, and goes on from there with the same.
    out, _ = copy.run("resume", first.id, "--message", "go on", "--model", copy.script([done("went on")]))
    assert out.returncode == 0, out.stderr
    named = {c.name: c.labels.get("cairn.run_dir") for c in docker_client.containers.list(
        all=True, filters={"label": f"cairn.run={first.id}"})}
    assert len(named) == 2 and container_name(first.id) in named, named
    [copys] = [name for name in named if name != container_name(first.id)]
    try:
        removed, _ = copy.here("rm", first.id)
        assert removed.returncode == 0, removed.stderr
        assert removed.stdout == f"removed run {first.id} and its container {copys}\n"
        assert state_of(docker_client, first.id) is not None  # the original's machine is left alone
        removed, _ = original.here("rm", first.id)
        assert removed.stdout == f"removed run {first.id} and its container {container_name(first.id)}\n"
        assert state_of(docker_client, first.id) is None
    finally:
        for name in named:
            docker_client.api.remove_container(name, force=True) if name in {
                c.name for c in docker_client.containers.list(all=True)} else None
