"""The context bench runs end to end on a short run, and cairn stays inside the window (no timings)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from orchestrator.config import ContextConfig

BENCH = Path(__file__).resolve().parents[2] / "bench" / "context_bench.py"
LAST_LINE = re.compile(
    r"^cache_hit=(?P<cache_hit>[0-9.]+) peak_tokens=(?P<peak>\d+) "
    r"cost_vs_summarize=(?P<cost>[0-9.]+) cost_vs_appended=(?P<appended>[0-9.]+) rereads=(?P<rereads>\d+) "
    r"overhead_300_vs_10=(?P<overhead>[0-9.]+)(?P<real> compactions=\d+ summaries=\d+ cost_vs_raw=[0-9.]+)?$"
)


def load_bench() -> ModuleType:
    """bench/ is not a package: load the script by its path, as `python bench/context_bench.py` would."""
    spec = importlib.util.spec_from_file_location("context_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_short_run_prints_parsable_summary_and_cairn_stays_under_the_window(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bench = load_bench()
    window = 24_000  # small, so that 40 steps cross the high-water mark
    result = bench.main(["--steps", "40", "--window", str(window), "--repeats", "1"])
    out = capsys.readouterr().out
    match = LAST_LINE.match(out.rstrip("\n").splitlines()[-1])
    assert match, out
    peak = int(match["peak"])
    assert 0 < peak < window
    assert peak == int(result["peak_tokens"])
    assert 0 < float(match["cache_hit"]) <= 1
    compactions = re.search(r"^compactions / summaries\s+(\d+) /", out, re.MULTILINE)
    assert compactions and int(compactions[1]) >= 1, out



def test_the_line_before_the_last_one_prices_a_critic_every_ten_steps_beside_no_critic(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bench = load_bench()
    result = bench.main(["--steps", "40", "--window", "24000", "--repeats", "1", "--summary-request", "fresh"])
    lines = capsys.readouterr().out.rstrip("\n").splitlines()
    match = re.match(r"^critic_every_10: cache_hit=([0-9.]+) cost_vs_without=([0-9.]+)$", lines[-3])
    assert match, lines[-4:]
    assert float(match[2]) > 1  # four critic requests cost something
    assert float(match[2]) == pytest.approx(result["critic_cost_vs_without"], abs=1e-3)
    assert "4 critic requests" in lines[-4]


def test_summarize_baseline_appended_request_is_served_from_the_cache() -> None:
    bench = load_bench()
    turns = bench.make_workload(40, seed=7)
    fresh = bench.run_summarize(turns, 24_000)
    appended = bench.run_summarize(turns, 24_000, appended=True)
    assert fresh.summaries == appended.summaries >= 1
    assert fresh.summarize_cached == 0
    assert appended.summarize_cached > 0
    assert appended.cost_summarize < fresh.cost_summarize


def test_real_shaped_run_prints_compactions_summaries_and_cost_against_the_raw_agent(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bench = load_bench()
    result = bench.main(["--workload", "real-shaped", "--steps", "60", "--window", "12000", "--repeats", "1"])
    match = LAST_LINE.match(capsys.readouterr().out.rstrip("\n").splitlines()[-1])
    assert match and match["real"], result
    assert result["compactions"] >= 1 and result["cost_vs_raw"] > 0


def test_real_shaped_workload_has_the_measured_shapes() -> None:
    bench = load_bench()
    turns = bench.make_real_shaped(150, seed=7)
    sizes = sorted(len(call.result) for turn in turns for call in turn.calls)
    said = [len(t.message["content"]) + len(t.message["tool_calls"][0]["function"]["arguments"]) for t in turns]
    assert 200 <= sizes[len(sizes) // 2] <= 900 and 1500 <= sizes[int(0.9 * len(sizes))] <= 3000
    assert sum(size > 8000 for size in sizes) <= 0.03 * len(sizes)
    assert 600 <= sum(said) / len(said) <= 1400
    assert bench.make_real_shaped(150, seed=7) == turns  # seeded


# --- references back: what a step that needs an earlier observation costs --------------------------


def _cairn(bench: ModuleType, turns: list, references: dict, **settings: object):
    ledger, _ = bench.measure_cairn(turns, 16_000, 1, ContextConfig(**settings), references=references)
    return ledger


def _small_step(turns: list, steps: range) -> int:
    """A step in `steps` whose observation is small enough never to be offloaded."""
    return next(t.step for t in turns if t.step in steps and t.kind == "small" and len(t.calls) == 1)


def test_a_result_masked_out_of_the_request_costs_cairn_exactly_one_extra_step() -> None:
    bench = load_bench()
    turns = bench.make_workload(40, seed=7)
    plain = _cairn(bench, turns, {})
    assert plain.compactions >= 1  # so the early results are pointers or summarized by step 40
    source = turns[_small_step(turns, range(1, 6)) - 1].calls[-1]
    ledger = _cairn(bench, turns, {40: source})
    assert ledger.rereads == 1 and ledger.reread_cost > 0
    assert ledger.requests - ledger.summaries == plain.requests - plain.summaries + 1


def test_a_result_still_whole_in_the_request_costs_cairn_nothing() -> None:
    bench = load_bench()
    turns = bench.make_workload(40, seed=7)
    source = turns[_small_step(turns, range(33, 40)) - 1].calls[-1]  # among the last 10 results: whole
    plain = _cairn(bench, turns, {}, keep_recent_results=10)
    ledger = _cairn(bench, turns, {40: source}, keep_recent_results=10)
    assert ledger.rereads == 0 and ledger.reread_cost == 0
    assert (ledger.requests, ledger.cost) == (plain.requests, plain.cost)


def test_a_result_summarized_away_costs_the_baseline_one_rerun_and_a_whole_one_none() -> None:
    bench = load_bench()
    turns = bench.make_workload(40, seed=7)
    plain = bench.run_summarize(turns, 24_000)
    assert plain.summaries >= 1
    early = bench.run_summarize(turns, 24_000, references={40: turns[0].calls[-1]})
    late = bench.run_summarize(turns, 24_000, references={40: turns[38].calls[-1]})
    assert early.rereads == 1 and early.requests == plain.requests + 1
    assert late.rereads == 0 and late.cost == plain.cost


def test_a_reread_brings_the_observation_back_whole_so_a_second_reference_is_free() -> None:
    bench = load_bench()
    turns = bench.make_workload(40, seed=7)
    source = turns[_small_step(turns, range(1, 6)) - 1].calls[-1]
    assert _cairn(bench, turns, {39: source, 40: source}).rereads == 1


def test_references_are_seeded_and_take_a_tenth_of_the_steps() -> None:
    bench = load_bench()
    turns = bench.make_workload(101, seed=3)
    references = bench.make_references(turns, 3)
    assert len(references) == 10 and references == bench.make_references(turns, 3)
    assert all(call.id.startswith("call_") and int(call.id.split("_")[1]) < step for step, call in references.items())


def test_the_real_shaped_floor_is_below_what_cairn_pays_and_what_the_raw_agent_pays() -> None:
    bench = load_bench()
    result = bench.main(["--workload", "real-shaped", "--steps", "60", "--window", "12000", "--repeats", "1"])
    assert 0 < result["floor_vs_raw"] < result["cost_vs_raw"] and result["floor_vs_raw"] < 1
