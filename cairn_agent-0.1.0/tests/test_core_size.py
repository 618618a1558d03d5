"""The core-size bench runs and ends with its figures; the size itself is the bench's to report, not a test's."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench" / "core_size.py"


def _bench_module():
    spec = importlib.util.spec_from_file_location("core_size", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_core_size_bench_lists_every_core_file_and_ends_with_its_totals() -> None:
    out = subprocess.run([sys.executable, str(BENCH)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    assert re.fullmatch(r"core_code_lines=\d+ core_wc_lines=\d+ target=1500", lines[-1]), lines[-1]
    for name in _bench_module().CORE:
        assert any(line.startswith(name + " ") for line in lines), name


def test_code_lines_leave_out_blank_lines_comments_and_docstrings() -> None:
    source = '''"""A module's docstring,
on two lines."""

import os  # a comment after code counts as code

# a comment alone


def f(x: int) -> str:
    """A function's docstring."""
    text = """not a docstring,
    but a string on two lines"""
    return text + str(x)
'''
    assert _bench_module().code_lines(source) == 5
