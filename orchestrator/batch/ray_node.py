"""A batch run on a Ray node: the node's side of orchestrator/batch/ray_driver.py.

A run's resources are held by its placement group (batch/ray_placement.py); the run is a call to the node's
`NodeRunner`, an actor the driver starts on each node for the batch, that runs the runs in threads of
one process, exactly as `cairn run`/`cairn resume` would, with this node's Docker engine and model settings; a second thread
of each run carries a Ctrl-C of the driver (told to the runner) to it. Where the run lives:
- shared storage: the driver's run directory, written directly;
- local: a copy in this node's runs directory, from the archive the Hub hands over, brought back to the
  driver (a `cairn export` archive, imported by the Hub) after every step's checkpoint and at the end.

The driver's Hub (batch/ray_hub.py) gets each run's progress, gives each run's attempt its number, and holds
the driver's copies of the runs.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

import ray

from orchestrator.batch.ray_hub import export_bytes, replace_with_archive
from orchestrator import events as ev
from orchestrator.ports import Progress
from orchestrator.store.event_log import EventLog
from orchestrator.store.run_dir import RunDir
from orchestrator.agent.stop_signals import stop_now

LOCAL_RUNS_ENV = "CAIRN_RAY_RUNS_DIR"  # a node's own runs directory, where it does not share the driver's
REPORT_S = 0.25  # a node's runs' progress goes to the Hub in one call at most this often
STOP_POLL_S = 0.2  # how often a run looks whether its runner was told to stop (the driver's Ctrl-C)


# -- the node's side --------------------------------------------------------------------------------


class Reporter:
    """The progress of a node's runs, gathered and sent to the Hub in one call at most every REPORT_S
    (the live table reads the Hub once a second). A call for each event cost the Hub's process and the
    runner's CPU beside the runs: a dozen calls a run, where this makes a few a second for all of them."""

    def __init__(self, hub: Any) -> None:
        self.hub = hub
        self.pending: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()
        threading.Thread(target=self._send, name="cairn-progress", daemon=True).start()

    def put(self, run_id: str, fields: dict[str, Any]) -> None:
        with self.lock:
            self.pending.setdefault(run_id, {}).update(fields)

    def _send(self) -> None:
        while True:
            time.sleep(REPORT_S)
            with self.lock:
                reports, self.pending = self.pending, {}
            if reports:
                self.hub.progress.remote(reports)


class NodeDisplay:
    """The Display of a run on a node: its progress to the Hub (through the node's Reporter); without
    shared storage, the run brought back to the driver after each checkpoint (synchronously: the next
    step starts once it is there)."""

    def __init__(self, hub: Any, reporter: Reporter, run: RunDir, node: str, number: int,
                 brings_back: bool) -> None:
        self.hub, self.reporter, self.run, self.node = hub, reporter, run, node
        self.number, self.brings_back = number, brings_back

    def event(self, event: ev.Event, state: Progress) -> None:
        t = state.totals
        fields: dict[str, Any] = {"node": self.node, "step": state.step, "prompt_tokens": t.prompt_tokens,
                                  "completion_tokens": t.completion_tokens,
                                  "cost_usd": t.cost_usd if t.cost_known else None}
        if isinstance(event, ev.StatusChanged):
            fields["status"] = event.status
        elif isinstance(event, ev.ToolStarted):
            fields["status"] = f"running: {event.name}"
        elif isinstance(event, ev.ToolFinished):
            fields["status"] = "running"
        self.reporter.put(self.run.id, fields)
        if self.brings_back and isinstance(event, ev.Checkpoint) and event.step > 0:
            self.bring_back()

    def bring_back(self) -> None:
        if not ray.get(self.hub.bring_back.remote(self.run.id, self.number, export_bytes(self.run))):
            raise RuntimeError(f"run {self.run.id} was taken up elsewhere; this node stops working on it")

    def close(self) -> None:
        pass


class FencedLog(EventLog):
    """A run's event log on a node, fenced: before it writes a tool_started (after which the call runs),
    it asks the Hub whether this attempt still holds the run. A process Ray gave up on (its node thought
    dead, the run taken up on another node) ends there, having written nothing of the call and run
    nothing: else the call would run twice, here and on the node that took the run up."""

    def __init__(self, path: Path, hub: Any, run_id: str, number: int) -> None:
        super().__init__(path)
        self.hub, self.run_id, self.number = hub, run_id, number

    def append(self, event: ev._Event) -> None:
        if isinstance(event, ev.ToolStarted) and not self.holds_the_run():
            os._exit(1)  # at once: no unwinding, which would write the log and stop the run's container
        super().append(event)

    def holds_the_run(self) -> bool:
        try:
            return bool(ray.get(self.hub.current.remote(self.run_id, self.number), timeout=30))
        except ray.exceptions.RayError:  # the Hub cannot say (the driver gone): hold back, as if taken
            return False


