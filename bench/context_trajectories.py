"""`context_bench.py --trajectories FILE...`: cairn against the raw agent on real published runs.

Each file (`trajectories.load`: mini-SWE-agent's `.traj.json`, SWE-agent's `.traj`) is replayed
through cairn's pipeline at the window (32k by default) and through a raw agent that keeps its whole
history with no limit, both with cairn's system prompt and tools and the run's own task, priced with
the same accounting (`Ledger`). A real run already holds its own read-backs, so no reference back is
added unless `--rereads` asks for it. After each of cairn's runs every pointer is checked to resolve,
byte for byte (`check_pointers`).

Printed: a line a run (steps, cairn's cost over the raw agent's, cache hit, peak, compactions and
summaries), the set's totals, and where the tokens and the cost go (`context_breakdown`), then the
machine-readable line
    runs=<n> steps=<n> cost_vs_raw=<r> cache_hit=<r> peak_tokens=<n> over_window=<n> worst=<r> best=<r>
where cost_vs_raw is the set's cost over the raw agent's, summed over its runs. With `--say N` the person
speaks N times in each run (the raw agent hears the same). With `--compare`, cairn also plays each run
with its results in the plain form and the person's words compacted like any message (as before issue
32), and the line before the last is
    before: cost_vs_raw=<r> cache_hit=<r> peak_tokens=<n>
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import ModuleType

from context_breakdown import Breakdown, table
from trajectories import TrajectoryError, load


def run_set(bench: ModuleType, args: argparse.Namespace, window: int) -> dict[str, float]:
    cfg = bench._config(args)
    cairn_all = Breakdown(bench.PRICE_INPUT, bench.PRICE_CACHED, bench.PRICE_OUTPUT)
    raw_all = Breakdown(bench.PRICE_INPUT, bench.PRICE_CACHED, bench.PRICE_OUTPUT)
    rows = []
    before: list = []  # --compare: cairn as before issue 32, a ledger a run
    print(f"{len(args.trajectories)} runs at a window of {window:,} (cairn compacts at {cfg.high_water:.0%} down to "
          f"{cfg.low_water:.0%}, keeps the last {cfg.keep_recent_results} results whole)")
    print(f"{'run':<58}{'steps':>6}{'cairn $':>9}{'raw $':>9}{'ratio':>7}{'hit':>7}{'peak':>8}{'comp/sum':>10}")
    for path in args.trajectories:
        try:
            trajectory = load(Path(path))
        except TrajectoryError as error:
            sys.exit(f"context_bench: {error}")
        turns = bench.with_person(bench.trajectory_turns(trajectory.steps), args.say, args.seed)
        references = bench.make_references(turns, args.seed, args.rereads) if args.rereads else {}
        cairn, _ = bench.measure_cairn(turns, window, 1, cfg, references, task=trajectory.task,
                                       keep_said=args.keep_said == "on")
        raw = bench.run_drop_oldest(turns, 10**12, None, "raw, no limit", task=trajectory.task)
        cairn_all.merge(cairn.breakdown)
        raw_all.merge(raw.breakdown)
        ratio = cairn.cost / raw.cost
        rows.append((len(turns), cairn, raw, ratio))
        if args.compare:
            plain = cfg.model_copy(update={"vary_framing": False})
            before.append(bench.measure_cairn(turns, window, 1, plain, references, task=trajectory.task,
                                              keep_said=False)[0])
        print(f"{trajectory.name[:57]:<58}{len(turns):>6}{cairn.cost:>9.3f}{raw.cost:>9.3f}{ratio:>7.3f}"
              f"{cairn.cache_hit:>7.3f}{max(cairn.peak, cairn.peak_summarize):>8,}"
              f"{f'{cairn.compactions}/{cairn.summaries}':>10}")
    cost = sum(r[1].cost for r in rows)
    raw_cost = sum(r[2].cost for r in rows)
    cached = sum(r[1].cached for r in rows)
    prompt = sum(r[1].prompt for r in rows)
    peak = max(max(r[1].peak, r[1].peak_summarize) for r in rows)
    over = sum(max(r[1].peak, r[1].peak_summarize) > window for r in rows)
    print(f"{'all':<58}{sum(r[0] for r in rows):>6}{cost:>9.3f}{raw_cost:>9.3f}{cost / raw_cost:>7.3f}"
          f"{cached / prompt:>7.3f}{peak:>8,}{f'{sum(r[1].compactions for r in rows)}/{sum(r[1].summaries for r in rows)}':>10}")
    print()
    print("where the tokens and the cost go, over all runs:")
    print("\n".join(table([("cairn", cairn_all), ("raw, no limit", raw_all)])))
    result = {"runs": float(len(rows)), "steps": float(sum(r[0] for r in rows)), "cost_vs_raw": cost / raw_cost,
              "cache_hit": cached / prompt, "peak_tokens": float(peak), "over_window": float(over),
              "worst": max(r[3] for r in rows), "best": min(r[3] for r in rows)}
    if before:
        peak_before = max(max(b.peak, b.peak_summarize) for b in before)
        result |= {"before_cost_vs_raw": sum(b.cost for b in before) / raw_cost,
                   "before_cache_hit": sum(b.cached for b in before) / sum(b.prompt for b in before)}
        print()
        print(f"before: cost_vs_raw={result['before_cost_vs_raw']:.3f} cache_hit={result['before_cache_hit']:.3f} "
              f"peak_tokens={peak_before}")
    print()
    print(f"runs={len(rows)} steps={int(result['steps'])} cost_vs_raw={result['cost_vs_raw']:.3f} "
          f"cache_hit={result['cache_hit']:.3f} peak_tokens={peak} over_window={over} "
          f"worst={result['worst']:.3f} best={result['best']:.3f}")
    return result
