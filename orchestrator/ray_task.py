"""The Ray task of one run of `cairn batch --ray`: it holds the run's resources while its node's runner
carries the run out (node_session.py).

A module of its own, importing Ray alone: each task runs in a Ray worker process of its own, which
imports the task's module when it starts; that is a cost of every such process, and this one needs none
of cairn's modules (the model library and the run's parts are the runner's, imported once a node).
"""

from __future__ import annotations

import os
from typing import Any

import ray

SANDBOX_RESOURCE = "cairn_sandbox"  # the custom resource of nodes that run sandboxes: how many at once


@ray.remote
def run_on_node(spec: dict[str, Any], hub: Any) -> dict[str, Any]:
    """One run of the batch on this node, holding its resources (cairn_sandbox, CPUs, memory) while the
    node's runner carries it out; returns {"error", "seconds"}. The run's own record (run.json, the log)
    is what the driver reads for the row."""
    node_id = ray.get_runtime_context().get_node_id()
    runner = _runner_on(spec["batch"], node_id)
    if runner is None:  # a node that joined after the batch began has no runner: the run goes on here
        from orchestrator.node_session import _run, warm_up

        unready = warm_up(spec["default_image"])
        if unready is not None:
            return {"error": f"node {node_id[:8]}: {unready}", "seconds": None}
        return _run(spec, hub, node_id)
    try:
        return ray.get(runner.run.remote(spec, hub, node_id))
    except ray.exceptions.RayActorError:
        # The runner's process ended under the run (a fence ended it: a run of it was taken up elsewhere;
        # the OOM killer). This task ends as a failed worker too, so that Ray takes the run up again from
        # its durable state, instead of the batch reporting it failed.
        os._exit(1)


_runners: dict[str, Any] = {}  # a task's process keeps the handle of its node's runner: one lookup a process


def _runner_on(batch: str, node_id: str) -> Any:  # noqa: ANN401 - a Ray actor handle, or None
    name = runner_name(batch, node_id)
    if name not in _runners:
        try:
            _runners[name] = ray.get_actor(name)
        except ValueError:
            return None
    return _runners[name]


def runner_name(batch: str, node_id: str) -> str:
    return f"cairn-runner-{batch}-{node_id}"
