"""The examples in examples/ run as docs/python-api.md shows them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run_example(name: str, runs_dir: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(EXAMPLES.parent)}
    return subprocess.run([sys.executable, str(EXAMPLES / name), str(runs_dir)], capture_output=True, text=True,
                          env=env, timeout=300)


def test_bring_your_own_runs_the_loop_on_the_in_memory_ports(tmp_path):
    done = run_example("bring_your_own.py", tmp_path / "runs")
    assert done.returncode == 0, done.stderr
    assert ": done: add.py prints 5" in done.stdout
    assert done.stdout.rstrip().endswith("add.py: print(2 + 3)")


@pytest.mark.docker
def test_python_api_runs_the_demo_in_the_sandbox(tmp_path, sandbox_image):
    done = run_example("python_api.py", tmp_path / "runs")
    assert done.returncode == 0, done.stderr
    assert ": done: " in done.stdout and "step 1: todo_write" in done.stdout
