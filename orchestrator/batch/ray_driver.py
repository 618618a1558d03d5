"""`cairn batch FILE.jsonl --ray [ADDRESS]`: the lines of a batch spread over a Ray cluster.

The driver (this process) parses the file, plans the work and makes the new runs exactly as a local
batch does (orchestrator/batch/threads.py); then each run is placed by Ray on a node, with a placement group
that reserves one `cairn_sandbox` (the custom resource a node declares: how many sandboxes it takes) and
the run's sandbox CPUs and memory, and carried out there by the node's runner, an actor the batch starts
on each node (batch/ray_placement.py says why a reservation and a call rather than a task per run). The run
goes as `cairn run` would: the node's Docker engine (its DOCKER_HOST), the model called from the node.
The driver only schedules and watches (batch/ray_node.py is the node's side).

Run directories (`--ray-storage`):
- shared: every node mounts the driver's runs directory at the same path, and runs write there directly.
- local: a node works in its own runs directory ($CAIRN_RAY_RUNS_DIR on the node, else a directory under
  its temp dir) and brings the run back into the driver's, as a `cairn export` archive, after every step
  and when the run ends. The driver's copy is the run: `cairn ls/show/report/resume` work on it.
- auto (the default): each node checks whether it sees the driver's runs directory (a marker file the
  driver writes with a random token), and works shared if it does, local if not.

A run brought back is not marked imported (untrusted, store/trust.py): it was made by this driver from
the user's own batch file, and only nodes of the user's own cluster, which already run the user's code,
wrote to it. Untrusting it would make `cairn resume` refuse the user's own settings.

Faults: when a node dies, Ray places its runs' groups again on other nodes, and the runs are called
there (batch/ray_placement.py), each taken up from its last durable state: shared, the run directory as the
log left it; local, the last state brought back (so at most the step that was under way is lost, and
the batch says so). `LiveRun`'s resume
uses the toolbox journal (store/journal.py): a call that started is never run again from a durable state.

A small actor on the driver's node (`Hub`, batch/ray_hub.py) collects each run's node, status, step, tokens
and cost for the live table, and hands a node the run it takes up (local storage) and takes the run
back. A Ctrl-C is told to the nodes' runners (each run stops now, its running command cut short).
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable

import ray

from orchestrator.batch.rows import Row, fill
from orchestrator.batch.threads import STOP_SIGNALS, Batch
from orchestrator.sizes import parse_size
from orchestrator.errors import UsageError
from orchestrator.batch.ray_hub import Hub
from orchestrator.batch.ray_placement import SANDBOX_RESOURCE, Placements, sandbox_nodes, sandboxes_of
from orchestrator.runs.new_run import create_run
from orchestrator.runs.settings import load_config
from orchestrator.store.run_dir import RunDir

STORAGE = ("auto", "shared", "local")
REFRESH_S = 1.0  # the live table's rows are brought up to date from the Hub at most this often


class Cluster:
    """The Ray cluster of a batch: one `ray start` made (or ADDRESS names), or a local one started for it."""

    def __init__(self, address: str, jobs: int, cpus_per_run: float) -> None:
        env = _runtime_env()
        if ray.is_initialized():  # a caller (a test, a notebook) connected already
            self.address = "connected"
            return
        target = _existing_cluster(address)
        if target is None:  # `auto` and no cluster runs here: a local one, sized by --jobs
            _loopback_only()
            # Its processes inherit this environment: set here, the path needs no runtime env (whose
            # workers Ray would start afresh instead of using the ones it starts with the cluster).
            os.environ.update(env.get("env_vars", {}))
            ray.init(address="local", num_cpus=max(1, int(jobs * cpus_per_run + 0.999)),
                     resources={SANDBOX_RESOURCE: jobs}, include_dashboard=False, log_to_driver=False,
                     object_store_memory=100 * 2**20, configure_logging=False)
            self.address = "local"
        else:
            _reachable(target)
            if _on_loopback(target):
                _loopback_only()  # else Ray trades 127.0.0.1 for the interface address, and retries that for minutes
            try:
                ray.init(address=target, runtime_env=env, log_to_driver=False, configure_logging=False)
            except ConnectionError as exc:
                raise UsageError(f"cannot connect to the Ray cluster at {target}: {exc}") from None
            self.address = target

    def close(self) -> None:
        """Disconnects; a cluster started for the batch is stopped with it (ray.shutdown stops what it started)."""
        ray.shutdown()


def _loopback_only() -> None:
    """A cluster started for one batch serves this machine only: Ray listens on 127.0.0.1 instead of the
    machine's interface address. Ray does that where it thinks clusters unsupported (macOS, Windows), by
    this switch, which its child processes read from the environment and this process from its constants."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False


