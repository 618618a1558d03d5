"""Any image, any work directory: `--image IMG --workdir /app`, cairn's files at /cairn, and images without
Python (the Python carried in on a volume)."""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import subprocess
import tarfile
import time
from pathlib import Path

import docker
import pytest

from orchestrator.config import RunConfig, SandboxConfig
from orchestrator.runs.new_run import create_run
from orchestrator.sandbox.docker.sandbox import DockerSandbox
from orchestrator.errors import ToolError
from orchestrator.sandbox import carried
from orchestrator.sandbox.docker import python_volume
from orchestrator.store.run_dir import RunDir
from tests.sandbox_fixtures import build_image, docker_client, sandbox_image  # noqa: F401 - fixtures
from tests.cli.test_cli import cairn, cairn_here
from tests.runs.test_workspaces import DONE, call, results, script, the_run

AS_ROOT = os.getuid() == 0
BASE = "cairn-base:bookworm"  # a debootstrap minbase Debian: no python
APP_IMAGE = "cairn-test-workdir-app:latest"
BUSYBOX_IMAGE = "cairn-test-busybox:latest"
BIG = "i=0; while [ $i -lt 4000 ]; do echo \"line $i xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"; i=$((i+1)); done"

APP_DOCKERFILE = f"""FROM {BASE}
RUN mkdir -p /app/src /app/private \\
 && printf 'hello\\n' > /app/x \\
 && printf '#!/bin/sh\\necho ran from /app\\n' > /app/run.sh && chmod 755 /app/run.sh \\
 && printf 'deep\\n' > /app/src/deep.txt && chmod 600 /app/src/deep.txt \\
 && printf 'key\\n' > /app/private/key && chmod 700 /app/private \\
 && ln -s x /app/link \\
 && ln -s /etc/os-release /app/os \\
 && ln /app/x /app/hard
"""


@pytest.fixture(scope="module")
def app_image(docker_client) -> str:
    try:
        docker_client.api.inspect_image(BASE)
    except docker.errors.ImageNotFound:
        pytest.skip(f"{BASE} is not in the engine")
    return build_image(docker_client, APP_DOCKERFILE, APP_IMAGE)


@pytest.fixture(scope="module")
def busybox_image(docker_client, tmp_path_factory) -> str:
    """An image that is Debian's static busybox in an empty root, and nothing else: no libc, no python,
    no bash. Made with `docker import` from the busybox-static package (downloaded with apt-get when the
    host has no busybox)."""
    try:
        docker_client.api.inspect_image(BUSYBOX_IMAGE)
        return BUSYBOX_IMAGE
    except docker.errors.ImageNotFound:
        pass
    work = tmp_path_factory.mktemp("busybox")
    binary = Path("/bin/busybox") if Path("/bin/busybox").is_file() else None
    if binary is None and shutil.which("apt-get"):
        fetched = subprocess.run(["apt-get", "download", "busybox-static"], cwd=work, capture_output=True)
        debs = list(work.glob("busybox-static_*.deb"))
        if fetched.returncode == 0 and debs:
            subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(work / "x")], check=True)
            binary = work / "x" / "bin" / "busybox"
    if binary is None or not binary.is_file():
        pytest.skip("no busybox binary and no busybox-static package to make a busybox image from")
    root = work / "root"
    (root / "bin").mkdir(parents=True)
    shutil.copy2(binary, root / "bin" / "busybox")
    for applet in ("sh", "sleep", "ls", "cat", "echo", "mkdir", "mv", "rm", "pwd", "id", "env"):
        os.symlink("busybox", root / "bin" / applet)
    tarred = subprocess.run(["tar", "-C", str(root), "-c", "."], capture_output=True, check=True).stdout
    subprocess.run(["docker", "import", "-", BUSYBOX_IMAGE], input=tarred, check=True, capture_output=True)
    return BUSYBOX_IMAGE


def settings(tmp_path: Path, sandbox: dict) -> str:
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"sandbox": sandbox}))
    return str(path)


# -- the work directory's name ----------------------------------------------------------------------

@pytest.mark.parametrize("workdir, says", [
    ("app", "absolute"), ("/", "cannot be /"), ("/etc", "system directory"), ("/usr", "system directory"),
    ("/proc/1", "system directory"), ("/cairn", "system directory"),
])
def test_a_workdir_that_is_not_a_project_directory_is_a_one_line_usage_error(runs_dir, workdir, says):
    out = cairn_here("run", "task", "--workdir", workdir, runs_dir=runs_dir)
    assert out.returncode == 2
    [line] = out.stderr.strip().splitlines()
    assert line.startswith("cairn: error: ") and says in line
    assert not runs_dir.exists() or not list(runs_dir.iterdir())


# -- copying the work directory out of the image ---------------------------------------------------

