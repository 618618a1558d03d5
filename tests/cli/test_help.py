"""`cairn ... --help` as a person reads it at 80 columns: grouped, with examples, and wrapped by the
terminal, never broken by hand in the middle of a sentence."""

from __future__ import annotations

import os
import re

import pytest

from tests.in_process import cairn_in_process

COMMANDS = ["run", "resume", "ls", "show", "todo", "files", "diff", "shell", "export", "import", "report", "watch",
            "say", "batch", "image build", "doctor", "gc", "demo", "rm", "stop", "approve"]


def _help(command: str, columns: int = 80) -> str:
    out = cairn_in_process(*command.split(), "--help", env={**os.environ, "COLUMNS": str(columns), "TERM": "dumb"})
    assert out.returncode == 0, out.stderr
    return out.stdout


def _hard_breaks(text: str) -> list[str]:
    """Lines ended by hand: the next line's first word would have fit after them. Checked in the
    paragraphs outside the boxes and in the description column of the boxes' rows."""
    found = []
    lines = text.splitlines()
    for above, below in zip(lines, lines[1:]):
        if above.startswith("│") and below.startswith("│"):
            right = len(above.rstrip()) - 1  # the box's right border
            inner = below[1:right]
            indent = len(inner) - len(inner.lstrip())
            above_inner = above[1:right]
            if not inner.strip() or indent < 5 or inner.lstrip().startswith("[") or above_inner.lstrip().startswith("[") \
                    or len(above_inner) <= indent or above_inner[indent] == " " or above_inner[indent - 1] != " ":
                continue  # a new row, typer's own [default: ...] / [required], or another column
            word = inner.split()[0]
            if len(above[:right].rstrip()) + 1 + len(word) <= right - 1:
                found.append(f"{above.strip()!r} / {below.strip()!r}")
        elif above.strip() and below.strip() and not above.lstrip().startswith(("╭", "╰", "│", "Usage:")) \
                and not below.lstrip().startswith(("╭", "│", "cairn ")):
            word = below.split()[0]
            if len(above.rstrip()) + 1 + len(word) <= 79:
                found.append(f"{above.strip()!r} / {below.strip()!r}")
    return found


@pytest.mark.parametrize("command", COMMANDS)
def test_help_fits_80_columns_and_has_no_hard_line_breaks(command):
    text = _help(command)
    assert all(len(line) <= 80 for line in text.splitlines())
    assert _hard_breaks(text) == []


def test_run_help_groups_its_options_and_gives_two_examples():
    text = _help("run")
    panels = re.findall(r"╭─ ([A-Za-z ]+?) ─", text)
    assert panels == ["Arguments", "Options", "Model", "Workspace", "Limits", "Sandbox", "Approvals and checks",
                      "Output"]
    examples = [line.strip() for line in text.split("Examples:")[1].splitlines() if line.strip()]
    assert len(examples) == 2 and all(line.startswith("cairn run ") for line in examples)
    assert '--check "pytest -q"' in examples[0] and "--api-base" in examples[1]  # each whole, on one line
    assert len(text.splitlines()) < 100


@pytest.mark.parametrize("command", ["resume", "show", "watch", "approve", "say", "todo", "rm"])
def test_the_run_argument_says_at_last(command):
    assert "@last" in _help(command, 120)
