"""Budgets and the loop guard, as pure functions; the time budget over a run's drives, and a run it ends."""

from __future__ import annotations

import json

import pytest

from orchestrator import events as ev
from orchestrator.agent.state import RunState
from orchestrator.config import ContextConfig, LimitsConfig
from orchestrator.context import TokenCounter
from orchestrator.errors import UsageError
from orchestrator.runs.settings import resolve_config, settings_file
from orchestrator.agent.guards import (Finished, LoopGuard, Totals, budget_notice, check_budget, is_last_step,
                                      repeating_pattern, signature)
from tests.fake_loop import call, done, play, turn


def test_the_token_budget_stops_before_the_next_call():
    totals = Totals(prompt_tokens=900, completion_tokens=100)
    with pytest.raises(Finished, match="token limit"):
        check_budget(LimitsConfig(max_tokens=1000), totals, next_step=2)


def test_the_wall_time_budget_stops_before_the_next_call():
    totals = Totals(started=1000.0)
    check_budget(LimitsConfig(max_wall_seconds=60), totals, next_step=2, now=1059.0)
    with pytest.raises(Finished, match="time limit"):
        check_budget(LimitsConfig(max_wall_seconds=60), totals, next_step=2, now=1060.0)


def test_an_unknown_price_does_not_stop_a_run_with_a_cost_limit():
    check_budget(LimitsConfig(max_cost=0.01), Totals(cost_usd=5.0, cost_known=False), next_step=2)


def test_the_last_step_is_the_step_limit():
    assert is_last_step(LimitsConfig(max_steps=3), 3) and not is_last_step(LimitsConfig(max_steps=3), 2)


def test_signatures_ignore_how_long_a_command_took():
    """On a busy machine the same failing command takes 0.1 s once and 0.0 s the next: still the same call."""
    slow = signature("shell_exec", '{"command": "cat x"}', "cat: x: No such file\n[exit code 1, 0.1 s]")
    fast = signature("shell_exec", '{"command": "cat x"}', "cat: x: No such file\n[exit code 1, 0.0 s]")
    assert slow == fast
    assert fast != signature("shell_exec", '{"command": "cat x"}', "cat: x: No such file\n[exit code 2, 0.0 s]")


def test_signatures_ignore_argument_order_and_spacing():
    assert signature("shell_exec", '{"a": 1, "b": 2}', "out") == signature("shell_exec", '{"b":2,"a":1}', "out")
    assert signature("shell_exec", '{"a": 1}', "out") != signature("shell_exec", '{"a": 1}', "other out")


@pytest.mark.parametrize("cycle", [2, 3, 4, 5])
def test_a_cycle_of_two_to_five_calls_seen_twice_is_a_pattern(cycle):
    calls = [f"c{i}" for i in range(cycle)]
    assert repeating_pattern(["x", *calls, *calls]) == cycle
    assert repeating_pattern(["x", *calls, *calls[:-1]]) == 0


def test_three_identical_calls_in_a_row_are_a_pattern_and_two_are_not():
    assert repeating_pattern(["a", "b", "b", "b"]) == 1
    assert repeating_pattern(["a", "b", "b"]) == 0


def test_the_loop_guard_warns_once_then_stops_if_the_pattern_goes_on():
    guard = LoopGuard()
    assert guard.check(["a", "a", "a"]) is not None
    assert guard.check(["a", "a", "a"]) is None  # same episode, nothing new: no second warning
    with pytest.raises(Finished) as stopped:
        guard.check(["a", "a", "a", "a"])
    assert stopped.value.status == "looping"


def test_a_new_episode_gets_a_new_warning():
    guard = LoopGuard()
    assert guard.check(["a", "a", "a"])
    assert guard.check(["a", "a", "a", "b"]) is None
    assert guard.check(["a", "a", "a", "b", "c", "c", "c"])


def _driven(*statuses: tuple[float, str], last: float | None = None) -> RunState:
    """A run's state after status changes at the given times (and a last event at `last`)."""
    state = RunState(ContextConfig(), TokenCounter())
    state.apply(ev.RunStarted(ts=0.0, task="t", system_prompt="s", tools=[], seed=1))
    for ts, status in statuses:
        state.apply(ev.StatusChanged(ts=ts, status=status))
        if last is not None and status == "running" and ts < last:
            state.apply(ev.Notice(ts=last, text="the last event before a crash"))
    return state


def test_the_time_budget_counts_the_drives_not_the_time_the_run_sat_stopped():
    state = _driven((100.0, "running"), (160.0, "waiting"), (10_000.0, "running"))
    assert state.totals.elapsed(now=10_030.0) == 90.0  # 60 s, then 30 s; not the hours it waited
    check_budget(LimitsConfig(max_wall_seconds=91), state.totals, next_step=2, now=10_030.0)
    with pytest.raises(Finished, match=r"the time limit \(1m 30s\) is reached \(1m 30s used\)") as ended:
        check_budget(LimitsConfig(max_wall_seconds=90), state.totals, next_step=2, now=10_030.0)
    assert ended.value.status == "budget"


def test_a_drive_a_crash_cut_off_counts_up_to_its_last_event():
    state = _driven((100.0, "running"), (5_000.0, "running"), last=130.0)
    assert state.totals.elapsed(now=5_010.0) == 40.0


def test_the_tail_says_the_time_used_and_left_beside_the_other_budgets():
    totals = Totals(started=1000.0)
    line = budget_notice(LimitsConfig(max_steps=50, max_wall_seconds=5400), totals, 3, now=1000.0 + 754)
    assert line == "Budget: step 3 of 50, time 12m 34s used of 1h 30m, 1h 17m left."
    assert "time" not in budget_notice(LimitsConfig(), totals, 3)  # no limit, nothing said


def test_a_time_limit_reads_a_duration_as_people_write_it():
    assert LimitsConfig(max_wall_seconds="1h30m").max_wall_seconds == 5400
    assert LimitsConfig(max_wall_seconds="90").max_wall_seconds == 90
    with pytest.raises(ValueError, match="is not a duration"):
        LimitsConfig(max_wall_seconds="soon")


def test_a_settings_file_or_a_templates_cairn_json_sets_the_time_as_a_duration_and_a_bad_one_is_one_line(tmp_path):
    path = tmp_path / "cairn.json"  # a template's cairn.json is read as a settings file is, one layer below
    path.write_text(json.dumps({"limits": {"max_wall_seconds": "2h"}}))
    assert resolve_config({}, layers=[settings_file(path)]).limits.max_wall_seconds == 7200
    path.write_text(json.dumps({"limits": {"max_wall_seconds": "two hours"}}))
    with pytest.raises(UsageError) as caught:
        settings_file(path)
    assert caught.value.message == (f"--settings {path}: invalid setting limits.max_wall_seconds: Value error, 'two hours' "
                                    "is not a duration; give a number of seconds or one with units s, m, h, d (e.g. 90m, "
                                    "1h30m, 45s)")


def test_a_run_whose_time_runs_out_ends_budget(tmp_path):
    out = play(tmp_path, [turn(call("shell_exec", command="sleep 1.2")), done()],
               settings={"limits": {"max_wall_seconds": 1}})
    assert out.status == "budget"
    assert "the time limit (1s) is reached" in out.doc["error"]["reason"]