def _on_loopback(address: str) -> bool:
    """Whether the cluster's head is on this machine's loopback address: as named (`127.0.0.1:6379`,
    `localhost:6379`, `[::1]:6379`), or for `auto` the one cluster `ray start` made here. Ray itself would
    connect to the machine's interface address instead, where such a head does not listen."""
    if address == "auto" and not os.environ.get("RAY_ADDRESS"):
        from ray._private.services import find_gcs_addresses

        found = find_gcs_addresses()
        address = next(iter(found)) if len(found) == 1 else ""
    elif address == "auto":
        address = os.environ["RAY_ADDRESS"]
    host = address.rpartition(":")[0].strip("[]") if "://" not in address else ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _starts_a_cluster(address: str) -> bool:
    """Whether Cluster(address) would start a local cluster (nothing connected, none found)."""
    return not ray.is_initialized() and _existing_cluster(address) is None


def _existing_cluster(address: str) -> str | None:
    """The address to connect to, or None to start a local cluster: ADDRESS as given (`local`: always a
    local one); for `auto`, $RAY_ADDRESS or the cluster `ray start` made on this machine, only when its
    GCS process runs (a stale address file would hang ray.init)."""
    if address == "local":
        return None
    if address != "auto":
        return address
    if os.environ.get("RAY_ADDRESS"):
        return os.environ["RAY_ADDRESS"]
    from ray._private.services import find_gcs_addresses  # Ray's own `auto` lookup, without its stale file

    return "auto" if find_gcs_addresses() else None


def _reachable(address: str) -> None:
    """A head that does not answer is a usage error at once: ray.init would retry it for minutes."""
    host, _, port = address.rpartition(":")
    if address == "auto" or "://" in address or not port.isdigit():
        return  # Ray's own lookup, or a form Ray reads itself
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
    except OSError as exc:
        raise UsageError(f"cannot reach the Ray cluster at {address}: {exc.strerror or exc}",
                         hint="start it with `ray start --head`, or give its address: --ray-address HOST:PORT") from None