@pytest.mark.docker
def test_the_images_workdir_becomes_the_workspace_with_modes_links_and_owners(app_image, tmp_path):
    cfg = RunConfig.model_validate({"sandbox": {"image": app_image, "workdir": "/app"}})
    run = create_run(tmp_path / "runs", "task", cfg)
    ws = run.workspace
    assert sorted(p.name for p in ws.iterdir()) == ["hard", "link", "os", "private", "run.sh", "src", "x"]
    assert (ws / "x").read_text() == "hello\n" and not (ws / "WORKSPACE.md").exists()
    assert stat.S_IMODE((ws / "run.sh").stat().st_mode) == 0o755
    assert stat.S_IMODE((ws / "src" / "deep.txt").stat().st_mode) == 0o600
    assert stat.S_IMODE((ws / "private").stat().st_mode) == 0o700
    assert os.readlink(ws / "link") == "x" and os.readlink(ws / "os") == "/etc/os-release"
    assert (ws / "hard").stat().st_ino == (ws / "x").stat().st_ino
    if AS_ROOT:
        assert {(p.lstat().st_uid, p.lstat().st_gid) for p in [ws, *ws.rglob("*")]} == {(0, 0)}
    assert run.read_meta()["workdir_source"] == {"image": app_image, "path": "/app", "found": True, "entries": 9}
    assert not list(docker.from_env().containers.list(all=True, filters={"name": f"cairn-{run.id}-copy"}))


@pytest.mark.docker
def test_a_workdir_the_image_does_not_have_starts_empty_and_says_so(app_image, runs_dir, tmp_path):
    model = script(tmp_path, call("shell_exec", command="pwd; ls -A"), DONE)
    out = cairn("run", "t", "--image", app_image, "--workdir", "/srv/new", "--model", model, "--json",
                runs_dir=runs_dir)
    assert out.returncode == 0, out.stderr
    assert "/srv/new is not in the image" in out.stderr and "starts empty" in out.stderr
    assert results(out)[0].strip() == "/srv/new"


@pytest.mark.docker
def test_a_member_escaping_the_workspace_is_refused(docker_client, tmp_path):
    from orchestrator.errors import SandboxError
    from orchestrator.sandbox.docker.workdir import _Chunks, _Unpacker

    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        for name, kind, target in [("app", tarfile.DIRTYPE, ""), ("app/out", tarfile.SYMTYPE, "/tmp"),
                                   ("app/out/evil", tarfile.REGTYPE, "")]:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, target
            tar.addfile(info, io.BytesIO(b"") if kind == tarfile.REGTYPE else None)
    dest = tmp_path / "ws"
    dest.mkdir()
    with tarfile.open(fileobj=_Chunks(iter([archive.getvalue()])), mode="r|") as tar:
        with pytest.raises(SandboxError, match="out on its way is not a directory"):
            _Unpacker(tar, dest, "/app").unpack()
    assert not Path("/tmp/evil").exists()


# -- a run in /app ---------------------------------------------------------------------------------

@pytest.mark.docker
def test_a_run_in_app_works_there_and_files_diff_offload_and_resume_follow(app_image, runs_dir, tmp_path):
    model = script(tmp_path,
                   call("shell_exec", command="pwd; ./run.sh"),                       # 1
                   call("file_edit", path="/app/x", old="hello", new="bye"),         # 2
                   call("file_write", path="notes/rel.txt", content="relative\n"),   # 3
                   call("file_read", path="/etc/os-release"),                        # 4
                   call("shell_exec", command=BIG),                                  # 5: offloaded
                   call("file_read", path="/cairn/obs/5-shell_exec.txt", offset=1235, limit=1),  # 6
                   DONE)
    out = cairn("run", "work in /app", "--image", app_image, "--workdir", "/app", "--model", model, "--json",
                runs_dir=runs_dir)
    assert out.returncode == 0, out.stderr
    run = the_run(runs_dir)
    said = results(out)
    assert said[0].split() == ["/app", "ran", "from", "/app"]
    assert "Debian" in said[3]
    assert said[5].startswith("line 1234 ")

    # the edits are in the workspace: relative paths landed in /app
    assert (run.workspace / "x").read_text() == "bye\n"
    assert (run.workspace / "notes" / "rel.txt").read_text() == "relative\n"

    # the offloaded output is cairn's, at /cairn/obs in the sandbox and <run>/cairn/obs on the host
    doc = json.loads(out.stdout)
    assert doc["steps"][4]["tool_calls"][0]["offloaded_to"] == "/cairn/obs/5-shell_exec.txt"
    assert (run.cairn_dir / "obs" / "5-shell_exec.txt").read_text().startswith("line 0 ")

    # no cairn file in the project
    names = {p.relative_to(run.workspace).as_posix() for p in run.workspace.rglob("*")}
    assert names == {"x", "run.sh", "link", "os", "hard", "src", "src/deep.txt", "private", "private/key",
                     "notes", "notes/rel.txt"}

    files = cairn_here("files", run.id, runs_dir=runs_dir)
    assert files.returncode == 0 and "notes/rel.txt" in files.stdout and " x" in files.stdout
    assert ".cairn" not in files.stdout
    diff = cairn_here("diff", run.id, runs_dir=runs_dir)
    assert "-hello" in diff.stdout and "+bye" in diff.stdout and ".cairn" not in diff.stdout

    more = script(tmp_path, call("shell_exec", command="cat /app/x; pwd"), DONE)
    again = cairn("resume", run.id, "--message", "check", "--model", more, "--json", runs_dir=runs_dir)
    assert again.returncode == 0, again.stderr
    assert results(again)[-2].split() == ["bye", "/app"]


