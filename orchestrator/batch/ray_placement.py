"""Where each run of `cairn batch --ray` goes: a placement group of its own, and its node's runner.

A run reserves what it asks of a node (one `cairn_sandbox`, its sandbox's CPUs and memory) as a Ray
placement group of one bundle: Ray places it on a node that has all of it, holds it while the run goes
on, and shows a group that waits to an autoscaler (KubeRay's) as demand. The run itself is then a call
to that node's NodeRunner (batch/ray_node.py), an actor that runs the node's runs in threads. A Ray task
per run would hold the same resources, but a task needs a Ray worker process of its own while it runs,
and each costs ~0.6 s of CPU to start: four runs at a time paid ~3 s of CPU that a batch of short runs
on a busy machine felt (bench/batch_bench.py --ray). A reservation costs no process.

A run that ends leaves its group to the next run that asks for the same: placed already, its run
starts at once, where a new group would wait for the old one's removal and for Ray's next pass over the
groups that wait (0.2-0.7 s a run here, bench/batch_bench.py --ray). A group no run takes is given
back to the cluster at once (RayBatch._dispatch), so a batch never holds more than its runs use.

When a node dies, Ray places its groups again on nodes that have room, as it would retry a task, and
each of its runs is called there, taken up from its last durable state (the Hub counts the attempts and
says what was lost), up to MAX_RETRIES times. A runner whose process ended on a node that lives (the OOM
killer; a fence, node_session.FencedLog) is started again there, its runs taken up the same way.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group

from orchestrator.batch.ray_node import start_runner

SANDBOX_RESOURCE = "cairn_sandbox"  # the custom resource of nodes that run sandboxes: how many at once
MAX_RETRIES = 3  # a run whose node (or runner) dies is taken up again, up to this many times


@dataclass
class Slot:
    """One run's reservation, and the call that carries the run out once it is placed."""

    index: int  # the batch's row
    spec: dict[str, Any]
    group: Any  # its placement group
    ready: Any = None  # the group's ready ref, while it waits to be placed the first time
    call: Any = None  # the runner's call, while the run goes on
    node: str | None = None
    retries: int = 0
    lost: list[str] = field(default_factory=list)  # why earlier attempts ended


