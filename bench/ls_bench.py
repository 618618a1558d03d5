"""`cairn ls` over many runs, read from the run's view (orchestrator/view/): each figure beside a baseline
measured in the same run.

    PYTHONPATH=. python bench/ls_bench.py [--runs 1000] [--steps 50] [--long 5000] [--repeats 5]

It makes `--runs` ended runs of `--steps` steps each (their event logs as runs write them) and one live-
looking long run of `--long` steps whose log grows while it is listed, then times, in this process
(`list_runs`, what `cairn ls --json` prints; the engine is not asked which runs hold a container):

- ls_10_s, ls_many_s: ls over 10 runs and over all of them, once each run's fold is kept
  (`state/view.json`); the ratio is what a runs dir of many costs over a small one;
- ls_cold_s: the first ls over all of them, folding every log (the views kept by none yet);
- long_first_s, long_next_s: one long run read alone, first (its whole log folded), then after one
  more step was appended (only the new lines folded).

Each figure is the median of `--repeats` timings. The last line holds them all, `name=value` pairs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator import events as ev  # noqa: E402
from orchestrator.store.run_dir import RunDir  # noqa: E402
from orchestrator.ui.inspect import listing  # noqa: E402
from orchestrator.view.read import CACHE, read_view  # noqa: E402
from bench.serve_bench import step_events  # noqa: E402 - one step as a run logs it, shared by the benches


def make_run(runs_dir: Path, steps: int, end: str | None = "done") -> RunDir:
    run = RunDir.create(runs_dir, {"task": f"a task of {steps} steps", "config": {"model": {"model": "bench"}}})
    run.release()  # the bench writes the log; no process of its own drives 1,000 runs
    lines = [ev.RunStarted(task="bench", system_prompt="(bench)", tools=[]), ev.StatusChanged(status="running")]
    for n in range(1, steps + 1):
        lines += step_events(n)
    if end is not None:
        lines.append(ev.StatusChanged(step=steps, status=end, result="finished" if end == "done" else None))
    run.events.path.write_text("".join(ev.dump_event(e) + "\n" for e in lines))
    if end is not None:  # what a drive writes in run.json as it ends (read by older versions of ls)
        run.update_meta(status=end, steps=steps, result="finished" if end == "done" else None,
                        usage={"prompt_tokens": 1000 * steps, "cached_tokens": 900 * steps,
                               "completion_tokens": 20 * steps, "cost_usd": 0.0001 * steps})
    return run


def timed(what: Callable[[], object], repeats: int, before: Callable[[], None] = lambda: None) -> float:
    times = []
    for _ in range(repeats):
        before()
        started = time.perf_counter()
        what()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--long", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=5)
    options = parser.parse_args()
    listing.container_states = lambda: {}  # the engine's answer is one call for all runs: not this bench's subject

    with tempfile.TemporaryDirectory(prefix="cairn-ls-bench-") as tmp:
        few, many = Path(tmp) / "few", Path(tmp) / "many"
        runs = [make_run(many, options.steps) for _ in range(options.runs)]
        for _ in range(10):
            make_run(few, options.steps)

        def forget() -> None:
            for run in runs:
                (run.state / CACHE).unlink(missing_ok=True)

        cold = timed(lambda: listing.list_runs(many), options.repeats, before=forget)
        listing.list_runs(few)
        small = timed(lambda: listing.list_runs(few), options.repeats)
        big = timed(lambda: listing.list_runs(many), options.repeats)
        print(f"ls over 10 runs {small:.3f} s, over {options.runs} runs {big:.3f} s "
              f"({big / small:.1f}x; per run {big / options.runs * 1000:.2f} ms); the first, folding every log: "
              f"{cold:.3f} s")

        long = make_run(Path(tmp) / "long", options.long, end=None)
        first = timed(lambda: read_view(long), 1, before=lambda: (long.state / CACHE).unlink(missing_ok=True))
        n = [options.long]

        def grow() -> None:
            n[0] += 1
            with open(long.events.path, "a") as f:
                f.write("".join(ev.dump_event(e) + "\n" for e in step_events(n[0])))

        next_ = timed(lambda: read_view(long), options.repeats, before=grow)
        print(f"a run of {options.long} steps: its first read {first:.3f} s (its whole log), the next after a "
              f"step {next_ * 1000:.1f} ms ({first / next_:.0f}x less)")
        print(f"ls_10_s={small:.4f} ls_many_s={big:.4f} ls_cold_s={cold:.4f} long_first_s={first:.4f} "
              f"long_next_s={next_:.4f}")


if __name__ == "__main__":
    main()
