"""What stops a run that should not go on: budgets, and the loop guard."""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass, field

from orchestrator.config import LimitsConfig
from orchestrator.sizes import format_duration


class Finished(Exception):
    """The run ends with this status; the loop records it and returns."""

    def __init__(self, status: str, reason: str = "", result: str | None = None) -> None:
        super().__init__(f"{status}: {reason}")
        self.status = status
        self.reason = reason
        self.result = result


@dataclass
class Totals:
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cost_known: bool = True  # False once any call had an unknown price
    started: float = field(default_factory=time.time)  # when the current drive began (RunState sets it)
    spent_seconds: float = 0.0  # what the run's earlier drives took: the time it sat stopped is not in it

    @property
    def cache_hit_ratio(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def elapsed(self, now: float | None = None) -> float:
        """Wall-clock seconds the run has been driven: its earlier drives and this one up to `now`."""
        return self.spent_seconds + max(0.0, (time.time() if now is None else now) - self.started)


def check_budget(limits: LimitsConfig, totals: Totals, next_step: int, now: float | None = None) -> None:
    """Raises Finished('budget') when a limit is spent. Checked before each model call."""
    if limits.max_steps is not None and next_step > limits.max_steps:
        raise Finished("budget", f"the step limit ({limits.max_steps}) is reached")
    spent = totals.prompt_tokens + totals.completion_tokens
    if limits.max_tokens is not None and spent >= limits.max_tokens:
        raise Finished("budget", f"the token limit ({limits.max_tokens}) is reached ({spent} used)")
    if limits.max_cost is not None and totals.cost_known and totals.cost_usd >= limits.max_cost:
        raise Finished("budget", f"the cost limit (${limits.max_cost:.4f}) is reached (${totals.cost_usd:.4f})")
    if limits.max_wall_seconds is not None and totals.elapsed(now) >= limits.max_wall_seconds:
        raise Finished("budget", f"the time limit ({format_duration(limits.max_wall_seconds)}) is reached "
                                 f"({format_duration(totals.elapsed(now))} used)")


def is_last_step(limits: LimitsConfig, step: int) -> bool:
    return limits.max_steps is not None and step >= limits.max_steps


def budget_notice(limits: LimitsConfig, totals: Totals, step: int, now: float | None = None) -> str:
    """The tail's line on what is left: steps, cost, tokens and time, those the run has a limit for."""
    parts = []
    if limits.max_steps is not None:
        parts.append(f"step {step} of {limits.max_steps}")
    if limits.max_cost is not None:
        cost = f"${totals.cost_usd:.4f}" if totals.cost_known else "unknown"
        parts.append(f"cost {cost} of ${limits.max_cost:.2f}")
    if limits.max_tokens is not None:
        parts.append(f"tokens {totals.prompt_tokens + totals.completion_tokens} of {limits.max_tokens}")
    if limits.max_wall_seconds is not None:
        used = totals.elapsed(now)
        left = max(0.0, limits.max_wall_seconds - used)
        parts.append(f"time {format_duration(used)} used of {format_duration(limits.max_wall_seconds)}, "
                     f"{format_duration(left)} left")
    text = "Budget: " + ", ".join(parts) + "." if parts else ""
    if is_last_step(limits, step):
        text += " This is the last step: call task_done with a summary of where things stand."
    return text


# How long a command took (its footer, `[exit code 1, 0.3 s]`) is no part of what it gave: the same
# failing command is the same call whether the machine was busy or not.
_TIMING = re.compile(r"\[exit code (-?\d+), [0-9.]+ s\]")


def signature(name: str, arguments: str, result: str) -> str:
    """Same tool, same arguments (normalized) and same result give the same signature."""
    try:
        args = json.dumps(json.loads(arguments), sort_keys=True)
    except (json.JSONDecodeError, TypeError):
        args = " ".join(str(arguments).split())
    digest = hashlib.sha256(_TIMING.sub(r"[exit code \1]", result).encode()).hexdigest()[:16]
    return f"{name}|{args}|{digest}"


def repeating_pattern(signatures: list[str]) -> int:
    """The length of the pattern repeating at the tail, or 0.

    Three identical calls in a row count as a pattern of length 1; a cycle of length 2 to 5 counts once
    it has been seen twice in a row.
    """
    if len(signatures) >= 3 and len(set(signatures[-3:])) == 1:
        return 1
    for n in range(2, 6):
        if len(signatures) >= 2 * n and signatures[-n:] == signatures[-2 * n : -n] and len(set(signatures[-n:])) > 1:
            return n
    return 0


class LoopGuard:
    """Warns once per episode of repetition, then stops the run if the repetition goes on."""

    def __init__(self) -> None:
        self.warned_at: int | None = None  # how many signatures there were when we warned

    def check(self, signatures: list[str]) -> str | None:
        """A warning for the tail, None, or raises Finished('looping')."""
        pattern = repeating_pattern(signatures)
        if not pattern:
            self.warned_at = None  # the episode is over; a new one gets a new warning
            return None
        if self.warned_at is None:
            self.warned_at = len(signatures)
            return (
                f"Loop warning: your last calls repeat the same {'call' if pattern == 1 else f'{pattern} calls'} "
                "with the same results. Doing it again will not change the outcome: change the approach, "
                "read the error closely, or call ask_user."
            )
        if len(signatures) > self.warned_at:
            raise Finished("looping", f"the agent kept repeating a pattern of {pattern} call(s) after a warning")
        return None