def node_runs_dir(node_id: str) -> Path:
    """Where a node without shared storage keeps its copies: $CAIRN_RAY_RUNS_DIR, else its temp dir."""
    configured = os.environ.get(LOCAL_RUNS_ENV)
    return Path(configured) if configured else Path(tempfile.gettempdir()) / "cairn-ray-runs" / node_id[:12]


def sees_driver_runs(spec: dict[str, Any]) -> bool:
    """Whether this node sees the driver's runs directory: the marker file holds the batch's token."""
    if spec["storage"] == "local":
        return False
    try:
        return Path(spec["marker"]).read_text() == spec["token"]
    except OSError:
        return False


def _started_before(run: RunDir) -> bool:
    """A run whose log goes past its start (a status) was started before: it is resumed, not begun."""
    events, _torn = run.events.read()
    return any(isinstance(e, ev.StatusChanged) for e in events)


def start_runner(node_id: str, default_image: bool, sandboxes: int) -> Any:
    """The NodeRunner of a node, owned by the driver (an actor lives as long as its owner holds it). It
    warms up at once; a run's call waits for the first part of its warm-up. It takes as many calls at
    once as the node takes sandboxes (a run's group holds one): Ray makes an actor's threads up front."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeRunner.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
                              max_concurrency=max(1, sandboxes)).remote(default_image)


@ray.remote(num_cpus=0, concurrency_groups={"control": 1})  # a Ctrl-C gets through while every run goes on
class NodeRunner:
    """The runs of a batch on one node, in threads of one process, as a local batch runs them: they wait
    on the model and on the sandbox, and one process imports the model library (3-4 s of CPU) once a node
    instead of once a run at a time. The runs' placement groups hold their resources."""

    def __init__(self, default_image: bool) -> None:
        end_with_the_raylet()
        # The warm-up goes on in a thread: the first runs' calls come in meanwhile and wait only for its
        # first part (cairn's modules, the engine, the image), so their containers start while the model
        # library still loads, as `cairn run`'s does.
        self.engine = Background(warm_up, default_image)
        # Its own, not the module's: Ray copies the class, with the module globals its methods name.
        self.stopped_by: list[str] = []
        self.reporter: Reporter | None = None  # made for the batch's Hub, which the first call gives
        self.lock = threading.Lock()

    @ray.method(concurrency_group="control")
    def stop(self, by: str) -> None:
        """The driver's Ctrl-C (`by`): every run of this runner stops now."""
        self.stopped_by.append(by)

    def run(self, spec: dict[str, Any], hub: Any, node_id: str) -> dict[str, Any]:
        unready = self.engine.result()
        if unready is not None:
            return {"error": f"node {node_id[:8]}: {unready}", "seconds": None}
        with self.lock:
            self.reporter = self.reporter or Reporter(hub)
        return _run(spec, hub, node_id, self.stopped_by, self.reporter)


class Background:
    """The runner's warm-up in a thread of its own: what it says of the engine, once it has said it."""

    def __init__(self, warm: Callable[[bool, Callable[[str | None], None]], None], default_image: bool) -> None:
        self.said = threading.Event()
        self.unready: str | None = None

        def say(unready: str | None) -> None:
            self.unready = unready
            self.said.set()

        def go() -> None:
            try:
                warm(default_image, say)
            except Exception as exc:  # noqa: BLE001 - each run's result says it, rather than a lost thread
                if not self.said.is_set():
                    say(f"the runner's warm-up failed: {type(exc).__name__}: {exc}")
            finally:
                self.said.set()  # whatever happened, no run waits for ever

        threading.Thread(target=go, name="cairn-warm-up", daemon=True).start()

    def result(self) -> str | None:
        self.said.wait()
        return self.unready


