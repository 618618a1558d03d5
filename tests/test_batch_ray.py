"""`cairn batch --ray`: a batch's runs as tasks on a real Ray cluster of three nodes on this machine.

The head node (where the driver and its hub are) declares no `cairn_sandbox`, so every run goes to one
of the two worker nodes, each taking two sandboxes. Everything listens on 127.0.0.1 only: Ray holds to
the loopback address where it thinks clusters unsupported, a switch read from the environment
(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0), set here before Ray is imported. The cluster is stopped through
its own object at the end of the module; nothing here runs `ray stop`.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # before Ray reads its constants
ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'cairn-agent[ray]'")

from orchestrator.batch_ray import RayBatch  # noqa: E402
from orchestrator.store.runs import RunDir  # noqa: E402
from orchestrator.store.trust import is_untrusted  # noqa: E402
from tests.test_batch import tool, write_batch, write_script  # noqa: E402
from tests.test_cli import cairn  # noqa: E402

pytestmark = [pytest.mark.docker, pytest.mark.ray]

NODE = {"num_cpus": 1, "node_ip_address": "127.0.0.1", "object_store_memory": 100 * 2**20, "include_dashboard": False}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, sandbox_image):
    """(the Cluster, {short node id: (node, its own runs dir)}) for the two worker nodes."""
    from ray.cluster_utils import Cluster

    base = tmp_path_factory.mktemp("ray-nodes")
    # Quick health checks: a node whose raylet is killed is known dead in a few seconds, not 30.
    head = {**NODE, "_system_config": {"health_check_period_ms": 1000, "health_check_failure_threshold": 2,
                                       "health_check_timeout_ms": 1000}}
    c = Cluster(initialize_head=True, head_node_args=head)
    workers = {}
    try:
        for name in ("a", "b"):
            local = base / f"node-{name}"
            node = c.add_node(**NODE, resources={"cairn_sandbox": 2}, env_vars={"CAIRN_RAY_RUNS_DIR": str(local)})
            workers[node.node_id[:8]] = (node, local)
        ray.init(address=c.address, log_to_driver=False)
        yield c, workers
    finally:
        ray.shutdown()
        c.shutdown()


def small_settings(tmp_path: Path) -> str:
    """Half a CPU and 256 MiB a sandbox: what the run asks of Ray, so that two fit on a one-CPU node."""
    (tmp_path / "small.json").write_text(json.dumps({"sandbox": {"cpus": 0.5, "memory": "256m"}}))
    return "small.json"


def ledger_script(path: Path, *commands: str) -> Path:
    """Each command appends to ledger.txt in the workspace, then task_done."""
    return write_script(path, *(tool("shell_exec", command=c) for c in commands), tool("task_done", summary="ok"))


def test_a_batch_spreads_over_both_nodes_and_every_run_is_inspectable_on_the_driver(tmp_path, runs_dir, cluster):
    c, workers = cluster
    settings = small_settings(tmp_path)
    lines = []
    for i in range(4):
        ledger_script(tmp_path / f"s{i}.json", f"echo run-{i} >> ledger.txt")
        lines.append({"task": f"append {i}", "model": f"scripted:s{i}.json", "settings": settings})
    batch = write_batch(tmp_path / "b.jsonl", *lines)
    out = cairn("batch", str(batch), "--ray-address", c.address, "--json", runs_dir=runs_dir)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = json.loads(out.stdout)["runs"]
    assert [r["status"] for r in rows] == ["done"] * 4
    assert {r["node"] for r in rows} == set(workers)  # both nodes took runs
    for i, row in enumerate(rows):
        assert (runs_dir / row["id"] / "workspace" / "ledger.txt").read_text() == f"run-{i}\n"  # shared: direct
        shown = json.loads(cairn("show", row["id"], "--json", runs_dir=runs_dir).stdout)
        assert shown["status"] == "done" and len(shown["steps"]) == 2
    assert not any(local.exists() and any(local.iterdir()) for _node, local in workers.values())

    again = cairn("batch", str(batch), "--ray-address", c.address, "--json", runs_dir=runs_dir)
    assert again.returncode == 0, again.stderr[-3000:]
    assert [r["action"] for r in json.loads(again.stdout)["runs"]] == ["skipped"] * 4


def test_without_shared_storage_each_run_is_brought_back_to_the_driver_as_its_own(tmp_path, runs_dir, cluster):
    _c, workers = cluster
    settings = small_settings(tmp_path)
    for i in range(2):
        ledger_script(tmp_path / f"s{i}.json", f"echo first-{i} >> ledger.txt", f"echo second-{i} >> ledger.txt")
    batch = write_batch(tmp_path / "b.jsonl", *({"task": f"two appends {i}", "model": f"scripted:s{i}.json",
                                                 "settings": settings} for i in range(2)))
    rows = RayBatch(batch, runs_dir, storage="local").run()
    assert [r.status for r in rows] == ["done", "done"], [r.error for r in rows]
    for i, row in enumerate(rows):
        _node, local = workers[row.node]
        assert (local / row.id / "workspace" / "ledger.txt").is_file()  # it ran in the node's own runs dir
        run = RunDir(runs_dir / row.id)
        assert (run.workspace / "ledger.txt").read_text() == f"first-{i}\nsecond-{i}\n"
        meta = run.read_meta()
        assert meta["status"] == "done" and not is_untrusted(meta) and "imported" not in meta
        shown = json.loads(cairn("show", row.id, "--json", runs_dir=runs_dir).stdout)
        assert [s["tool_calls"][0]["name"] for s in shown["steps"]] == ["shell_exec", "shell_exec", "task_done"]
        assert cairn("report", row.id, "-o", str(tmp_path / f"{row.id}.html"), runs_dir=runs_dir).returncode == 0


def test_a_node_killed_mid_run_and_its_run_finishes_on_the_other_with_no_call_run_twice(tmp_path, runs_dir, cluster):
    c, workers = cluster
    settings = small_settings(tmp_path)
    scripts = [ledger_script(tmp_path / f"s{i}.json", "echo one >> ledger.txt", "echo two >> ledger.txt; sleep 8",
                             "echo three >> ledger.txt") for i in range(1)]
    batch_file = write_batch(tmp_path / "b.jsonl", *({"task": f"ledger {i}", "model": f"scripted:{s.name}",
                                                      "settings": settings} for i, s in enumerate(scripts)))
    batch = RayBatch(batch_file, runs_dir, storage="shared")
    runner = threading.Thread(target=batch.run)
    runner.start()
    deadline = time.monotonic() + 180
    victim = None
    while victim is None and time.monotonic() < deadline:  # run 1 is inside its `sleep 8` on some node
        row = batch.rows[0]
        log = runs_dir / (row.id or "-") / "state" / "events.jsonl"
        if row.node and log.is_file() and any(e.get("type") == "tool_started" and e.get("step") == 2
                                              for e in map(json.loads, log.read_text().splitlines())):
            victim = row.node
        time.sleep(0.2)
    assert victim is not None, "run 1 never reached its second call"
    node, _local = workers[victim]
    # The scripted model plays its turns in order in each process: the node that takes the run up gets
    # the turns that are left, as a real model would answer from the conversation.
    for script in scripts:
        write_script(script, tool("shell_exec", command="echo three >> ledger.txt"), tool("task_done", summary="ok"))
    from ray._private import ray_constants

    node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.kill()  # the raylet dies
    runner.join(240)
    try:
        assert not runner.is_alive()
        rows = batch.rows
        assert [r.status for r in rows] == ["done"], [(r.error, r.notes) for r in rows]
        survivor = next(n for n in workers if n != victim)
        lost = [r for r in rows if r.notes]
        assert lost and all(r.node == survivor for r in lost)
        assert any(f"node {victim} was lost" in note and f"taken up on node {survivor}" in note
                   for r in lost for note in r.notes)
        for row in rows:  # every call ran once: the one cut off by the kill was not run again
            assert (runs_dir / row.id / "workspace" / "ledger.txt").read_text() == "one\ntwo\nthree\n"
    finally:
        c.remove_node(node, allow_graceful=False)  # what is left of the killed node
