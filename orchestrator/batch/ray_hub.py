"""The driver's side of `cairn batch --ray` that nodes call: the Hub actor, on the driver's node.

It keeps each run's progress for the live table (node_session.Reporter sends it), knows each run's
attempts (so a run taken up after its node died says what happened and what was lost, and an attempt
the batch gave up on is fenced off: node_session.FencedLog), and reads and writes the driver's runs
directory for nodes that do not see it: the archive a node starts from, and the run it brings back.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

import ray

from orchestrator import events as ev
from orchestrator.store.run_dir import RunDir


@ray.remote(num_cpus=0, max_concurrency=8)
class Hub:
    """Progress, attempts and the driver's copies of the runs. Threaded: a bring-back that takes a while
    does not hold up the live table's snapshots."""

    def __init__(self, runs_dir: str) -> None:
        self.runs_dir = Path(runs_dir)
        self.rows: dict[str, dict[str, Any]] = {}
        self.attempts: dict[str, dict[str, Any]] = {}  # run id → the current attempt: node, number, steps
        self.lock = threading.Lock()

    def progress(self, reports: dict[str, dict[str, Any]]) -> None:
        """The latest progress of a node's runs (Reporter): run id → its fields."""
        with self.lock:
            for run_id, fields in reports.items():
                self.rows.setdefault(run_id, {}).update(fields)
                attempt = self.attempts.get(run_id)
                if attempt is not None and fields.get("step") is not None:
                    attempt["step"] = max(attempt["step"], fields["step"])

    def snapshot(self) -> dict[str, dict[str, Any]]:
        with self.lock:
            return {run_id: dict(fields, notes=list(fields.get("notes", []))) for run_id, fields in self.rows.items()}

    def take_up(self, run_id: str, node: str, local: bool) -> dict[str, Any]:
        """A node begins a run, or begins it again after the node of the last attempt died. Returns the
        attempt's number, and for a node without shared storage the driver's copy as an archive."""
        run = RunDir(self.runs_dir / run_id)
        durable = _last_checkpoint(run)
        with self.lock:
            previous = self.attempts.get(run_id)
            number = previous["number"] + 1 if previous else 1
            self.attempts[run_id] = {"node": node, "number": number, "step": durable}
            row = self.rows.setdefault(run_id, {})
            row.update(node=node, status="starting")
            if previous is not None:
                row.setdefault("notes", []).append(_taken_up(previous, node, durable, local))
        return {"number": number, "archive": export_bytes(run) if local else None}

    def current(self, run_id: str, number: int) -> bool:
        """Whether attempt `number` is still the run's current one."""
        with self.lock:
            attempt = self.attempts.get(run_id)
            return attempt is not None and attempt["number"] == number

    def bring_back(self, run_id: str, number: int, data: bytes) -> bool:
        """The run as a node has it now, in place of the driver's copy. Refused (False) from an attempt
        that is not the current one: a node the batch gave up on must not overwrite the run."""
        with self.lock:
            attempt = self.attempts.get(run_id)
            if attempt is None or attempt["number"] != number:
                return False
        replace_with_archive(self.runs_dir, run_id, data)
        return True


def _last_checkpoint(run: RunDir) -> int:
    """The step of the run's last checkpoint: where a resume of this copy starts from."""
    events, _torn = run.events.read()
    return max((e.step for e in events if isinstance(e, ev.Checkpoint)), default=0)


def _taken_up(previous: dict[str, Any], node: str, durable: int, local: bool) -> str:
    """What the batch says of a run whose node died: where it went on, from where, and what was lost."""
    said = (f"node {previous['node']} was lost at step {previous['step']}; taken up on node {node} from step {durable}")
    if not local or previous["step"] <= durable:
        return said + " (nothing lost: a call under way is not run again, the toolbox journal says what became of it)"
    return said + (f" (lost: step {durable + 1}" + (f"-{previous['step']}" if previous["step"] > durable + 1 else "")
                   + " on the lost node, done again here)")


def export_bytes(run: RunDir) -> bytes:
    from orchestrator.store.archive import export_run

    with tempfile.TemporaryDirectory(prefix="cairn-ray-") as tmp:
        path = Path(tmp) / f"{run.id}.tar.gz"
        export_run(run, path)
        return path.read_bytes()


def replace_with_archive(runs_dir: Path, run_id: str, data: bytes) -> RunDir:
    """Unpacks a run archive (checked as `cairn import` checks one) as `runs_dir/run_id`, in place of what
    is there. The run stays this user's own: not marked imported (orchestrator/batch/ray_driver.py says why)."""
    from orchestrator.store.archive import import_run
    from orchestrator.store.liveness import LOCK_FILE

    runs_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".ray-{run_id}-", dir=runs_dir))
    try:
        archive = staging / f"{run_id}.tar.gz"
        archive.write_bytes(data)
        fresh = import_run(archive, staging / "runs")
        meta = fresh.read_meta()
        meta.pop("imported", None)
        fresh.write_meta(meta)
        target = runs_dir / run_id
        lock = target / "state" / LOCK_FILE
        if lock.exists():  # the same file, linked: whoever holds the run's lock holds it on the new copy too
            os.link(lock, fresh.state / LOCK_FILE)
        if target.exists():
            os.rename(target, staging / "old")
        os.rename(fresh.root, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return RunDir(target)
