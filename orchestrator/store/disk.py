"""How much disk a run uses, and the limit on it (`--max-disk`).

A run's disk use is everything it can make grow on the host: its whole run directory (the workspace,
`cairn/`, which the sandbox sees as /cairn and where floods of output are offloaded, and `state/`, whose
checkpoints keep every version of the workspace's files), counted by allocated blocks (so a sparse file
counts what it really takes, and a file hard-linked twice counts once), plus the container's writable
layer (what the agent wrote elsewhere in its computer: packages, caches; as the engine reports it,
`SizeRw` of `docker inspect --size`). For a run on a user's own folder (`--workspace DIR`) what the
folder held when the run first measured it is not counted: the run did not make it.

Measuring walks the workspace and makes the engine walk the container's layer: ~5 µs a file for each
(226 ms and 276 ms for 50,000 files on the project's machine; bench/disk_bench.py). So `DiskLimit` measures
after a step only when at least `SPACING` times the last measurement's own duration has passed since
it: at most ~5 % of a run's time goes to it, and a small run is measured after every step.
"""

from __future__ import annotations

import stat
import time
from pathlib import Path
from typing import Any, Callable

from orchestrator.sizes import format_size, parse_size
from orchestrator.store import run_files

SPACING = 20.0
def tree_usage(root: Path) -> int:
    """Bytes allocated to everything under `root` (the directories too), symlinks not followed,
    hard links counted once, listed by descriptor (store/run_files.py: a folder the sandbox swaps for a
    link meanwhile is not entered). What vanishes or cannot be read meanwhile is left out."""
    total, seen = 0, set()
    for entry in run_files.walk(root):
        st = entry.stat
        if not stat.S_ISDIR(st.st_mode) and st.st_nlink > 1:
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
        total += st.st_blocks * 512
    return total


class DiskLimit:
    """Stops a run whose disk use passes `limit` (a size as `parse_size` reads it); measured after
    steps, spaced by its own cost. `measure()` returns (bytes of the run's files on the host, container
    layer bytes, or None when the engine does not say)."""

    def __init__(self, limit: str, measure: Callable[[], tuple[int, int | None]],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.text, self.limit = limit, parse_size(limit)
        self.measure, self.clock = measure, clock
        self.next_at = 0.0  # the first step is always measured
        self.last: tuple[int, int | None] | None = None
        self.last_seconds = 0.0
        self.exceeded: str | None = None  # the reason, once a measurement was over the limit

    def over(self) -> str | None:
        """None while the run is within the limit as last measured; else the reason to stop, with the
        figures. Measures only when the last measurement is old enough (see SPACING)."""
        now = self.clock()
        if now < self.next_at:
            return self.exceeded
        started = time.perf_counter()
        workspace, layer = self.last = self.measure()
        self.last_seconds = time.perf_counter() - started
        self.next_at = self.clock() + SPACING * self.last_seconds
        used = workspace + (layer or 0)
        if used <= self.limit:
            self.exceeded = None
            return None
        what = "the run's files and its container use" if layer else "the run's files use"
        self.exceeded = f"disk: {what} {format_size(used)}, over --max-disk {self.text.strip()}"
        return self.exceeded


def disk_limit_of(run: Any, sandbox: Any, limit: str) -> DiskLimit:
    """The limit of a run (a store.run_dir.RunDir) and its sandbox. For a run on a user's own folder, the
    folder's size when the run first measured it is kept in run.json as `disk_baseline`, and not counted."""
    external = run.external_workspace
    baseline = 0
    if external is not None:
        baseline = run.read_meta().get("disk_baseline")
        if not isinstance(baseline, int):
            baseline = tree_usage(external)
            run.update_meta(disk_baseline=baseline)

    def measure() -> tuple[int, int | None]:
        files = tree_usage(run.root)  # workspace/ (unless external), cairn/ and state/
        if external is not None:
            files += max(0, tree_usage(external) - baseline)
        layer = getattr(sandbox, "disk_usage", None)  # a stand-in sandbox (tests) may not measure
        return files, layer() if layer is not None else None

    return DiskLimit(limit, measure)
