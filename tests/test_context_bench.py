"""The context bench runs end to end on a short run, and cairn stays inside the window (no timings)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "context_bench.py"
LAST_LINE = re.compile(
    r"^cache_hit=(?P<cache_hit>[0-9.]+) peak_tokens=(?P<peak>\d+) "
    r"cost_vs_summarize=(?P<cost>[0-9.]+) overhead_300_vs_10=(?P<overhead>[0-9.]+)$"
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



def test_summarize_baseline_appended_request_is_served_from_the_cache() -> None:
    bench = load_bench()
    turns = bench.make_workload(40, seed=7)
    fresh = bench.run_summarize(turns, 24_000)
    appended = bench.run_summarize(turns, 24_000, appended=True)
    assert fresh.summaries == appended.summaries >= 1
    assert fresh.summarize_cached == 0
    assert appended.summarize_cached > 0
    assert appended.cost_summarize < fresh.cost_summarize
