"""Reading a long run: `cairn report`, `cairn export` and `cairn show --atif` on a long run beside a short one,
and the loose objects its checkpoints leave.

    python bench/long_run_bench.py [--steps 2000] [--short 20] [--repeats 3] [--keep DIR]

Two runs are made the way a user makes them, `cairn run TASK --model scripted:PATH` in the real sandbox,
with the scripted model (it answers at once, so the run is all cairn): the short one of `--short` steps,
the long one of `--steps`. Each step is one tool call, in turn a command that appends to a log, a
file_write, a file_read and a todo_write (so every step but the reads changes the workspace and makes a
checkpoint). Then each reader is timed as a user runs it, a fresh `python -m orchestrator.cli` process,
on both runs: the median of `--repeats`, and the long run's time as a multiple of the short run's.

Loose objects: the files under the long run's `state/checkpoints.git/objects/??/` once it has ended.

`--keep DIR` makes the runs in DIR and reuses them when they are there (to time the readers again
without making the runs again). The last line is `report_x=<n> export_x=<n> atif_x=<n> loose=<n>`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def script(steps: int) -> dict:
    """`steps` tool calls, then task_done."""
    turns = []
    for i in range(1, steps):
        kind = i % 4
        if kind == 1:
            call = {"name": "shell_exec", "arguments": {"command": f"echo line {i} >> log.txt && wc -l log.txt"}}
        elif kind == 2:
            body = "".join(f"def f{i}_{k}(x):\n    return x * {k}\n\n" for k in range(12))
            call = {"name": "file_write", "arguments": {"path": f"src/mod{i % 40}.py", "content": body}}
        elif kind == 3:
            call = {"name": "file_read", "arguments": {"path": f"src/mod{(i - 1) % 40}.py"}}
        else:
            plan = "".join(f"- [{'x' if k * 50 < i else ' '}] part {k}\n" for k in range(10))
            call = {"name": "todo_write", "arguments": {"content": f"# Plan (step {i})\n{plan}"}}
        turns.append({"content": f"Step {i}.", "tool_calls": [call]})
    turns.append({"tool_calls": [{"name": "task_done", "arguments": {"summary": f"{steps} steps done"}}]})
    return {"task": "A long run for the bench.", "turns": turns}


def cairn(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "NO_COLOR": "1"}
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    if check and done.returncode != 0:
        raise SystemExit(f"cairn {' '.join(args[:2])} failed ({done.returncode}): {done.stderr[-2000:]}")
    return done


def make_run(runs: Path, steps: int) -> str:
    """The id of a finished run of `steps` steps in `runs` (made now unless there is one)."""
    marker = runs / f"bench-{steps}.id"
    if marker.is_file() and (runs / marker.read_text().strip()).is_dir():
        return marker.read_text().strip()
    runs.mkdir(parents=True, exist_ok=True)
    path = runs / f"script-{steps}.json"
    path.write_text(json.dumps(script(steps)))
    started = time.perf_counter()
    done = cairn("run", "A long run for the bench.", "--model", f"scripted:{path}", "--max-steps", str(steps + 5),
                 "--runs-dir", str(runs), "--json")
    run_id = json.loads(done.stdout)["id"]
    marker.write_text(run_id)
    print(f"made a run of {steps} steps in {time.perf_counter() - started:.0f} s: {run_id}", flush=True)
    return run_id


def timed(args: list[str], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        cairn(*args)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def loose_objects(git_dir: Path) -> int:
    objects = git_dir / "objects"
    return sum(len(os.listdir(d)) for d in objects.iterdir() if len(d.name) == 2 and d.is_dir())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2000, help="steps of the long run")
    parser.add_argument("--short", type=int, default=20, help="steps of the short run (the baseline)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="make (or reuse) the runs in this folder")
    options = parser.parse_args()
    scratch = None if options.keep else tempfile.TemporaryDirectory(prefix="cairn-long-run-")
    runs = options.keep or Path(scratch.name)
    try:
        short, long = make_run(runs, options.short), make_run(runs, options.steps)
        out = runs / "out"
        out.mkdir(exist_ok=True)
        readers = {
            "report": lambda run: ["report", run, "-o", str(out / f"{run}.html"), "--runs-dir", str(runs)],
            "export": lambda run: ["export", run, "-o", str(out / f"{run}.tar.gz"), "--runs-dir", str(runs)],
            "atif": lambda run: ["show", run, "--atif", "--runs-dir", str(runs)],
        }
        ratios = {}
        print(f"{'reader':<8} {options.short:>6}-step run {options.steps:>6}-step run   ratio")
        for name, args in readers.items():
            base, big = timed(args(short), options.repeats), timed(args(long), options.repeats)
            ratios[name] = big / base
            print(f"{name:<8} {base:>13.2f} s {big:>13.2f} s   {ratios[name]:5.1f}x", flush=True)
        loose = loose_objects(runs / long / "state" / "checkpoints.git")
        short_loose = loose_objects(runs / short / "state" / "checkpoints.git")
        print(f"loose objects in the checkpoints: {short_loose} after {options.short} steps, "
              f"{loose} after {options.steps} steps")
        print(f"report_x={ratios['report']:.2f} export_x={ratios['export']:.2f} atif_x={ratios['atif']:.2f} loose={loose}")
    finally:
        if scratch is not None:
            scratch.cleanup()


if __name__ == "__main__":
    main()
