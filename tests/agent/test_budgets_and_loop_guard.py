"""Budgets and the loop guard, as pure functions."""

from __future__ import annotations

import pytest

from orchestrator.config import LimitsConfig
from orchestrator.agent.guards import Finished, LoopGuard, Totals, check_budget, is_last_step, repeating_pattern, signature


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
