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

from orchestrator.batch.ray_driver import RayBatch  # noqa: E402
from orchestrator.store.run_dir import RunDir  # noqa: E402
from orchestrator.store.trust import is_untrusted  # noqa: E402
from tests.batch.test_thread_batches import tool, write_batch, write_script  # noqa: E402
from tests.cli.test_cli import cairn  # noqa: E402

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


def test_a_run_that_ends_hands_its_reservation_to_the_next_and_the_batch_gives_every_one_back(
        tmp_path, runs_dir, cluster):
    settings = small_settings(tmp_path)
    for i in range(4):
        ledger_script(tmp_path / f"s{i}.json", f"echo run-{i} >> ledger.txt")
    batch = RayBatch(write_batch(tmp_path / "b.jsonl", *({"task": f"append {i}", "model": f"scripted:s{i}.json",
                                                         "settings": settings} for i in range(4))), runs_dir, jobs=2)
    rows = batch.run()
    assert [r.status for r in rows] == ["done"] * 4, [r.error for r in rows]
    from ray.util.placement_group import placement_group_table

    groups = [g for g in placement_group_table().values() if g["name"].startswith(f"cairn-{batch.manifest.id}-")]
    assert len(groups) == 2  # two runs at a time: the later two took the groups of the first two
    assert {g["state"] for g in groups} == {"REMOVED"}


def test_runs_beyond_the_clusters_room_wait_for_a_reservation_and_take_those_of_runs_that_end(
        tmp_path, runs_dir, cluster):
    settings = small_settings(tmp_path)
    for i in range(6):  # the two nodes take four sandboxes
        ledger_script(tmp_path / f"s{i}.json", f"echo run-{i} >> ledger.txt")
    batch = RayBatch(write_batch(tmp_path / "b.jsonl", *({"task": f"append {i}", "model": f"scripted:s{i}.json",
                                                         "settings": settings} for i in range(6))), runs_dir)
    rows = batch.run()
    assert [r.status for r in rows] == ["done"] * 6, [r.error for r in rows]
    assert all((runs_dir / r.id / "workspace" / "ledger.txt").read_text() == f"run-{i}\n" for i, r in enumerate(rows))
    from ray.util.placement_group import placement_group_table

    groups = [g for g in placement_group_table().values() if g["name"].startswith(f"cairn-{batch.manifest.id}-")]
    assert len(groups) == 6 and {g["state"] for g in groups} == {"REMOVED"}


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


def test_ctrl_c_stops_each_run_on_its_node_after_its_current_action(tmp_path, runs_dir, cluster):
    """Every sandbox of the cluster busy (each runner's threads all taken by runs): the Ctrl-C still gets
    through to each runner, and each run stops after its `sleep`."""
    import signal

    settings = small_settings(tmp_path)
    for i in range(4):  # a script each: a runner's scripted server plays one script's turns once
        write_script(tmp_path / f"s{i}.json", tool("shell_exec", command="sleep 4"), tool("task_done", summary="ok"))
    batch = RayBatch(write_batch(tmp_path / "b.jsonl", *({"task": f"a sleep {i}", "model": f"scripted:s{i}.json",
                                                         "settings": settings} for i in range(4))), runs_dir)
    runner = threading.Thread(target=batch.run)
    runner.start()
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and any(r.status != "running: shell_exec" for r in batch.rows):
        time.sleep(0.1)  # every run inside its `sleep 4`
    batch._on_stop_signal(signal.SIGINT, None)  # what the driver's Ctrl-C handler gets
    runner.join(120)
    assert not runner.is_alive()
    assert [(r.status, r.step) for r in batch.rows] == [("interrupted", 1)] * 4  # stopped in the step of the sleep
    for row in batch.rows:
        ends = [e for e in map(json.loads, (runs_dir / row.id / "state" / "events.jsonl").read_text().splitlines())
                if e["type"] == "status"]
        assert ends[-1]["reason"] == "stopped by Ctrl-C"


@ray.remote(max_retries=0, num_cpus=0, resources={"cairn_sandbox": 1})
def superseded_attempt(spec: dict, hub) -> dict:
    """Attempt 1 of a run, carried out on a worker node as its runner would, once attempt 2 holds it."""
    from orchestrator.batch.ray_node import carry_out

    node_id = ray.get_runtime_context().get_node_id()
    return carry_out(spec, hub, node_id, {"number": 1, "archive": None}, shared=True, stopped_by=[])


def test_an_attempt_another_node_took_over_writes_no_tool_started_and_runs_no_call(tmp_path, runs_dir, cluster):
    """The fence: the Hub gave the run to attempt 2 (as when Ray took it up elsewhere while its first
    node was thought dead) before attempt 1 reaches its first call. Attempt 1's process ends there: the
    log has no tool_started and the call never ran. No timing: attempt 2 holds the run from the start."""
    from orchestrator.batch.jobs import parse_file
    from orchestrator.batch.ray_hub import Hub
    from orchestrator.runs.new_run import create_run
    from orchestrator import events as ev

    settings = small_settings(tmp_path)
    ledger_script(tmp_path / "s.json", "echo ran >> ledger.txt")
    [job] = parse_file(write_batch(tmp_path / "b.jsonl", {"task": "a ledger", "model": "scripted:s.json",
                                                           "settings": settings}))
    run = create_run(runs_dir, job.task, job.cfg)
    hub = Hub.remote(str(runs_dir))
    assert ray.get(hub.take_up.remote(run.id, "old", False))["number"] == 1
    assert ray.get(hub.take_up.remote(run.id, "new", False))["number"] == 2  # the other node holds it now
    spec = {"run_id": run.id, "runs_dir": str(runs_dir), "resumed": False}
    try:
        with pytest.raises(ray.exceptions.WorkerCrashedError):  # it ended itself at the fence
            ray.get(superseded_attempt.remote(spec, hub), timeout=180)
    finally:
        ray.kill(hub)
    events, _torn = run.events.read()
    assert any(isinstance(e, ev.StatusChanged) for e in events)  # it did start: the fence stopped it
    assert not any(isinstance(e, ev.ToolStarted) for e in events)
    assert not (run.workspace / "ledger.txt").exists()


