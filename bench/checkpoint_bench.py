"""A step and the first request on a big workspace beside a small one: what a checkpoint costs as the
workspace grows.

    python bench/checkpoint_bench.py [--files 1000 100000] [--steps 30] [--repeats 3] [--keep DIR]

For each size, a folder of that many files (about 1.5 KB each, 18 to a folder, four levels deep, like a
source tree), owned by another uid (`--owner`, default 1234:1234), so that the files the root agent makes
are given back to it at every step. On each, `--repeats` runs of `cairn run TASK --workspace FOLDER`, the
way a person starts one, against a model that answers at once: an OpenAI-compatible endpoint served on
loopback by this bench (the scripted model's server), which stamps each request's arrival. Each run
makes `--steps` steps, each a shell command that appends a line to one file, then task_done.

- first request: from spawning `cairn run` to the first request's arrival (the container's start, the
  model library's load; the first checkpoint is taken beside them);
- step: the time between two requests' arrivals (the model answers at once, so it is the tool call,
  the files given back, the checkpoint and the events), the median over steps 2 to the last of a run,
  then over the runs; step 1 apart (it also waits for the first checkpoint, when that is longer than
  the first request).

Each size's figures are printed beside the smallest size's, with the ratio, and at the end every file
of each folder is checked to be the owner's. `--keep DIR` makes the folders in DIR and reuses them.
The last line is `step_x=<n> first_request_x=<n>` (the largest size against the smallest).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from startup_bench import StampedServer, _remove_containers  # noqa: E402 - the scripted model's server

TASK = "Append lines to log.txt."


def make_workspace(folder: Path, files: int, owner: tuple[int, int]) -> None:
    """`files` files of about 1.5 KB under `folder` (made once: a marker says it is complete)."""
    marker = folder.parent / f"{folder.name}.complete"
    if marker.is_file():
        return
    shutil.rmtree(folder, ignore_errors=True)
    rng = random.Random(files)
    words = "def return import class self value result data path name items count line".split()
    for i in range(files):
        d = folder / f"pkg{i // 5000:02d}" / f"mod{i // 500 % 10}" / f"sub{i // 18 % 28:02d}"
        d.mkdir(parents=True, exist_ok=True)
        body = "\n".join(" ".join(rng.choice(words) for _ in range(10)) for _ in range(rng.randint(10, 40)))
        (d / f"m{i}.py").write_text(body + "\n")
    subprocess.run(["chown", "-R", f"{owner[0]}:{owner[1]}", str(folder)], check=True)
    marker.write_text(str(files))


def one_run(workspace: Path, runs: Path, steps: int) -> dict[str, float]:
    turns = [{"tool_calls": [{"name": "shell_exec", "arguments": {"command": f"echo step {i} >> log.txt"}}]}
             for i in range(1, steps + 1)]
    turns.append({"tool_calls": [{"name": "task_done", "arguments": {"summary": "appended"}}]})
    server = StampedServer({"turns": turns})
    url = server.start()
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "NO_COLOR": "1"}
    command = [sys.executable, "-m", "orchestrator.cli", "run", TASK, "--workspace", str(workspace),
               "--model", "openai/scripted", "--api-base", url, "--max-steps", str(steps + 5),
               "--runs-dir", str(runs), "--json"]
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    server.stop()
    if done.returncode != 0:
        raise SystemExit(f"cairn run exited {done.returncode}:\n{done.stderr[-3000:]}")
    arrivals = server.arrivals
    if len(arrivals) < steps + 1:
        raise SystemExit(f"only {len(arrivals)} requests arrived:\n{done.stderr[-3000:]}")
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]  # gap k: step k+1's tool call, checkpoint, events
    return {"first_request": arrivals[0] - started, "step_1": gaps[0], "step": statistics.median(gaps[1:])}


def owned_by_others(folder: Path, owner: tuple[int, int]) -> int:
    return sum(1 for path in [folder, *folder.rglob("*")] if path.lstat().st_uid != owner[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, nargs="+", default=[1000, 100_000])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--owner", default="1234:1234", help="uid:gid of the folders")
    parser.add_argument("--keep", type=Path, help="make (or reuse) the folders in this directory")
    options = parser.parse_args()
    owner = tuple(int(x) for x in options.owner.split(":"))
    from orchestrator.sandbox.docker.image import ensure_image

    ensure_image()  # built before the clocks start
    scratch = None if options.keep else tempfile.TemporaryDirectory(prefix="cairn-checkpoint-bench-")
    base = options.keep or Path(scratch.name)
    base.mkdir(parents=True, exist_ok=True)
    results: dict[int, dict[str, float]] = {}
    try:
        for files in options.files:
            folder = base / f"ws-{files}"
            t = time.perf_counter()
            make_workspace(folder, files, owner)
            print(f"{files:,} files in {folder} ({time.perf_counter() - t:.0f} s to make)", flush=True)
        for r in range(options.repeats):  # the sizes take turns, so that both meet the same load
            for files in options.files:
                with tempfile.TemporaryDirectory(prefix="cairn-bench-runs-") as runs:
                    got = one_run(base / f"ws-{files}", Path(runs), options.steps)
                    _remove_containers(Path(runs))
                print(f"run {r + 1}, {files:,} files: " + " ".join(f"{k}={v:.3f}" for k, v in got.items()), flush=True)
                for key, value in got.items():
                    results.setdefault(files, {}).setdefault(key, []).append(value)
        medians = {files: {k: statistics.median(v) for k, v in got.items()} for files, got in results.items()}
        small = options.files[0]
        print(f"\n{'files':>8} {'first request':>14} {'step 1':>9} {'step (median)':>14}   ratio to {small:,} files")
        for files, m in medians.items():
            base_m = medians[small]
            print(f"{files:>8,} {m['first_request']:>12.2f} s {m['step_1']:>7.2f} s {m['step'] * 1000:>11.1f} ms   "
                  f"first request {m['first_request'] / base_m['first_request']:.2f}x, "
                  f"step {m['step'] / base_m['step']:.2f}x")
        for files in options.files:
            others = owned_by_others(base / f"ws-{files}", owner)
            print(f"{files:,} files: {others} path(s) not owned by {owner[0]} after the runs")
        print(f"load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        big = options.files[-1]
        print(f"step_x={medians[big]['step'] / medians[small]['step']:.2f} "
              f"first_request_x={medians[big]['first_request'] / medians[small]['first_request']:.2f}")
    finally:
        if scratch is not None:
            scratch.cleanup()


if __name__ == "__main__":
    main()