@pytest.mark.docker
def test_an_older_run_with_workspace_cairn_still_reads_its_pointers(sandbox_image, tmp_path):
    run = create_run(tmp_path / "runs", "task", RunConfig())
    (run.workspace / ".cairn" / "obs").mkdir(parents=True)
    (run.workspace / ".cairn" / "obs" / "1-shell_exec.txt").write_text("old output\n")
    with DockerSandbox(run.id, run.workspace, SandboxConfig(), sandbox_image, cairn_mount=run.cairn_dir) as box:
        assert box.call("read", path=".cairn/obs/1-shell_exec.txt")["content"] == "old output\n"


# -- lockdown ------------------------------------------------------------------------------------------

@pytest.mark.docker
def test_under_lockdown_only_the_workdir_and_cairns_files_are_reachable(app_image, tmp_path):
    cfg = RunConfig.model_validate({"sandbox": {"image": app_image, "workdir": "/app", "lockdown": True}})
    run = create_run(tmp_path / "runs", "task", cfg)
    (run.cairn_dir / "obs").mkdir()
    (run.cairn_dir / "obs" / "1-x.txt").write_text("saved\n")
    with DockerSandbox(run.id, run.workspace, cfg.sandbox, app_image, cairn_mount=run.cairn_dir) as box:
        with pytest.raises(ToolError, match=r"/etc/os-release: outside /app"):
            box.call("read", path="/etc/os-release")
        with pytest.raises(ToolError, match="outside /app"):
            box.call("write", path="../elsewhere.txt", content="x")
        assert box.call("read", path="x")["content"] == "hello\n"
        assert box.call("read", path="/cairn/obs/1-x.txt")["content"] == "saved\n"


# -- images without python --------------------------------------------------------------------------

@pytest.mark.docker
@pytest.mark.parametrize("image_fixture", ["base", "busybox_image"])
def test_an_image_without_python_runs_the_toolbox_on_the_carried_python(request, docker_client, sandbox_image,
                                                                         tmp_path, image_fixture):
    image = BASE if image_fixture == "base" else request.getfixturevalue(image_fixture)
    (tmp_path / "cairn").mkdir()
    with DockerSandbox(f"test-nopy-{image_fixture}", tmp_path / "ws", SandboxConfig(), image, docker_client,
                 cairn_mount=tmp_path / "cairn") as box:
        assert box.toolbox.argv[0] == carried.LOADER
        assert box.call("shell", command="command -v python3 || echo none; echo hi")["output"] == "none\nhi\n"
        box.call("write", path="made.txt", content="by the toolbox\n")
        assert box.call("read", path="/workspace/made.txt")["content"] == "by the toolbox\n"
        big = box.call("shell", command=BIG, inline_bytes=4096)
        assert big["truncated"] and big["output_path"].startswith("/cairn/obs/shell-")
    assert (tmp_path / "ws" / "made.txt").read_text() == "by the toolbox\n"
    assert sorted(p.name for p in (tmp_path / "ws").iterdir()) == ["made.txt"]


@pytest.mark.docker
def test_a_fill_cut_off_earlier_is_completed_on_start(docker_client, sandbox_image, tmp_path):
    name = python_volume.volume_name("test-" + str(time.time()))
    docker_client.api.create_volume(name)  # made, never filled: what a Ctrl-C during the first fill leaves
    try:
        box = docker_client.containers.run(BASE, entrypoint=["sleep", "infinity"], command=[], detach=True,
                                           network_mode="none",
                                           volumes={name: {"bind": carried.MOUNT, "mode": "ro"}})
        try:
            python_volume.check(box, docker_client, sandbox_image, name)
            code, output = box.exec_run(carried.argv("-c") + ["print(6 * 7)"])
            assert (code, output) == (0, b"42\n")
        finally:
            box.remove(force=True)
    finally:
        python_volume._ready.discard(name)
        docker_client.api.remove_volume(name)


def test_export_and_import_carry_cairns_files(tmp_path):
    from orchestrator.store.archive import export_run, import_run

    run = create_run(tmp_path / "runs", "task", RunConfig())
    (run.cairn_dir / "obs").mkdir()
    (run.cairn_dir / "obs" / "3-shell_exec.txt").write_text("saved\n")
    export_run(run, tmp_path / "r.tar.gz")
    moved = import_run(tmp_path / "r.tar.gz", tmp_path / "elsewhere")
    assert (moved.cairn_dir / "obs" / "3-shell_exec.txt").read_text() == "saved\n"
    assert not (moved.workspace / ".cairn").exists()
