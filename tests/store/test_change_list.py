"""The change list (store/change_list.py) sees what the agent writes in its container: the workspace is a
bind mount, so each write is the host kernel's, under runc and under gVisor alike; and a step's checkpoint
made from that list is the tree a full scan makes."""

from __future__ import annotations

import os

import pytest

from orchestrator.config import SandboxConfig
from orchestrator.sandbox.docker.sandbox import DockerSandbox
from orchestrator.store.change_list import FILE, TREE, ChangeWatch
from orchestrator.store.checkpoints import Checkpoints
from tests.sandbox_fixtures import docker_client, sandbox_image  # noqa: F401 - fixtures

pytestmark = [pytest.mark.docker,
              pytest.mark.skipif(not os.path.exists("/proc/sys/fs/inotify"), reason="inotify is Linux's")]

WRITES = ("mkdir -p a/b && echo 1 > a/b/new.txt && echo 2 >> kept.txt && rm gone.txt && mv moved.txt there.txt "
          "&& chmod +x run.sh && ln -s kept.txt link && tar -C /etc -cf - hostname hosts | tar -C a -xf - "
          "&& (for i in $(seq 1 50); do echo $i > burst$i; done)")


@pytest.mark.parametrize("runtime", ["runc", "runsc"])
def test_what_the_agent_writes_in_its_container_is_in_the_hosts_change_list(docker_client, sandbox_image, tmp_path,
                                                                            runtime):
    if runtime not in (docker_client.info().get("Runtimes") or {}):
        pytest.skip(f"the engine has no {runtime} runtime (scripts/test-tools.sh registers runsc)")
    ws = tmp_path / "ws"
    ws.mkdir()
    for name in ("kept.txt", "gone.txt", "moved.txt", "run.sh"):
        (ws / name).write_text(f"{name}\n")
    watch = ChangeWatch([ws])
    cp = Checkpoints(tmp_path / "checkpoints.git", ws, changes=watch.subscribe())
    assert watch.start() is None
    cp.commit(0)
    try:
        with DockerSandbox(f"test-watch-{runtime}", ws, SandboxConfig(runtime=runtime), sandbox_image,
                           docker_client) as box:
            assert box.call("shell", command=WRITES)["exit_code"] == 0
            done = cp.commit(1)
    finally:
        watch.close()
    assert cp.full_scans == 0  # step 1 came from the change list alone
    index = tmp_path / "scan-index"
    scan = Checkpoints(cp.git_dir, ws, index=index)
    scan.stage()
    assert done.commit is not None and cp._tree == scan.git.write_tree()


def test_the_list_names_each_kind_of_change(docker_client, sandbox_image, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "kept.txt").write_text("k\n")
    watch = ChangeWatch([ws])
    changes = watch.subscribe()
    watch.start()
    assert not changes.take().complete  # what happened before the watch began is not known
    try:
        with DockerSandbox("test-watch-kinds", ws, SandboxConfig(), sandbox_image, docker_client) as box:
            box.call("shell", command="mkdir -p d/e && echo x > d/e/f && echo y >> kept.txt")
            taken = changes.take()
    finally:
        watch.close()
    assert taken.complete
    paths = taken.under(ws)
    assert paths["d"] & TREE and paths["d/e/f"] & FILE and paths["kept.txt"] & FILE
