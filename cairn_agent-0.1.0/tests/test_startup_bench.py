"""The startup bench runs (one start, in CI) and ends with its figures; its timings are its own business."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "startup_bench.py"


@pytest.mark.docker
def test_the_startup_bench_ends_with_its_four_medians(sandbox_image):
    out = subprocess.run([sys.executable, str(BENCH), "--short"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    last = out.stdout.strip().splitlines()[-1]
    number = r"\d+\.\d+"
    assert re.fullmatch(rf"first_request_s={number} sandbox_ready_s={number} one_step_total_s={number} "
                        rf"litellm_import_s={number}", last), last