def _runtime_env() -> dict[str, Any]:
    """A driver run from a source checkout gives the nodes that checkout first on their path (a local
    cluster, the tests); an installed cairn leaves the nodes to their own installed one."""
    root = Path(__file__).resolve().parents[2]  # the folder that holds the orchestrator package
    if "site-packages" in root.parts or "dist-packages" in root.parts:
        return {}
    return {"env_vars": {"PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}}


def ray_batch(address: str, storage: str, jobs: int | None) -> Callable[..., RayBatch]:
    """What `cairn batch --ray` builds its batch with (batch/summary.run_batch's `make`)."""
    def make(batch_file: Path, runs_dir: Path, _jobs: int, on_end: Callable[[Row], None] | None = None,
             api_base: str | None = None) -> RayBatch:
        return RayBatch(batch_file, runs_dir, address, jobs, storage, on_end=on_end, api_base=api_base)
    return make


class RayBatch(Batch):
    """A Batch whose runs go to Ray's nodes instead of threads: the same file, manifest, plan and rows."""

    def __init__(self, batch_file: Path, runs_dir: Path, address: str = "auto", jobs: int | None = None,
                 storage: str = "auto", on_end: Callable[[Row], None] | None = None,
                 api_base: str | None = None) -> None:
        if storage not in STORAGE:
            raise UsageError(f"--ray-storage must be one of {', '.join(STORAGE)}, not {storage!r}")
        self.where = f"on Ray ({address})"  # the live table's title
        super().__init__(batch_file, runs_dir, jobs or 4, on_end=on_end, api_base=api_base)
        self.address, self.storage, self.cap = address, storage, jobs  # cap: at most this many at once
        self.cluster: Cluster | None = None
        self.hub: Any = None
        self.placements: Placements | None = None
        self.held: dict[int, RunDir] = {}  # row index → its run, whose lock this driver holds
        for row in self.rows:
            row.ray = True

    def run(self) -> list[Row]:
        work = self.plan()
        if not work:
            return self.rows
        needs = [self._needs(index, run) for index, run in work]
        # Each line's model is checked before any run is made. A cluster started for the batch is started
        # after the check (a bad key is said at once); on a running one, the check (which imports the
        # model library here) overlaps the nodes' runners warming up.
        check_first = _starts_a_cluster(self.address)
        if check_first:
            self.preflight(work)
        self.cluster = Cluster(self.address, self.cap or 4, max(need["cpus"] for need in needs))
        main = threading.current_thread() is threading.main_thread()
        previous = {sig: signal.signal(sig, self._on_stop_signal) for sig in STOP_SIGNALS} if main else {}
        try:
            nodes = self._check_feasible(needs)
            self.placements = Placements(any(need["default_image"] for need in needs))
            self.placements.start_runners(nodes)  # first: they warm up while the hub starts and the runs are made
            self.hub = self.placements.hub = Hub.options(scheduling_strategy=_here()).remote(str(self.runs_dir))
            if not check_first:
                self.preflight(work)
            self._dispatch(list(zip(needs, work)))
        finally:
            if self.placements is not None:
                self.placements.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if self.hub is not None:
                ray.kill(self.hub)
            if self.cluster.address != "connected":  # a connection the caller made stays theirs
                self.cluster.close()
        return self.rows

    def _needs(self, index: int, run: RunDir | None) -> dict[str, Any]:
        """What a line's run asks of a node: its sandbox's CPUs and memory, and whether it uses cairn's image."""
        cfg = self.todo[index].cfg if run is None else load_config(run)
        return {"line": self.todo[index].line, "cpus": cfg.sandbox.cpus, "memory": parse_size(cfg.sandbox.memory),
                "default_image": cfg.sandbox.image is None}

    def _prepare(self, index: int, run: RunDir | None) -> dict[str, Any]:
        """What the node needs of one line: the run (made here for a new line) and where it is."""
        job, row = self.todo[index], self.rows[index]
        if run is None:
            run = create_run(self.runs_dir, job.task, job.cfg)
            self.manifest.record(job.key, job.line, run.id)
            row.action = "started"
        else:
            row.action = "resumed"
        row.id, row.status = run.id, "queued"
        self.held[index] = run  # its lock (taken by create_run or plan) is this driver's until the run ends
        marker = self.runs_dir / "batches" / f"{self.manifest.id}.ray"
        if not marker.is_file():
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text(secrets.token_hex(16))
        return {"index": index, "batch": self.manifest.id, "run_id": run.id, "runs_dir": str(self.runs_dir),
                "resumed": row.action == "resumed", "storage": self.storage, "marker": str(marker),
                "token": marker.read_text()}

    def _check_feasible(self, specs: list[dict[str, Any]]) -> dict[str, int]:
        """A run no node could ever take would wait forever in Ray's queue: a usage error instead.
        Returns the nodes that take sandboxes: node id → how many at once."""
        alive = sandbox_nodes()
        nodes = [n["Resources"] for n in alive]
        if not nodes:
            raise UsageError(f"no node of the Ray cluster declares the resource {SANDBOX_RESOURCE!r}, so no run "
                             "can be placed", hint=f"start nodes with: ray start ... --resources "
                             f"'{{\"{SANDBOX_RESOURCE}\": 4}}'")
        for spec in specs:
            if not any(n.get("CPU", 0) >= spec["cpus"] and n.get("memory", 0) >= spec["memory"] for n in nodes):
                raise UsageError(f"line {spec['line']}: no node of the Ray cluster has {spec['cpus']:g} CPUs and "
                                 f"{spec['memory'] / 2**30:.1f} GiB of memory for its sandbox",
                                 hint="lower sandbox.cpus or sandbox.memory in the line's settings file, "
                                      "or add a bigger node")
        return sandboxes_of(alive)

    def _dispatch(self, work: list[tuple[dict[str, Any], tuple[int, RunDir | None]]]) -> None:
        """Makes and submits the runs (at most `--jobs` at once when it was given) and follows them to their
        end. A run is made as it is submitted, as a local batch makes it as a thread takes it up: the
        first runs start while the later ones wait, and a stopped batch leaves the lines it never began."""
        placements = self.placements
        waiting = list(work)
        refreshed = 0.0
        while waiting or len(placements):
            while waiting and not self.stopping.is_set() and (self.cap is None or len(placements) < self.cap):
                need, (index, run) = waiting.pop(0)
                placements.submit(index, {**need, **self._prepare(index, run)})
            if self.stopping.is_set():
                waiting.clear()
            placements.give_back_spares()  # the groups of ended runs that no line took up
            if not len(placements):
                break
            ended = placements.wait(REFRESH_S)
            if ended or time.monotonic() - refreshed >= REFRESH_S:
                self._refresh()
                refreshed = time.monotonic()
            for index, result in ended:
                self._ended(index, result)

    def _refresh(self) -> None:
        """The rows from what the nodes reported (the live table reads them)."""
        for run_id, fields in ray.get(self.hub.snapshot.remote()).items():
            row = next((r for r in self.rows if r.id == run_id), None)
            if row is not None and row.seconds is None:
                for name, value in fields.items():
                    setattr(row, name, value)

    def _ended(self, index: int, result: dict[str, Any]) -> None:
        row = self.rows[index]
        held = self.held.pop(index, None)
        if held is not None:
            held.release()
        if result.get("error"):
            row.error = result["error"]
        if result.get("seconds") is not None:
            row.seconds = result["seconds"]
        row.seconds = row.seconds or 0.0
        fill(row, RunDir(self.runs_dir / row.id), row.action)
        self.on_end(row)

    def _stop_now(self, name: str) -> bool:
        """The nodes stop every run now."""
        if self.placements is None:
            return False
        self.placements.stop(name)
        return True

    def _stop_at_once(self) -> None:
        if self.placements is not None:
            self.placements.close()


def _here() -> Any:
    """The scheduling strategy that keeps an actor on the driver's own node (it writes the driver's runs dir)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=False)