@pytest.mark.parametrize("storage", ["shared", "local"])
def test_a_node_killed_mid_run_and_its_run_finishes_on_the_other_with_no_call_run_twice(
        tmp_path, runs_dir, cluster, storage):
    """Shared: the run goes on from its log, and the call cut off by the kill is not run again (the
    journal says it was killed). Local: it goes on from the last step brought back; the step under way
    was lost with the node's copy, is said to be, and is done again on the other node."""
    c, workers = cluster
    settings = small_settings(tmp_path)
    script = ledger_script(tmp_path / "s.json", "echo one >> ledger.txt", "echo two >> ledger.txt; sleep 8",
                           "echo three >> ledger.txt")
    batch_file = write_batch(tmp_path / "b.jsonl", {"task": "a ledger", "model": "scripted:s.json", "settings": settings})
    batch = RayBatch(batch_file, runs_dir, storage=storage)
    runner = threading.Thread(target=batch.run)
    runner.start()
    deadline = time.monotonic() + 180
    row = batch.rows[0]
    while time.monotonic() < deadline:  # the run is inside its `sleep 8`, as its node reports
        if row.node and row.step == 2 and row.status == "running: shell_exec":
            break
        time.sleep(0.2)
    victim = row.node
    assert row.step == 2, "the run never reached its second call"
    node, _local = workers.pop(victim)
    # The scripted model plays its turns in order in each process: the node that takes the run up gets
    # the turns a real model would give from the conversation it finds (without step 2, when it was lost).
    later = ["echo three >> ledger.txt"] if storage == "shared" else ["echo two >> ledger.txt", "echo three >> ledger.txt"]
    write_script(script, *(tool("shell_exec", command=command) for command in later), tool("task_done", summary="ok"))
    from ray._private import ray_constants

    node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.kill()  # the raylet dies
    runner.join(240)
    try:
        assert not runner.is_alive()
        assert row.status == "done", (row.error, row.notes)
        [survivor] = workers
        assert row.node == survivor
        [note] = row.notes
        assert note.startswith(f"node {victim} was lost at step 2; taken up on node {survivor} from step 1")
        assert ("lost: step 2" in note) == (storage == "local")
        # every call ran once in the run as it stands: the one cut off was not run again (shared), or
        # went with the lost copy and was done again (local)
        assert (runs_dir / row.id / "workspace" / "ledger.txt").read_text() == "one\ntwo\nthree\n"
    finally:
        c.remove_node(node, allow_graceful=False)  # what is left of the killed node
        local = _local.parent / f"node-{len(workers) + 2}-{storage}"
        fresh = c.add_node(**NODE, resources={"cairn_sandbox": 2}, env_vars={"CAIRN_RAY_RUNS_DIR": str(local)})
        workers[fresh.node_id[:8]] = (fresh, local)  # the next test has two nodes again


def test_a_cluster_on_the_loopback_address_is_reached_at_the_address_named(tmp_path, runs_dir, sandbox_image):
    """`ray start --head --node-ip-address 127.0.0.1` (loopback only: RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0),
    then `cairn batch --ray --ray-address 127.0.0.1:PORT` from a shell without that switch: Ray on its own
    trades 127.0.0.1 for the machine's interface address, where no GCS listens, and retries for minutes."""
    import shutil
    import signal
    import socket
    import subprocess
    import sys
    import tempfile

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    temp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    head = subprocess.Popen(
        [str(Path(sys.executable).parent / "ray"), "start", "--head", "--node-ip-address", "127.0.0.1", "--port",
         str(port), "--num-cpus", "2", "--resources", json.dumps({"cairn_sandbox": 1}), "--include-dashboard",
         "false", "--temp-dir", temp, "--block"],
        env={**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(1)
        time.sleep(5)  # the head's raylet registers after its GCS listens
        script = write_script(tmp_path / "s.json", tool("task_done", summary="ok"))
        batch = write_batch(tmp_path / "b.jsonl", {"task": "t", "model": f"scripted:{script}"})
        driver = {k: v for k, v in os.environ.items() if k not in ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_ADDRESS")}
        out = subprocess.run([sys.executable, "-m", "orchestrator.cli", "batch", str(batch), "--ray", "--ray-address",
                              f"127.0.0.1:{port}", "--json", "--runs-dir", str(runs_dir)],
                             env=driver, capture_output=True, text=True, timeout=240)
        assert out.returncode == 0, out.stderr[-3000:]
        [run] = json.loads(out.stdout)["runs"]
        assert run["status"] == "done" and "Failed to connect to GCS" not in out.stderr
    finally:
        os.killpg(head.pid, signal.SIGTERM)  # `ray start --block` stops what it started
        try:
            head.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
        shutil.rmtree(temp, ignore_errors=True)