class Placements:
    """The batch's runs between their submission and their end (RayBatch._dispatch drives it)."""

    def __init__(self, default_image: bool) -> None:
        self.default_image = default_image  # whether the runners make sure of cairn's sandbox image
        self.hub: Any = None  # the batch's Hub, which every run's call is given
        self.runners: dict[str, Any] = {}  # node id → its runner
        self.sandboxes: dict[str, int] = {}  # node id → how many sandboxes it takes
        self.dead: set[str] = set()  # nodes known lost
        self.slots: list[Slot] = []
        self.spare: list[tuple[Any, dict[str, float]]] = []  # (group, its bundle) of runs that ended
        self.made = 0  # groups made, for their names
        self.stopped_by: str | None = None  # the driver's Ctrl-C, told to every runner (one started later too)

    def __len__(self) -> int:
        return len(self.slots)

    def start_runners(self, sandboxes: dict[str, int]) -> None:
        """A runner on each node (node id → how many sandboxes it takes) now: they warm up while the driver
        checks the models and makes the runs. A node that joins later gets its runner when a run is
        placed on it."""
        self.sandboxes.update(sandboxes)
        for node, count in sandboxes.items():
            self.runners[node] = start_runner(node, self.default_image, count)

    def stop(self, by: str) -> None:
        """Every run stops now."""
        self.stopped_by = by
        for runner in self.runners.values():
            runner.stop.remote(by)

    def submit(self, index: int, spec: dict[str, Any]) -> None:
        """The run's reservation: a spare group with the same bundle (the run is called at once), or a
        new group, which Ray places."""
        bundle = _bundle(spec)
        slot = Slot(index, spec, group=None)
        self.slots.append(slot)
        for group, kept in [spare for spare in self.spare if spare[1] == bundle]:
            self.spare.remove((group, kept))
            node = self._placed_on(group)
            if node is not None:
                slot.group = group
                self._call(slot, node)
                return
            remove_placement_group(group)  # re-placed after a node was lost: a group of its own instead
        self.made += 1
        slot.group = placement_group([bundle], name=f"cairn-{spec['batch']}-{self.made}")
        slot.ready = slot.group.ready()

    def give_back_spares(self) -> None:
        """The spare groups no run took, given back to the cluster."""
        for group, _bundle_kept in self.spare:
            remove_placement_group(group)
        self.spare.clear()

    def wait(self, timeout: float) -> list[tuple[int, dict[str, Any]]]:
        """Calls the runs whose groups were placed, and waits up to `timeout` for any to end. Returns
        (row index, the run's result: {"error", "seconds"}) of the runs that ended."""
        self._replace()
        waiting = {slot.ready: slot for slot in self.slots if slot.ready is not None}
        going = {slot.call: slot for slot in self.slots if slot.call is not None}
        refs = [*waiting, *going]
        if not refs:
            time.sleep(min(timeout, 0.1))  # only groups placed again after a loss: polled (_replace)
            return []
        ready, _ = ray.wait(refs, num_returns=1, timeout=timeout)
        if ready:  # and any other that is ready meanwhile
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        ended = []
        for ref in ready:
            if ref in waiting:
                slot = waiting[ref]
                if slot.ready is not ref:
                    continue  # meanwhile given the group of a run that ended (_pass_on), and called
                slot.ready = None
                self._call(slot, _node_of(slot.group))
            else:
                result = self._result(going[ref])
                if result is not None:
                    ended.append((going[ref].index, result))
        return ended

    def _call(self, slot: Slot, node: str) -> None:
        runner = self.runners.get(node)
        if runner is None:
            if node not in self.sandboxes:  # a node that joined the cluster since the batch began
                self.sandboxes.update(sandboxes_of(sandbox_nodes()))
            runner = self.runners[node] = start_runner(node, self.default_image, self.sandboxes.get(node, 1))
            if self.stopped_by is not None:
                runner.stop.remote(self.stopped_by)
        slot.node, slot.call = node, runner.run.remote(slot.spec, self.hub, node)

    def _result(self, slot: Slot) -> dict[str, Any] | None:
        """The run's result, or None when it is taken up again (its node or its runner was lost)."""
        try:
            result = ray.get(slot.call)
        except ray.exceptions.RayActorError as exc:
            self._lost(slot, exc)
            if slot.retries <= MAX_RETRIES:
                return None
            self._release(slot)
            return {"error": f"the run's node was lost {slot.retries} times ({'; '.join(slot.lost)})"}
        except ray.exceptions.RayError as exc:  # Ray itself failed the call
            self._release(slot)
            return {"error": f"the run's Ray call failed: {_why(exc)}"}
        self._pass_on(slot)  # the run ended on a node that answered: its group serves the next run
        return result

    def _lost(self, slot: Slot, exc: Exception) -> None:
        node = slot.node or "?"
        if self.runners.get(node) is not None and not _alive(node):
            self.dead.add(node)
        self.runners.pop(node, None)  # a runner that died is started again if its node lives
        slot.retries += 1
        slot.lost.append(f"node {node[:8]}: {_why(exc)}")
        slot.call, slot.node = None, None

    def _replace(self) -> None:
        """Runs whose node or runner was lost: called again once their group is placed on a live node."""
        for slot in self.slots:
            if slot.call is None and slot.ready is None and slot.retries <= MAX_RETRIES:
                node = self._placed_on(slot.group)
                if node is not None:
                    self._call(slot, node)

    def _placed_on(self, group: Any) -> str | None:
        """The node that holds the group now, if it is placed on one not known lost."""
        table = placement_group_table(group)
        node = (table.get("bundles_to_node_id") or {}).get(0)
        return node if table.get("state") == "CREATED" and node and node not in self.dead else None

    def _pass_on(self, slot: Slot) -> None:
        """The group of a run that ended: to the first run that waits for Ray to place the same bundle
        (its own group is removed), else kept spare for the next run submitted."""
        self.slots.remove(slot)
        bundle = _bundle(slot.spec)
        waiting = next((s for s in self.slots if s.ready is not None and _bundle(s.spec) == bundle), None)
        if waiting is None:
            self.spare.append((slot.group, bundle))
            return
        remove_placement_group(waiting.group)
        waiting.group, waiting.ready = slot.group, None
        self._call(waiting, slot.node)

    def _release(self, slot: Slot) -> None:
        remove_placement_group(slot.group)
        self.slots.remove(slot)

    def close(self) -> None:
        """The runners stopped (a run under way ends at once: left crashed, resumable) and every
        reservation given back."""
        for runner in self.runners.values():
            ray.kill(runner)
        self.runners.clear()
        for slot in list(self.slots):
            self._release(slot)
        self.give_back_spares()


def _bundle(spec: dict[str, Any]) -> dict[str, float]:
    """What a run asks of a node: one sandbox, and its sandbox's CPUs and memory."""
    return {SANDBOX_RESOURCE: 1, "CPU": spec["cpus"], "memory": spec["memory"]}


def _node_of(group: Any) -> str:
    return placement_group_table(group)["bundles_to_node_id"][0]


def sandbox_nodes() -> list[dict[str, Any]]:
    """Ray's records of the live nodes that take sandboxes."""
    return [n for n in ray.nodes() if n.get("Alive") and n["Resources"].get(SANDBOX_RESOURCE)]


def sandboxes_of(nodes: list[dict[str, Any]]) -> dict[str, int]:
    """Node id → how many sandboxes it takes at once, for nodes of sandbox_nodes()."""
    return {n["NodeID"]: int(n["Resources"][SANDBOX_RESOURCE]) for n in nodes}


def _alive(node: str) -> bool:
    return any(n["NodeID"] == node and n.get("Alive") for n in ray.nodes())


def _why(exc: Exception) -> str:
    """The line of a Ray error that says what went wrong (its first names the task, its last the cause)."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return (lines[-1] if lines else type(exc).__name__)[:300]
