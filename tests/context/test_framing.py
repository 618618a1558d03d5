"""Framing: the wrapper around a tool result varies on purpose (context/framing.py); the output never does."""

from __future__ import annotations

import pytest

from orchestrator.config import ContextConfig
from orchestrator.context.framing import FRAMINGS, exit_line, frame_result, framing
from orchestrator.context.framing import READ_BACK
from orchestrator.context.offload import preview, stats_from_preview

OUTPUT = "collected 3 items\n\ntests/test_a.py ...\n"
FOOTER = exit_line(0, 0.25) + "\n[a note after the exit line]"


@pytest.mark.parametrize("seed", [0, 1, 7, 12345, 2**31 - 1])
def test_any_seven_results_in_a_row_show_every_form_and_twelve_show_at_least_three(seed):
    forms = [framing(seed, n) for n in range(200)]
    for start in range(len(forms) - 12):
        assert len(set(forms[start:start + 2 * FRAMINGS - 1])) == FRAMINGS
        assert len(set(forms[start:start + 12])) >= 3
    assert forms == [framing(seed, n) for n in range(200)]  # the same seed, the same forms: a resume agrees


def test_two_seeds_frame_a_run_differently_and_the_setting_turns_it_off():
    assert [framing(1, n) for n in range(40)] != [framing(2, n) for n in range(40)]
    assert {framing(1, n, vary=False) for n in range(40)} == {0}
    assert ContextConfig().vary_framing is True


def test_the_plain_form_is_the_output_then_the_footer():
    assert frame_result(OUTPUT, FOOTER, "shell_exec", 0) == OUTPUT.rstrip("\n") + "\n" + FOOTER


@pytest.mark.parametrize("form", range(FRAMINGS))
def test_every_form_keeps_the_output_byte_for_byte_and_says_the_exit_code_and_the_time(form):
    framed = frame_result(OUTPUT, FOOTER, "shell_exec", form)
    body = OUTPUT if form else OUTPUT.rstrip("\n")  # the plain form is cairn's as it always was
    assert body in framed
    assert "0.2" in framed and "exit" in framed and "[a note after the exit line]" in framed
    assert frame_result("", "", "file_read", form) == (
        {0: "", 1: "[file_read result]", 2: "--- file_read output ---\n--- end of output ---", 3: "file_read returned:"}[form])


def test_the_forms_differ_from_each_other():
    assert len({frame_result(OUTPUT, FOOTER, "shell_exec", form).replace(OUTPUT, "") for form in range(FRAMINGS)}) == FRAMINGS


@pytest.mark.parametrize("form", range(FRAMINGS))
def test_a_preview_keeps_its_header_first_in_every_form_and_says_how_to_read_the_rest(form):
    text = "".join(f"line {i}\n" for i in range(1000))
    path = "/cairn/obs/3-shell_exec.txt"
    shown = frame_result(preview(text, path, ContextConfig()), exit_line(0, 1.0), "shell_exec", form, path)
    assert stats_from_preview(shown) == (1000, len(text))
    assert shown.splitlines()[-2] == READ_BACK[form].format(path=path)  # then the exit line, in its form