def warm_up(default_image: bool, say: Callable[[str | None], None]) -> None:
    """What every run on this node does first, done once as the node's runner starts, in two parts. First
    cairn's modules a run's start imports, the Docker engine asked and the sandbox image found (or built:
    once a node, not by its first runs at once) when a run uses it; `say` then tells the runs waiting
    for it why this node cannot run sandboxes, or None. Then the model library: a run that needs it
    meanwhile waits for this import (Python's lock on the module), holding no other module's lock, as
    every module it imports itself was imported in the first part."""
    from orchestrator.agent.critic import critic_model_config  # noqa: F401 - with these, what a run's start imports
    from orchestrator.errors import CairnError
    from orchestrator.llm.client import LLM  # noqa: F401
    from orchestrator.agent.loop import Loop  # noqa: F401
    from orchestrator.runs.compose import LiveRun
    from orchestrator.sandbox.docker.engine import connect
    from orchestrator.sandbox.docker.image import ensure_image
    from orchestrator.tools.builtin import builtin_tools  # noqa: F401

    try:
        if default_image:
            ensure_image()
        else:
            connect().close()
    except CairnError as exc:
        say(exc.message)
    else:
        say(None)
    from orchestrator.llm.client import litellm_module

    litellm_module()


_watching = threading.Lock()


def end_with_the_raylet() -> None:
    """This worker process ends at once when the raylet that started it dies. Ray takes its runs up on
    another node then; a process that lived on would go on writing the run (its log, its run.json: the
    shared copy the other node now works on) and stop a container the other node may have started."""
    if not _watching.acquire(blocking=False):
        return  # watched already
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.1)
        os._exit(1)

    threading.Thread(target=watch, name="cairn-raylet-watch", daemon=True).start()


def _run(spec: dict[str, Any], hub: Any, node_id: str, stopped_by: list[str],
         reporter: Reporter) -> dict[str, Any]:
    """Takes the run up (a new attempt, at the Hub) and carries it out."""
    end_with_the_raylet()
    shared = sees_driver_runs(spec)
    if spec["storage"] == "shared" and not shared:
        return {"error": f"node {node_id[:8]} does not see the runs directory {spec['runs_dir']} "
                         "(--ray-storage shared)", "seconds": None}
    taken = ray.get(hub.take_up.remote(spec["run_id"], node_id[:8], not shared))
    return carry_out(spec, hub, node_id, taken, shared, stopped_by, reporter)


def carry_out(spec: dict[str, Any], hub: Any, node_id: str, taken: dict[str, Any], shared: bool,
              stopped_by: list[str], reporter: Reporter | None = None) -> dict[str, Any]:
    """Attempt `taken["number"]` of the run, here, as `cairn run`/`cairn resume` would carry it out; its
    tool calls fenced (FencedLog), so that it runs none once another attempt holds the run. It stops
    now once `stopped_by` names the driver's Ctrl-C."""
    from orchestrator.errors import CairnError
    from orchestrator.runs.compose import mark_failed
    from orchestrator.runs.drive import drive
    from orchestrator.runs.settings import load_config

    began = time.monotonic()
    node = node_id[:8]
    if shared:
        run = RunDir(Path(spec["runs_dir"]) / spec["run_id"])
    else:
        run = replace_with_archive(node_runs_dir(node_id), spec["run_id"], taken["archive"])
    run.events = FencedLog(run.events.path, hub, run.id, taken["number"])
    display = NodeDisplay(hub, reporter or Reporter(hub), run, node, taken["number"], brings_back=not shared)
    outcome: dict[str, Any] = {"error": None}
    opened: dict[str, Any] = {}  # the LiveRun, once it runs

    def work() -> None:
        try:
            cfg = load_config(run)
            # On the driver's runs dir, the driver holds the run's lock for the whole batch (attempts are
            # fenced at the hub); a node's own copy is this process's to lock.
            driven = drive(run, cfg, display, resumed=spec["resumed"] or _started_before(run), hold=not shared,
                           opened=lambda live: opened.__setitem__("run", live), record_every_failure=True)
            if driven.error is not None:
                outcome["error"] = driven.error.message
        except Exception as exc:  # noqa: BLE001 - a run whose settings cannot be read: recorded, as a local batch does
            outcome["error"] = exc.message if isinstance(exc, CairnError) else f"{type(exc).__name__}: {exc}"
            try:
                mark_failed(run, outcome["error"])
            except Exception:  # noqa: BLE001 - the state dir itself may be the problem
                pass

    thread = threading.Thread(target=work, name=f"cairn-run-{run.id}", daemon=True)
    thread.start()
    stopped = False
    while thread.is_alive():
        thread.join(STOP_POLL_S)  # returns as soon as the run ends; meanwhile, a Ctrl-C of the driver?
        if not stopped and opened.get("run") is not None and stopped_by:
            agent = opened["run"].agent
            stop_now(agent, stopped_by[0])
            stopped = True
    if not shared:
        display.bring_back()  # the run as it ended (pid file gone, run.json final)
    return {"error": outcome["error"], "seconds": round(time.monotonic() - began, 2)}
