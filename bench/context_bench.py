#!/usr/bin/env python3
"""What cairn's context engine buys over two common policies, on one scripted long run.

One deterministic 300-step run (from `--seed`) of a coding agent: small outputs (ls, short test
runs, edits), medium ones (file reads, diffs), large ones (build logs, `pytest -v` of a big suite,
file dumps), failures (tracebacks, non-zero exits), assistant messages with tool calls, and a
todo.md rewritten every ~10 steps. The same sequence is played against three policies, each
producing the whole request (messages + tools) at every step:

1. cairn: the real `orchestrator.context` code, driven the way `orchestrator/agent/loop.py` drives it
   (offload at insertion, todo and budget in a tail, bulk compaction at the high-water mark with a
   summary request appended to its own request, so the cache serves it, a TokenCounter calibrated on the
   previous request's true size).
2. drop-oldest: everything verbatim, the plan only in the history, and the oldest turns dropped
   while the request is over the window: a sliding window, which rewrites the prefix every step
   once it is full.
3. summarize@90%: everything verbatim; over 90% of the window the whole history is summarized into
   one message (one extra request, ~500 tokens out). `--summary-request` says how that request is
   sent. `fresh` (the default): the history as text under a summarizing prompt, as OpenHands'
   LLMSummarizingCondenser does; it shares no prefix with the agent's requests, so all of it is
   uncached input. `appended`: the summarizing instruction appended to the agent's own request, as
   Claude Code, Codex CLI and ml-intern do; the provider's cache serves its prefix, so the baseline
   costs less.

Every request is accounted like the scripted model does it (`canonical_prompt`, cl100k_base,
`PrefixCache`: cached = longest shared prefix in 128-token blocks, none under 1,024). Prices:
$3/M input, $0.30/M cached input, $15/M output.

The window defaults to 64k, not 128k: cairn keeps ~1k tokens of history per step here, so in 128k
it would compact about three times in 300 steps; 64k makes it compact several times (pointers and
written summaries both), which is the part worth measuring. 64k is also a real window (many open
models), and it is where verbatim policies hurt: one 40k build log fills most of it.

cairn's per-step overhead is the wall time of its context work (shaping the new results, building
the request, estimating, compacting), not the accounting: the median over steps 5-15 and over the
last ten steps, each step's time being the median of `--repeats` runs.

Information is kept equal by references back: 10% of the steps (`--rereads`, seeded apart from
the workload) need the content of an earlier observation, chosen uniformly. If it is not in the
request whole, the policy pays one extra step first: cairn a `file_read` of the file its pointer,
preview or summary names (the window of lines an offloaded output's preview invites, not all of a
30k-token log), the verbatim policies a re-run of the command (its whole output enters again).
Each extra step is a full request plus its result; both are counted, and logged apart.

`--workload real-shaped` plays a 150-step run shaped like real SWE-agent trajectories at a 32k
window (`make_real_shaped`), and adds a raw agent that keeps its whole history with no limit; it also
prints where each policy's tokens and cost go (`context_breakdown`: uncached new messages, tail,
compaction rewrites, cache-block rounding; cached prefix and history; summaries; answers).
`--trajectories FILE...` replays real published runs instead (bench/context_trajectories.py, the
formats in bench/trajectories.py) against the same raw agent, with the same breakdown.
`--sweep` measures the marks and the preview size over seeds and windows (bench/context_sweep.py).

`--say N` has the person speak N times in each run (`with_person`: short instructions at evenly spaced
steps, the same for every policy, the raw agent included), and cairn keeps their words word for word
through every compaction (context/person.py); `--keep-said off` compacts them like any message, as cairn
did before. `--vary-framing off` frames every result in the plain form (context/framing.py). `--compare`
runs cairn a second time in the same run with both off, and prints it beside (a column of its own on the
scripted workloads, a line `before: ...` on real runs).

A fourth run is cairn again with `--critic-every 10` (orchestrator/agent/critic.py: after every tenth step, a
critic request of the task, the plan and the last ten steps, answered in ~270 tokens, whose note enters
the next request's tail). Its figures are the line before the last:
    critic_every_10: cache_hit=<r> cost_vs_without=<r>
(cache hits over all its requests, the critic's included; its cost over cairn's without a critic.)

The last line is machine-readable:
    cache_hit=<r> peak_tokens=<n> cost_vs_summarize=<r> cost_vs_appended=<r> rereads=<n> overhead_300_vs_10=<r>
and on the real-shaped workload also ` compactions=<n> summaries=<n> cost_vs_raw=<r>`, after a line
`floor: ...` that prices what any policy keeping the last results whole must pay (`cost_floor`). (Peak over
all of cairn's requests, its summarize requests included; costs are cairn's over the summarize@90%
baseline's, fresh and appended, rereads included; overhead is the last ten steps' over steps 5-15's.)
Targets: cache_hit >= 0.9, peak under the window, cost_vs_summarize <= 0.5, cost_vs_appended <=
0.65, overhead ratio <= 1.5; on real-shaped, summaries at most half the compactions, cost_vs_raw <= 0.5.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import re
import statistics
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/context_bench.py` from anywhere: find `orchestrator`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# Deliberately no litellm (and so nothing from orchestrator.agent.loop or orchestrator.llm.client): it is
# slow to import and this bench needs none of it.
from orchestrator.config import ContextConfig, LimitsConfig  # noqa: E402
from orchestrator.context import (  # noqa: E402
    History,
    TokenCounter,
    build_request,
    canonical_json,
    compact,
    needs_compaction,
    render_tail,
    shape_assistant_message,
    shape_result,
)
from orchestrator.context.compaction import SUMMARY_DIR  # noqa: E402
from orchestrator.context.framing import frame_result, framing  # noqa: E402
from orchestrator.context.pointers import pointer_path  # noqa: E402
from orchestrator.context.offload import obs_path  # noqa: E402
from orchestrator.agent.critic import CRITIC_DIR, critic_request, tail_text  # noqa: E402
from orchestrator.events import CriticNote  # noqa: E402
from orchestrator.agent.guards import Totals, budget_notice  # noqa: E402
from orchestrator.llm.scripted import PrefixCache, canonical_prompt  # noqa: E402
from orchestrator.llm.tokenizer import count_tokens, encoding  # noqa: E402
from orchestrator.agent.prompts import system_prompt  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the bench's own modules, beside this file
from context_breakdown import Breakdown, table  # noqa: E402
from orchestrator.tools.specs import BUILTIN_TOOLS, canonical  # noqa: E402

Message = dict[str, Any]

PRICE_INPUT = 3.00 / 1e6
PRICE_CACHED = 0.30 / 1e6  # 10% of input, as Anthropic and OpenAI price cache reads
PRICE_OUTPUT = 15.00 / 1e6

DEFAULT_STEPS = 300
DEFAULT_WINDOW = 64_000
DEFAULT_SEED = 7
DEFAULT_REPEATS = 3

CAIRN_SUMMARY_TOKENS = 300  # what the scripted summarizer writes for cairn's compaction
CRITIC_TOKENS = 270  # the critic's answer: about 200 words
CRITIC_EVERY = 10  # the `--critic-every` of the run measured beside cairn's
BASELINE_SUMMARY_TOKENS = 500  # and for the summarize@90% baseline: it has more to cover
SUMMARIZE_AT = 0.90

SYSTEM = system_prompt()
TOOLS = canonical(BUILTIN_TOOLS)
TASK = (
    "The tidewater service (a Python package in /workspace, with a C extension for its parser) fails "
    "its test suite on Python 3.12 and its build emits warnings. Make the whole suite pass, remove the "
    "build warnings, and add tests for the retry logic in tidewater/retry.py. Keep the public API "
    "unchanged. When done, write a short CHANGES.md entry and call task_done."
)

BASELINE_SUMMARIZE_PROMPT = (
    "Summarize the conversation so far so that the agent can continue the task from the summary "
    "alone: the goal, what was done, files changed, errors met and their state, and the next steps."
)


# --- the workload ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One tool call of a turn and the observation it produced."""

    id: str
    name: str
    result: str
    error: bool


@dataclass(frozen=True)
class Turn:
    """One step of the scripted agent: its assistant message, then the observations."""

    step: int
    message: Message  # the assistant message as the model sent it (OpenAI format)
    calls: tuple[Call, ...]
    todo: str | None  # todo.md as it is when this step's request is built (before this turn)
    kind: str  # small / medium / large / failure: the size class of the step's main observation
    output_tokens: int  # completion tokens, counted like the scripted server (`_count_answer`)
    verbatim: tuple[Message, ...]  # the turn as the baselines keep it: no offload, no shaping
    verbatim_tokens: int  # raw cl100k tokens of `verbatim`, for the baselines' cheap estimates
    rereads: str | None = None  # an extra step: the id of the earlier call whose output it brings back
    said_after: str | None = None  # what the person says once this turn's results are in (`with_person`)

    @property
    def holds(self) -> frozenset[str]:
        """Ids of the calls whose whole output this turn carries (a reread carries an earlier one's)."""
        return frozenset([c.id for c in self.calls] + ([self.rereads] if self.rereads else []))

    def observation_tokens(self) -> int:
        return sum(count_tokens(call.result) for call in self.calls)


MODULES = [
    "parser", "lexer", "config", "cache", "scheduler", "storage", "http_client", "auth", "metrics",
    "cli", "models", "serializer", "retry", "queue", "worker", "plugins", "registry", "log_setup",
    "validators", "migrations",
]  # fmt: skip
VERBS = ["load", "parse", "flush", "resolve", "emit", "schedule", "retry", "encode", "decode", "validate",
         "register", "open", "close", "merge", "split", "render", "fetch", "apply", "collect", "drain"]
NOUNS = ["token", "buffer", "config", "record", "window", "handler", "session", "payload", "budget", "entry",
         "batch", "header", "cursor", "schema", "backoff", "shard", "lease", "snapshot", "index", "frame"]
ERRORS = [
    ("KeyError", "'retry_budget'"),
    ("TypeError", "unsupported operand type(s) for +: 'NoneType' and 'int'"),
    ("AttributeError", "'Session' object has no attribute 'lease_id'"),
    ("ValueError", "invalid literal for int() with base 10: 'auto'"),
    ("AssertionError", "assert 3 == 4"),
    ("ModuleNotFoundError", "No module named 'tidewater._cparser'"),
    ("RuntimeError", "event loop is closed"),
    ("json.decoder.JSONDecodeError", "Expecting ',' delimiter: line 1 column 88 (char 87)"),
]


class _Gen:
    """Deterministic, realistic-looking text: the same seed gives the same bytes."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    # small pieces
    def word(self, words: Sequence[str]) -> str:
        return self.rng.choice(words)

    def module(self) -> str:
        return self.word(MODULES)

    def path(self) -> str:
        return f"tidewater/{self.module()}.py"

    def test_path(self) -> str:
        return f"tests/test_{self.module()}.py"

    def func(self) -> str:
        return f"{self.word(VERBS)}_{self.word(NOUNS)}"

    def hexid(self, n: int = 12) -> str:
        return "".join(self.rng.choice("0123456789abcdef") for _ in range(n))

    def sentence(self) -> str:
        r = self.rng
        return r.choice([
            f"`{self.func()}` in {self.path()} does not handle an empty {self.word(NOUNS)}.",
            f"The failure comes from {self.path()} line {r.randint(10, 600)}, where the {self.word(NOUNS)} is reused.",
            f"I'll check how {self.func()} is called from {self.path()} before changing it.",
            f"{self.test_path()} expects the old {self.word(NOUNS)} format; the fixture needs updating.",
            f"The warning is about an unused `{self.word(NOUNS)}_len` in src/_cparser.c.",
            f"Next: run the {self.module()} tests again to confirm the fix.",
            f"This matches the traceback: `{self.func()}` returns None when the {self.word(NOUNS)} is stale.",
            f"Keeping the public signature of `{self.func()}` unchanged, as the task says.",
        ])  # fmt: skip

    def prose(self, sentences: int) -> str:
        return " ".join(self.sentence() for _ in range(sentences))

    # lines of the various outputs
    def code_line(self) -> str:
        r, f, n = self.rng, self.func(), self.word(NOUNS)
        arg_type = r.choice(["str", "int", "bytes", "Record", "dict[str, Any]"])
        return r.choice([
            f"def {f}(self, {n}: {arg_type}) -> {r.choice(['None', 'bool', 'int', 'Frame'])}:",
            f'    """{self.sentence()}"""',
            f"    if {n} is None:",
            f'        raise ValueError(f"{n} must not be empty: {{{n}!r}}")',
            f"    result = self._{n}s.get({n}.key, {r.choice(['None', '0', 'DEFAULT_' + n.upper()])})",
            "    return result",
            "",
            f"class {n.capitalize()}{r.choice(['Manager', 'Error', 'Pool', 'Reader', 'State'])}:",
            f"from tidewater.{self.module()} import {n.capitalize()}, {self.func()}",
            f"    for item in self.{n}s[{r.randint(0, 9)}:]:",
            f'        logger.debug("%s {self.word(VERBS)} %r", self.name, item)',
            f"        total += item.{n}_size * {r.randint(2, 64)}",
            f"    await self.{self.func()}(timeout={r.uniform(0.1, 30):.1f})",
        ])  # fmt: skip

    def ls_line(self) -> str:
        r = self.rng
        name = r.choice([self.path(), self.test_path(), "setup.py", "pyproject.toml", "src/_cparser.c", "README.md"])
        when = f"Mar {r.randint(1, 28):>2} {r.randint(0, 23):02d}:{r.randint(0, 59):02d}"
        return f"-rw-r--r-- 1 agent agent {r.randint(120, 48000):>6} {when} {name}"

    def build_line(self) -> str:
        r, mod, noun = self.rng, self.module(), self.word(NOUNS)
        where = f"src/{mod}.c:{r.randint(10, 900)}:{r.randint(1, 40)}"
        version = f"{r.randint(0, 9)}.{r.randint(0, 30)}.{r.randint(0, 9)}"
        return r.choice([
            f"[{r.randint(1, 100):3d}%] Building C object src/CMakeFiles/_cparser.dir/{mod}.c.o",
            f"gcc -pthread -O2 -g -Wall -fPIC -I/usr/include/python3.12 -Isrc -c src/{mod}.c "
            f"-o build/temp.linux-x86_64-cpython-312/src/{mod}.o",
            f"{where}: warning: unused variable '{noun}_len' [-Wunused-variable]",
            f"{where}: warning: comparison of integer expressions of different signedness: 'int' and 'size_t' "
            "[-Wsign-compare]",
            f"  Downloading {noun}lib-{version}-py3-none-any.whl ({r.randint(8, 900)} kB)",
            f"copying tidewater/{mod}.py -> build/lib.linux-x86_64-cpython-312/tidewater",
            f"Requirement already satisfied: {noun}lib>={r.randint(1, 5)}.0 in ./.venv/lib/python3.12/site-packages "
            f"(from tidewater==0.{r.randint(1, 9)}.0)",
            f"   {r.randint(1, 900):>4} |     {self.code_line().strip()}",
        ])  # fmt: skip

    def pytest_v_line(self) -> str:
        r = self.rng
        outcome = r.choices(["PASSED", "FAILED", "SKIPPED", "XFAIL"], [90, 5, 4, 1])[0]
        param = f"[{self.word(NOUNS)}-{r.randint(0, 99)}]" if r.random() < 0.4 else ""
        return f"{self.test_path()}::test_{self.func()}{param} {outcome} [{r.randint(0, 100):3d}%]"

    def pytest_q_line(self, path: str) -> str:
        return f"{path} {'.' * self.rng.randint(5, 40)} [{self.rng.randint(0, 100):3d}%]"

    def csv_line(self) -> str:
        r = self.rng
        when = f"2024-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}T{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:00Z"
        status = r.choice(["ok", "retry", "failed", "queued"])
        return f"{r.randint(10000, 99999)},{when},{self.word(NOUNS)},{r.uniform(0, 1000):.3f},{status},{self.hexid()}"

    def find_line(self) -> str:
        r = self.rng
        top = r.choice(["tidewater", "tests", "docs", "src", "build/lib"])
        return f"./{top}/{self.module()}/{self.func()}{r.choice(['.py', '.c', '.h', '.md', '.pyc'])}"

    def grep_line(self) -> str:
        return f"{self.path()}:{self.rng.randint(1, 800)}:{self.code_line()}"

    def diff_line(self) -> str:
        return self.rng.choice(["+", "-", " ", " ", " "]) + self.code_line()

    def traceback(self, frames: int) -> str:
        r = self.rng
        lines = ["Traceback (most recent call last):"]
        for _ in range(frames):
            lines += [f'  File "/workspace/{self.path()}", line {r.randint(5, 700)}, in {self.func()}',
                      f"    {self.code_line().strip() or 'return result'}"]  # fmt: skip
        kind, text = r.choice(ERRORS)
        lines.append(f"{kind}: {text}")
        return "\n".join(lines)

    def sized(self, line: Callable[[], str], tokens: int, head: Sequence[str] = (), foot: Sequence[str] = ()) -> str:
        """Lines of `line()` until the text is about `tokens` long (tokens per character measured once)."""
        sample = [line() for _ in range(40)]
        sample_text = "\n".join(sample)
        budget = int(tokens * len(sample_text) / max(1, count_tokens(sample_text)))
        lines, size = list(head) + sample, sum(len(s) + 1 for s in head) + len(sample_text)
        while size < budget:
            lines.append(line())
            size += len(lines[-1]) + 1
        while len(lines) > len(head) + 1 and size - len(lines[-1]) - 1 >= budget:  # the sample may overshoot
            size -= len(lines.pop()) + 1
        return "\n".join([*lines, *foot])

    def exit(self, code: int, low: float, high: float) -> str:
        """The footer shell_exec puts under every output (orchestrator/tools/builtin/shell_exec.py)."""
        return f"[exit code {code}, {self.rng.uniform(low, high):.1f} s]"


def _call(step: int, n: int, name: str, arguments: dict[str, Any]) -> Message:
    # The scripted server serializes arguments with sorted keys (`_answer`); so do we.
    function = {"name": name, "arguments": json.dumps(arguments, sort_keys=True)}
    return {"id": f"call_{step}_{n}", "type": "function", "function": function}


@dataclass(frozen=True)
class Action:
    tool: str
    arguments: dict[str, Any]
    observation: str
    failed: bool = False


def _shell(command: str, output: str, failed: bool = False) -> Action:
    return Action("shell_exec", {"command": command}, output, failed)


def _small(g: _Gen) -> Action:
    """50-400 tokens: listings, short test runs, edits, writes (whose size is in the call, not the result)."""
    r = g.rng
    tokens = r.randint(50, 400)
    choice = r.choice(["ls", "pytest", "edit", "write", "grep", "git"])
    if choice == "ls":
        listing = g.sized(g.ls_line, tokens, [f"total {r.randint(40, 900)}"], [g.exit(0, 0, 0.2)])
        return _shell(f"ls -la {r.choice(['tidewater', 'tests', 'src', '.'])}", listing)
    if choice == "pytest":
        path = g.test_path()
        foot = [f"{'=' * 20} {r.randint(5, 60)} passed in {r.uniform(0.2, 9):.2f}s {'=' * 20}", g.exit(0, 0.5, 10)]
        return _shell(f"python -m pytest {path} -q", g.sized(lambda: g.pytest_q_line(path), tokens, [], foot))
    if choice == "edit":
        path = g.path()
        old = "\n".join(g.code_line() for _ in range(r.randint(1, 6)))
        new = "\n".join(g.code_line() for _ in range(r.randint(1, 10)))
        result = f"edited {path} ({r.randint(800, 40000)} bytes now)"
        return Action("file_edit", {"path": path, "old": old, "new": new}, result)
    if choice == "write":
        path = r.choice([g.test_path(), g.path(), "CHANGES.md", "scripts/check.sh"])
        content = g.sized(g.code_line, r.randint(300, 1500))
        result = f"wrote {len(content.encode())} bytes to {path}"
        return Action("file_write", {"path": path, "content": content}, result)
    if choice == "grep":
        return _shell(f"grep -rn '{g.func()}' tidewater tests", g.sized(g.grep_line, tokens, [], [g.exit(0, 0, 0.3)]))
    status = g.sized(lambda: f" M {g.path()}", tokens, [], [g.exit(0, 0, 0.3)])
    return _shell("git status --short && git diff --stat", status)


def _medium(g: _Gen) -> Action:
    """1-3k tokens: a source file, a diff, a wide grep, one test module verbose."""
    r = g.rng
    tokens = r.randint(1000, 3000)
    choice = r.choice(["read", "diff", "grep", "pytest"])
    if choice == "read":
        return Action("file_read", {"path": g.path()}, g.sized(g.code_line, tokens))
    if choice == "diff":
        path = g.path()
        hunk = f"@@ -{r.randint(1, 400)},{r.randint(5, 40)} +{r.randint(1, 400)},{r.randint(5, 40)} @@"
        head = [f"diff --git a/{path} b/{path}", f"index {g.hexid(7)}..{g.hexid(7)} 100644", f"--- a/{path}",
                f"+++ b/{path}", hunk]  # fmt: skip
        return _shell(f"git diff {path}", g.sized(g.diff_line, tokens, head, [g.exit(0, 0, 0.3)]))
    if choice == "grep":
        return _shell(f"grep -rn '{g.word(NOUNS)}' tidewater", g.sized(g.grep_line, tokens, [], [g.exit(0, 0, 0.5)]))
    report = g.sized(g.pytest_v_line, tokens, [], [g.exit(0, 1, 20)])
    return _shell(f"python -m pytest {g.test_path()} -v", report)


def _large(g: _Gen) -> Action:
    """8-40k tokens: a build log, `pytest -v` of the whole suite, a data file, a tree listing."""
    r = g.rng
    tokens = r.randint(8000, 40000)
    choice = r.choice(["build", "pytest", "dump", "find"])
    if choice == "build":
        foot = ["Successfully installed tidewater-0.4.0", g.exit(0, 20, 200)]
        return _shell("pip install -e . -v 2>&1", g.sized(g.build_line, tokens, ["Obtaining file:///workspace"], foot))
    if choice == "pytest":
        counts = f"{r.randint(1, 9)} failed, {r.randint(800, 3000)} passed, {r.randint(0, 40)} skipped"
        foot = [f"{'=' * 20} {counts} in {r.uniform(30, 400):.2f}s {'=' * 20}", g.exit(1, 30, 400)]
        head = [f"{'=' * 29} test session starts {'=' * 30}"]
        return _shell("python -m pytest -v", g.sized(g.pytest_v_line, tokens, head, foot), failed=True)
    if choice == "dump":
        data = g.sized(g.csv_line, tokens, ["id,ts,kind,value,status,digest"], [g.exit(0, 0, 0.5)])
        return _shell("cat tests/data/events.csv", data)
    return _shell("find . -type f", g.sized(g.find_line, tokens, [], [g.exit(0, 0.2, 2)]))


def _failure(g: _Gen) -> Action:
    """Non-zero exits: a traceback, a missing command, failing tests, a build error."""
    r = g.rng
    choice = r.choices(["traceback", "not_found", "pytest", "build"], [45, 15, 30, 10])[0]
    if choice == "traceback":
        command = f"python -m tidewater.cli {g.word(VERBS)} --{g.word(NOUNS)} auto"
        return _shell(command, g.traceback(r.randint(3, 25)) + "\n" + g.exit(1, 0.2, 3), failed=True)
    if choice == "not_found":
        tool = r.choice(["cmake", "clang-format", "mypy", "ruff"])
        return _shell(f"{tool} .", f"bash: line 1: {tool}: command not found\n{g.exit(127, 0, 0.1)}", failed=True)
    if choice == "pytest":
        blocks = [f"{'_' * 20} test_{g.func()} {'_' * 20}\n{g.traceback(r.randint(2, 8))}"
                  for _ in range(r.randint(2, 6))]  # fmt: skip
        summary = [f"FAILED {g.test_path()}::test_{g.func()} - {r.choice(ERRORS)[0]}" for _ in blocks]
        report = g.sized(g.pytest_v_line, r.randint(300, 1200), [], [*blocks, *summary, g.exit(1, 1, 30)])
        return _shell(f"python -m pytest {g.test_path()} -x -v", report, failed=True)
    errors = [
        f"src/{g.module()}.c:{r.randint(10, 900)}:{r.randint(1, 40)}: error: '{g.word(NOUNS)}_t' undeclared "
        "(first use in this function)",
        "error: command '/usr/bin/gcc' failed with exit code 1",
        "ERROR: Failed building editable for tidewater",
    ]
    log = g.sized(g.build_line, r.randint(8000, 15000), ["Obtaining file:///workspace"], [*errors, g.exit(1, 20, 90)])
    return _shell("pip install -e . -v 2>&1", log, failed=True)


ACTIONS: dict[str, Callable[[_Gen], Action]] = {
    "small": _small, "medium": _medium, "large": _large, "failure": _failure,
}  # fmt: skip
MIX = {"small": 52, "medium": 24, "large": 12, "failure": 12}  # percent of steps, by main observation


def _todo(g: _Gen, step: int, items: list[str]) -> str:
    """todo.md: the goal, a checklist with the first items done as the run advances, what was learned."""
    done = min(len(items) - 1, step // 25)
    lines = ["# Goal", TASK.split(". ")[0] + ".", "", "## Plan"]
    lines += [f"- [{'x' if i < done else ' '}] {item}" for i, item in enumerate(items)]
    lines += ["", "## Learned", *(f"- {g.sentence()}" for _ in range(g.rng.randint(3, 8)))]
    return "\n".join(lines) + "\n"


def make_workload(steps: int, seed: int) -> list[Turn]:
    """The scripted run: the same `(steps, seed)` always gives the same turns, byte for byte."""
    g = _Gen(seed)
    r = g.rng
    verbs = ["Fix", "Check", "Test", "Refactor", "Document"]
    items = [f"{r.choice(verbs)} {g.func()} in {g.path()}" for _ in range(14)]
    todo: str | None = None
    next_todo = 1  # agents write the plan first
    turns: list[Turn] = []
    for step in range(1, steps + 1):
        kind = r.choices(list(MIX), list(MIX.values()))[0]
        actions: list[Action] = []
        new_todo = None
        if step == next_todo:
            new_todo = _todo(g, step, items)
            result = f"todo.md updated ({len(new_todo.encode())} bytes)"
            actions.append(Action("todo_write", {"content": new_todo}, result))
            next_todo = step + r.randint(8, 12)
        actions.append(ACTIONS[kind](g))
        content = g.prose(r.randint(1, 5))
        tool_calls = [_call(step, n, a.tool, a.arguments) for n, a in enumerate(actions)]
        message = {"role": "assistant", "content": content, "tool_calls": tool_calls}
        calls = tuple(Call(c["id"], a.tool, a.observation, a.failed) for c, a in zip(tool_calls, actions))
        verbatim = (message, *({"role": "tool", "tool_call_id": c.id, "content": c.result} for c in calls))
        # Completion tokens as the scripted server counts them: content, then each call's name and arguments.
        answer = content + "".join(c["function"]["name"] + c["function"]["arguments"] for c in tool_calls)
        raw = sum(count_tokens(canonical_json(m)) for m in verbatim)
        turns.append(Turn(step, message, calls, todo, kind, count_tokens(answer), verbatim, raw))
        todo = new_todo or todo
    return turns


# --- the real-shaped workload ---------------------------------------------------------------------

# Shapes measured on six long public SWE-agent-style runs (115-188 steps) replayed through cairn's
# pipeline (issue 13): observations with a median of 250-800 characters, a 90th percentile near
# 2,200 and almost none above 8,000; the assistant's own text (reasoning and commands) 600-1,400
# characters a step on average, as big as the observations.
REAL_STEPS = 150
REAL_WINDOW = 32_768
REAL_OBS_P90 = 2_200
REAL_OBS_MAX = 12_000  # the lognormal's far tail, cut: "almost none above 8,000"
Z90 = 1.2816  # the standard normal's 90th percentile


def make_real_shaped(steps: int, seed: int) -> list[Turn]:
    """A run with the shapes of real trajectories: the same `(steps, seed)` gives the same turns.

    Per run, the median observation (250-800 characters) and the mean assistant text (600-1,400
    characters a step) are drawn from the seed; per step, the observation's size is lognormal with
    that median and a 90th percentile of 2,200, and the assistant's text is lognormal around its
    mean. One call a step (a shell command, a file read or an edit), a tenth of them failing, no
    todo.md (SWE-agent keeps none).
    """
    g = _Gen(seed)
    r = g.rng
    median = r.uniform(250, 800)
    sigma = math.log(REAL_OBS_P90 / median) / Z90
    mean_text = r.uniform(600, 1400)
    text_sigma = 0.5
    text_median = mean_text / math.exp(text_sigma**2 / 2)  # a lognormal's mean is median * e^(sigma^2/2)
    turns: list[Turn] = []
    for step in range(1, steps + 1):
        size = max(20, min(REAL_OBS_MAX, round(r.lognormvariate(math.log(median), sigma))))
        failed = r.random() < 0.10
        budget = round(r.lognormvariate(math.log(text_median), text_sigma))
        kind = r.choice(["shell", "shell", "read", "edit"])
        if failed:
            arguments = {"command": f"python -m pytest {g.test_path()} -x -q"}
            tool, body = "shell_exec", g.traceback(r.randint(2, 30)) + "\n" + g.exit(1, 0.2, 9)
        elif kind == "read":
            arguments = {"path": g.path()}
            tool, body = "file_read", "\n".join(f"{n:>4}  {g.code_line()}" for n in range(1, 400))
        elif kind == "edit":
            old = "\n".join(g.code_line() for _ in range(r.randint(1, 8)))
            new = "\n".join(g.code_line() for _ in range(r.randint(1, 12)))
            arguments = {"path": g.path(), "old": old, "new": new}
            tool, body = "file_edit", "\n".join(f"{n:>4}  {g.code_line()}" for n in range(1, 400))
        else:
            arguments = {"command": r.choice([f"grep -rn '{g.func()}' tidewater tests", f"ls -la {g.module()}",
                                              f"python -m pytest {g.test_path()} -q", f"git diff {g.path()}",
                                              f"sed -n '{r.randint(1, 300)},+40p' {g.path()}"])}
            line = r.choice([g.grep_line, g.ls_line, g.diff_line, g.code_line, g.find_line])
            tool, body = "shell_exec", "\n".join(line() for _ in range(size // 20 + 2))
        observation = _cut_lines(body, size)
        # The assistant's text a step: the reasoning in `content`, plus the call's arguments.
        spent = len(json.dumps(arguments, sort_keys=True))
        content = g.prose(1)
        while len(content) + 40 < budget - spent:  # 40: half a sentence, so the mean lands on the budget
            content += " " + g.sentence()
        call = _call(step, 0, tool, arguments)
        message = {"role": "assistant", "content": content, "tool_calls": [call]}
        calls = (Call(call["id"], tool, observation, failed),)
        verbatim = (message, {"role": "tool", "tool_call_id": call["id"], "content": observation})
        answer = content + tool + call["function"]["arguments"]
        raw = sum(count_tokens(canonical_json(m)) for m in verbatim)
        size_class = "failure" if failed else "small" if size < 1000 else "medium" if size < 8000 else "large"
        turns.append(Turn(step, message, calls, None, size_class, count_tokens(answer), verbatim, raw))
    return turns


def trajectory_turns(steps: Sequence[tuple[Message, Sequence[tuple[str, str, str, bool]]]]) -> list[Turn]:
    """A real run's steps (`trajectories.Trajectory.steps`) as turns, shaped for the bench like the others."""
    turns: list[Turn] = []
    for step, (message, results) in enumerate(steps, start=1):
        calls = tuple(Call(id, name, text, failed) for id, name, text, failed in results)
        verbatim = (message, *({"role": "tool", "tool_call_id": c.id, "content": c.result} for c in calls))
        answer = str(message.get("content") or "") + "".join(
            c["function"]["name"] + c["function"]["arguments"] for c in message.get("tool_calls") or [])
        size = max((len(c.result) for c in calls), default=0)
        kind = "failure" if any(c.error for c in calls) else "small" if size < 1000 else "medium" if size < 8000 \
            else "large"
        raw = sum(count_tokens(canonical_json(m)) for m in verbatim)
        turns.append(Turn(step, message, calls, None, kind, count_tokens(answer), verbatim, raw))
    return turns


def _cut_lines(text: str, chars: int) -> str:
    """The first `chars` characters of `text`, ending at a line's end where one is near."""
    if len(text) <= chars:
        return text
    cut = text.rfind("\n", 0, chars)
    return text[: cut if cut > chars // 2 else chars]


# --- references back: a step that needs an earlier observation again ------------------------------

REREAD_RATE = 0.10  # of the steps (after the first), chosen with their own seeded generator


PERSON = ["Keep the public API exactly as it is.", "Run the whole test suite before you call it done.",
          "Do not add new dependencies; the standard library is enough.", "Write the CHANGELOG entry last.",
          "The failing test on Python 3.12 matters most; start there.", "Leave the vendored code alone.",
          "Use the existing fixtures in conftest.py rather than new ones.", "Keep each commit small and focused."]


def with_person(turns: Sequence[Turn], count: int, seed: int) -> list[Turn]:
    """The turns with the person speaking `count` times (`Turn.said_after`), at evenly spaced steps between a
    tenth and nine tenths of the run: one to four instructions each, drawn with their own generator, so the
    turns stay as they were. The baselines get each message in the turn's verbatim messages too."""
    rng = random.Random(f"person-{seed}")
    turns = list(turns)
    if not count or len(turns) < 3:
        return turns
    places = sorted({min(len(turns) - 2, max(0, round(len(turns) * (0.1 + 0.8 * i / max(1, count - 1)))))
                     for i in range(count)})
    for i in places:
        text = " ".join(rng.sample(PERSON, rng.randint(1, 4)))
        said = {"role": "user", "content": text}
        turn = turns[i]
        turns[i] = Turn(turn.step, turn.message, turn.calls, turn.todo, turn.kind, turn.output_tokens,
                        (*turn.verbatim, said), turn.verbatim_tokens + count_tokens(canonical_json(said)),
                        turn.rereads, text)
    return turns


def make_references(turns: Sequence[Turn], seed: int, rate: float = REREAD_RATE) -> dict[int, Call]:
    """Which steps need the content of an earlier observation, and which: step -> that call.

    `rate` of the steps after the first, each needing the main observation of an earlier step chosen
    uniformly (no recency bias: recent results stay whole under every policy, so a bias would only
    flatter the policies that forget more). Its own generator, so the turns stay byte for byte as
    `make_workload` made them.
    """
    rng = random.Random(f"references-{seed}")
    later = [turn.step for turn in turns[1:]]
    needing = sorted(rng.sample(later, round(rate * len(later)))) if later else []
    # A step that ran no command (a real run's format error) has no observation to need.
    return {step: rng.choice([t for t in turns[: step - 1] if t.calls] or turns[:1]).calls[-1] for step in needing
            if any(t.calls for t in turns[: step - 1])}


def _reread_turn(turn: Turn, source: Call, tool: str, arguments: dict[str, Any], result: str, say: str) -> Turn:
    """The extra step a policy pays before `turn` to get `source`'s output back: one call, one result."""
    call_id = f"call_{turn.step}_reread"
    function = {"name": tool, "arguments": json.dumps(arguments, sort_keys=True)}
    message = {"role": "assistant", "content": say, "tool_calls": [{"id": call_id, "type": "function",
                                                                    "function": function}]}
    call = Call(call_id, tool, result, False)
    verbatim = (message, {"role": "tool", "tool_call_id": call_id, "content": result})
    output = count_tokens(say + tool + function["arguments"])
    raw = sum(count_tokens(canonical_json(m)) for m in verbatim)
    return Turn(turn.step, message, (call,), turn.todo, "reread", output, verbatim, raw, rereads=source.id)


def rerun_turn(turn: Turn, source: Call, turns_by_call: dict[str, tuple[Turn, dict[str, Any]]]) -> Turn:
    """A verbatim policy's extra step: the command that produced `source` runs again, whole output and all."""
    original, call = turns_by_call[source.id]
    arguments = json.loads(call["function"]["arguments"])
    say = f"I need the output of step {original.step} again; it is no longer in my context, so I run it again."
    return _reread_turn(turn, source, source.name, arguments, source.result, say)


def read_back_turn(turn: Turn, source: Call, step: int, path: str, max_tokens: int) -> Turn:
    """cairn's extra step: a `file_read` of the file the pointer (or preview, or summary) names.

    An output bigger than cairn's offload threshold is read a window at a time, as the preview says:
    the read brings back the window of lines around the middle that fits the threshold (the part
    needed), not all of a 30k-token log.
    """
    text = source.result
    arguments: dict[str, Any] = {"path": path}
    if count_tokens(text) > max_tokens:
        lines = text.split("\n")
        budget, middle = max_tokens * 3, len(lines) // 2  # ~3 characters a token in logs: stays under
        start = end = middle
        size = 0
        while end < len(lines) and size + len(lines[end]) + 1 <= budget:
            size += len(lines[end]) + 1
            end += 1
            if start > 0 and size + len(lines[start - 1]) + 1 <= budget:
                start -= 1
                size += len(lines[start]) + 1
        text = "\n".join(lines[start:end])
        arguments |= {"offset": start + 1, "limit": end - start}
    say = f"I need the output of step {step} again; reading it back from {path}."
    return _reread_turn(turn, source, "file_read", arguments, text, say)


def calls_by_id(turns: Sequence[Turn]) -> dict[str, tuple[Turn, dict[str, Any]]]:
    return {call["id"]: (turn, call) for turn in turns for call in turn.message.get("tool_calls") or []}


def summary_text(messages: Sequence[Message], tokens: int, seed: str) -> str:
    """A deterministic stand-in for a model-written summary of `messages`, about `tokens` long.

    It names the files the span touched, like a real summary would, then fills up to size with
    varied sentences (a repeated filler would compress to too few tokens to be realistic).
    """
    paths: set[str] = set()
    for m in messages:
        for call in m.get("tool_calls") or []:
            paths.update(re.findall(r"(?:tidewater|tests|src)/[\w/.-]+", call["function"]["arguments"]))
    g = _Gen(int(hashlib.sha1(seed.encode()).hexdigest()[:8], 16))
    parts = [f"Worked through {len(messages)} messages. Files touched: {', '.join(sorted(paths)[:15]) or 'none'}."]
    size = len(parts[0])
    while size < tokens * 4:  # ~4 characters a token for prose; counted exactly afterwards
        parts.append(g.sentence())
        size += len(parts[-1]) + 1
    return " ".join(parts)


# --- accounting ------------------------------------------------------------------------------------


_PIECES: dict[str, list[int]] = {}


def _piece(text: str) -> list[int]:
    tokens = _PIECES.get(text)
    if tokens is None:
        tokens = _PIECES[text] = encoding().encode(text, disallowed_special=())
    return tokens


def prompt_tokens_of(messages: list[Message], tools: list[dict[str, Any]]) -> list[int]:
    """The request's tokens as the scripted server counts them, up to the seams between messages.

    The text is `canonical_prompt`'s, byte for byte; it is tokenized a message at a time (each
    message's tokens memoized), so a request of 100k tokens costs a lookup per message, not a
    tokenization of all of it. BPE may merge across a seam (`},{`), so a request can count a token
    or so per message more than the server would: the same for every policy, and it is what makes
    the sweep affordable on a shared 2-core machine.
    """
    return prompt_spans(messages, tools)[0]


def prompt_spans(messages: list[Message], tools: list[dict[str, Any]]
                 ) -> tuple[list[int], list[str], list[tuple[int, int]]]:
    """`prompt_tokens_of`, with each message's serialization and its tokens' [start, end) in the request."""
    dump = lambda value: json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)  # noqa: E731
    tokens = list(_piece(dump(tools))) + _piece("[")
    serialized, spans = [], []
    for i, message in enumerate(messages):
        if i:
            tokens += _piece(",")
        serialized.append(dump(message))
        start = len(tokens)
        tokens += _piece(serialized[-1])
        spans.append((start, len(tokens)))
    tokens += _piece("]")
    return tokens, serialized, spans


@dataclass
class Ledger:
    """Usage of one policy's requests, as the scripted server reports it, and their cost."""

    name: str
    cache: PrefixCache = field(default_factory=PrefixCache)
    requests: int = 0
    prompt: int = 0
    cached: int = 0
    output: int = 0
    peak: int = 0  # the largest request the agent itself sent
    peak_summarize: int = 0  # the largest summarize request
    summaries: int = 0
    compactions: int = 0
    summarize_prompt: int = 0  # of `prompt`, `cached` and `output`: what the summarize requests took
    summarize_cached: int = 0
    summarize_output: int = 0
    rereads: int = 0  # extra steps paid to get an earlier observation back (a read, or a re-run)
    reread_cost: float = 0.0  # what those extra requests cost (their results' later reads are not in it)
    critics: int = 0  # critic requests (--critic-every), in `requests`, `prompt`, `cached` and `output`
    _last_cached: int = 0  # the cache hit of the last `account`
    new_messages: int = 0  # history messages appended since the last request: the policy sets it before each
    breakdown: Breakdown = field(default_factory=lambda: Breakdown(PRICE_INPUT, PRICE_CACHED, PRICE_OUTPUT))

    def account(self, tokens: list[int], output_tokens: int, reread: bool = False) -> int:
        """One agent request: its prefix is looked up in, then stored into, the shared cache."""
        cached = self.cache.lookup(tokens)
        self.cache.store(tokens)
        self._last_cached = cached
        self._add(len(tokens), cached, output_tokens)
        self.peak = max(self.peak, len(tokens))
        if reread:
            self.rereads += 1
            self.reread_cost += (len(tokens) - cached) * PRICE_INPUT + cached * PRICE_CACHED + output_tokens * PRICE_OUTPUT
        return len(tokens)

    def account_request(self, messages: list[Message], tools: list[dict[str, Any]], output_tokens: int,
                        reread: bool = False, tail: bool = True) -> int:
        """`account`, with the request's tokens attributed to the `breakdown`'s categories (`tail`: its last
        message is a status tail)."""
        tokens, serialized, spans = prompt_spans(messages, tools)
        self.account(tokens, output_tokens, reread)
        self.breakdown.add(serialized, spans, len(tokens), self._last_cached, output_tokens, self.new_messages, tail)
        return len(tokens)

    def account_summary(self, messages: list[Message], output_tokens: int,
                        tools: list[dict[str, Any]] | None = None, from_cache: bool = False) -> int:
        """One summarize request. One with a prompt of its own shares no prefix with the agent's requests, so
        all of it is uncached input; one that extends the agent's request (`from_cache`: cairn's, and the
        appended baseline's) is looked up in the cache."""
        tokens = prompt_tokens_of(messages, tools or [])
        cached = self.cache.lookup(tokens) if from_cache else 0
        self._add(len(tokens), cached, output_tokens)
        self.peak_summarize = max(self.peak_summarize, len(tokens))
        self.breakdown.add_summary(len(tokens), cached, output_tokens)
        self.summaries += 1
        self.summarize_prompt += len(tokens)
        self.summarize_cached += cached
        self.summarize_output += output_tokens
        return len(tokens)

    def account_critic(self, messages: list[Message], output_tokens: int) -> None:
        """One critic request (orchestrator/agent/critic.py): looked up in the cache like any request; only
        its instructions and the task can be a shared prefix."""
        tokens = prompt_tokens_of(messages, [])
        cached = self.cache.lookup(tokens)
        self.cache.store(tokens)
        self._add(len(tokens), cached, output_tokens)
        self.critics += 1

    def _add(self, prompt: int, cached: int, output: int) -> None:
        self.requests += 1
        self.prompt += prompt
        self.cached += cached
        self.output += output

    @property
    def cache_hit(self) -> float:
        return self.cached / self.prompt if self.prompt else 0.0

    @property
    def cost_uncached(self) -> float:
        return (self.prompt - self.cached) * PRICE_INPUT

    @property
    def cost_cached(self) -> float:
        return self.cached * PRICE_CACHED

    @property
    def cost_output(self) -> float:
        return self.output * PRICE_OUTPUT

    @property
    def cost_summarize(self) -> float:
        uncached = self.summarize_prompt - self.summarize_cached
        return uncached * PRICE_INPUT + self.summarize_cached * PRICE_CACHED + self.summarize_output * PRICE_OUTPUT

    @property
    def cost(self) -> float:
        return self.cost_uncached + self.cost_cached + self.cost_output


# --- policy 1: cairn -------------------------------------------------------------------------------


@dataclass
class StepTime:
    """Wall time of one step's context work, by part (seconds). The accounting is not in it."""

    build: float = 0.0  # tail, request, estimate (twice, as prepare() and _call() each estimate)
    compact: float = 0.0  # compact() and the rebuild after it, minus the summarizer's own time
    shape: float = 0.0  # calibrate, then shape and append the assistant message and the results
    compacted: bool = False
    entries: int = 0  # history messages when the request was built: what O(history) work scales with

    @property
    def total(self) -> float:
        return self.build + self.compact + self.shape


class _Summarizer:
    """The `summarize` callback: scripted text, its request kept for accounting after the timed part."""

    def __init__(self) -> None:
        self.requests: list[list[Message]] = []
        self.texts: list[str] = []
        self.elapsed = 0.0  # stands for a model call, so it is taken out of the context work

    def __call__(self, messages: list[Message]) -> str:
        started = time.perf_counter()
        text = summary_text(messages, CAIRN_SUMMARY_TOKENS, f"cairn-{len(self.requests)}")
        self.requests.append(messages)
        self.texts.append(text)
        self.elapsed += time.perf_counter() - started
        return text


# `send(step, messages, tools, output_tokens, reread) -> prompt tokens`: the model call, as far as the
# bench needs one. The accounted run tokenizes and caches; the timing repeats look the size up.
Send = Callable[[int, list[Message], list[dict[str, Any]], int, bool], int]


def run_cairn(turns: Sequence[Turn], window: int, send: Send, ledger: Ledger | None,
              cfg: ContextConfig | None = None, references: dict[int, Call] | None = None,
              critic_every: int | None = None, task: str = TASK, seed: int = DEFAULT_SEED,
              keep_said: bool = True) -> list[StepTime]:
    """Drive the real context engine the way the loop does; return each step's context-work time.

    Each result is framed as the loop frames it (context/framing.py, by `seed` and its number in the run);
    the person's words (`Turn.said_after`) are kept through compaction unless `keep_said` is false.

    Before a step that needs an earlier observation (`references`) which is not in the request
    whole, one extra step reads it back (`read_back_turn`), through the same path as any step.
    With `critic_every`, after every that many steps the critic's request (orchestrator/agent/critic.py)
    is accounted, and its ~200-word note goes into the next request's tail, once.
    """
    cfg = cfg or ContextConfig()
    references = references or {}
    counter = TokenCounter(count_tokens)
    history = History(counter)
    files: dict[str, str] = {}  # the workspace, as far as offload and compaction write to it
    summarizer = _Summarizer()
    limits = LimitsConfig(max_steps=len(turns))
    holders: dict[str, list[str]] = {}  # call id -> history ids of the results that carried its output whole
    originals: dict[str, str] = {}  # what each pointer must resolve to (`check_pointers`)
    turns_played: list[Turn] = []
    ids = 0
    summaries = 0
    times: list[StepTime] = []
    played = 0  # steps, reread steps included: the loop's step counter
    results = 0  # tool results so far: the number of the next one, which picks its framing
    note: CriticNote | None = None

    def whole(call: Call) -> bool:
        return any(_whole_in(history, id) for id in holders.get(call.id, ()))

    def read_back(turn: Turn, source: Call) -> Turn:
        entries = [history.get(id) for id in holders[source.id] if _in(history, id)]
        path = next((e.offloaded_to or pointer_path(e.content) for e in entries
                     if e.offloaded_to or pointer_path(e.content)), None)
        step = entries[0].step if entries else turn.step
        path = path or (f"{SUMMARY_DIR}/{summaries:03d}.md" if summaries else obs_path(step, source.name))
        return read_back_turn(turn, source, step, path, cfg.offload_tokens)

    for turn in _with_rereads(turns, references, whole, read_back):
        t = StepTime(entries=len(history))
        # prepare(): the tail, the request, the estimate, and a compaction above the high-water mark
        started = time.perf_counter()
        tail = render_tail(turn.todo, [budget_notice(limits, Totals(), turn.step)], None,
                           tail_text(note) if note else None)
        note = None
        request = build_request(SYSTEM, TOOLS, task, history, tail)
        over = needs_compaction(counter.estimate(request), window, cfg, round(history.growth() * counter.ratio))
        t.build = time.perf_counter() - started
        if over:
            started, before = time.perf_counter(), summarizer.elapsed
            event = compact(history, window=window, cfg=cfg, save=files.__setitem__, summarize=summarizer,
                            step=turn.step, next_summary_number=summaries + 1,
                            overhead_tokens=counter.overhead(request), counter=counter,
                            prefix=request.messages[:2])
            summaries += event.kind == "summary"
            request = build_request(SYSTEM, TOOLS, task, history, tail)
            t.compact = time.perf_counter() - started - (summarizer.elapsed - before)
            t.compacted = True
            if ledger is not None:
                ledger.compactions += 1
        started = time.perf_counter()
        estimated = counter.estimate(request)  # _call() estimates again, for the calibration
        t.build += time.perf_counter() - started

        # the model call (not timed): accounting, and summaries made by this step's compaction
        if ledger is not None:
            last = turns_played[-1] if turns_played else None
            ledger.new_messages = 1 + len(last.calls) + bool(last.said_after) if last else 0
        prompt = send(turn.step, request.messages, request.tools, turn.output_tokens, turn.rereads is not None)
        if ledger is not None:
            # The request compaction built (`summary_request`): this step's, instruction appended.
            for summary_request, text in zip(summarizer.requests, summarizer.texts):
                ledger.account_summary(summary_request, count_tokens(text), TOOLS, from_cache=True)
        summarizer.requests.clear()
        summarizer.texts.clear()

        # the reply and its observations enter the history (RunState._on_assistant_message, loop.finish)
        started = time.perf_counter()
        counter.calibrate(prompt, estimated)
        message = shape_assistant_message(turn.message, cfg.offload_tokens, counter.count_text)
        ids += 1
        history.append(f"e{ids}", message, turn.step, kind="assistant")
        seen: set[str] = set()
        for call in turn.calls:
            # as Agent.step labels a repeated tool; a reread is a second turn of its step, so labelled too
            label = call.id if call.name in seen or turn.rereads else None
            seen.add(call.name)
            form = framing(seed, results, cfg.vary_framing)
            results += 1
            shaped = shape_result(turn.step, call.name, call.result, cfg=cfg, count=counter.count_text,
                                  save=files.__setitem__, call_id=label)
            content = frame_result(shaped.content, "", call.name, form, shaped.offloaded_to)
            ids += 1
            history.append(f"e{ids}", {"role": "tool", "tool_call_id": call.id, "content": content},
                           turn.step, kind="tool", tool=call.name, call_id=call.id, error=call.error,
                           offloaded_to=shaped.offloaded_to)
            holders.setdefault(turn.rereads or call.id, []).append(f"e{ids}")
            # What a pointer's file must hold: the whole output when it was offloaded, else the result as
            # the context held it (framed).
            originals[call.id] = call.result if shaped.offloaded_to else content
        if turn.said_after:  # the person's message, delivered before the next request (loop.take_messages)
            ids += 1
            history.append(f"e{ids}", {"role": "user", "content": turn.said_after}, turn.step, kind="user",
                           said=turn.said_after if keep_said else None)
        t.shape = time.perf_counter() - started
        turns_played.append(turn)
        times.append(t)
        played += 1
        originals[turn.message.get("tool_calls", [{}])[0].get("id", "") + "/text"] = str(turn.message.get("content") or "")
        if critic_every and played % critic_every == 0 and ledger is not None:
            recent = [e.message for e in history if e.step > turn.step - critic_every]
            text = summary_text(recent, CRITIC_TOKENS, f"critic-{played}")
            ledger.account_critic(critic_request(task, turn.todo, recent, critic_every), count_tokens(text))
            note = CriticNote(step=played, text=text, path=f"{CRITIC_DIR}/{played:03d}.md", model="bench", usage={})
    check_pointers(history, files, originals)
    return times


def check_pointers(history: History, files: dict[str, str], originals: dict[str, str]) -> None:
    """Every pointer left in the history names a saved file holding what it replaced, byte for byte.

    `originals` maps a call id to its result as the tool returned it (as the context held it, framed, when
    it was not offloaded), and `<call id>/text` to the assistant's text of that call's message. Raises
    AssertionError naming the first that does not resolve.
    """
    for entry in history:
        if entry.kind in ("summary", "digest"):
            path = re.search(r"(/cairn/summaries/\S+\.md)", entry.content)
            assert path and path.group(1) in files, f"{entry.id}: its file is not saved"
        elif entry.kind == "tool" and (entry.pointer or entry.offloaded_to):
            path = entry.offloaded_to or pointer_path(entry.content)
            assert path in files and files[path] == originals.get(entry.call_id or ""), f"{entry.id}: {path}"
        elif entry.kind == "assistant" and entry.pointer and entry.content.startswith("[your text of step"):
            path = pointer_path(entry.content)
            calls = entry.message.get("tool_calls") or [{}]
            assert path in files and files[path] == originals.get(calls[0].get("id", "") + "/text"), f"{entry.id}: {path}"


def _with_rereads(turns: Sequence[Turn], references: dict[int, Call], whole: Callable[[Call], bool],
                  extra: Callable[[Turn, Call], Turn]) -> Iterator[Turn]:
    """The turns, each that needs an earlier observation not `whole` now preceded by the `extra` step.

    Lazy: `whole` is asked when the turn comes up, after the policy has played every turn before it.
    """
    for turn in turns:
        source = references.get(turn.step)
        if source is not None and not whole(source):
            yield extra(turn, source)
        yield turn


def _in(history: History, id: str) -> bool:
    try:
        history.get(id)
    except ValueError:  # summarized away
        return False
    return True


def _whole_in(history: History, id: str) -> bool:
    """The result `id` is in the history as the tool returned it: not a pointer, not a preview."""
    if not _in(history, id):
        return False
    entry = history.get(id)
    return not entry.pointer and entry.offloaded_to is None


def _request_key(messages: list[Message], tools: list[dict[str, Any]]) -> str:
    return hashlib.sha1(canonical_prompt({"messages": messages, "tools": tools}).encode()).hexdigest()


def measure_cairn(turns: Sequence[Turn], window: int, repeats: int, cfg: ContextConfig | None = None,
                  references: dict[int, Call] | None = None, task: str = TASK,
                  keep_said: bool = True) -> tuple[Ledger, list[list[StepTime]]]:
    """One accounted run, then `repeats - 1` timing-only runs that must send the same bytes.

    The repeats skip the tokenizing and caching (minutes over three runs) and calibrate the counter
    with the sizes the first run measured, so they take exactly the same path.
    """
    ledger = Ledger("cairn")
    sizes: dict[str, int] = {}

    def accounted(step: int, messages: list[Message], tools: list[dict[str, Any]], output: int,
                  reread: bool) -> int:
        prompt = ledger.account_request(messages, tools, output, reread)
        sizes[_request_key(messages, tools)] = prompt
        return prompt

    def replayed(step: int, messages: list[Message], tools: list[dict[str, Any]], output: int,
                 reread: bool) -> int:
        key = _request_key(messages, tools)
        if key not in sizes:
            raise AssertionError(f"step {step}: a repeat sent other bytes than the accounted run")
        return sizes[key]

    runs = [run_cairn(turns, window, accounted, ledger, cfg, references, task=task, keep_said=keep_said)]
    runs += [run_cairn(turns, window, replayed, None, cfg, references, task=task, keep_said=keep_said)
             for _ in range(repeats - 1)]
    return ledger, runs


# --- policy 2: drop-oldest -------------------------------------------------------------------------


def run_drop_oldest(turns: Sequence[Turn], window: int, references: dict[int, Call] | None = None,
                    name: str = "drop-oldest", task: str = TASK) -> Ledger:
    """Everything verbatim; while the request is over the window, drop the oldest whole turn.

    Whole turns, so a tool result is never left without the call it answers (providers refuse
    that). The system prompt and the task always stay. A step that needs an observation no longer
    kept runs its command again first (`rerun_turn`). With a window no request reaches, this is
    the raw agent that keeps its whole history.
    """
    ledger = Ledger(name)
    kept: deque[Turn] = deque()
    by_call = calls_by_id(turns)

    def whole(call: Call) -> bool:
        return any(call.id in t.holds for t in kept)

    for turn in _with_rereads(turns, references or {}, whole, lambda t, c: rerun_turn(t, c, by_call)):
        while True:
            messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task},
                        *(m for t in kept for m in t.verbatim)]
            tokens = prompt_tokens_of(messages, TOOLS)
            excess = len(tokens) - window
            if excess <= 0 or len(kept) <= 1:
                break
            # Drop by the stored raw counts (close to the real ones), then measure again.
            while excess > 0 and len(kept) > 1:
                excess -= kept.popleft().verbatim_tokens
        ledger.new_messages = len(kept[-1].verbatim) if kept else 0
        ledger.account_request(messages, TOOLS, turn.output_tokens, turn.rereads is not None, tail=False)
        kept.append(turn)
    return ledger


# --- policy 3: summarize at 90% --------------------------------------------------------------------


def baseline_summarize_request(history: list[Message]) -> list[Message]:
    return [{"role": "system", "content": BASELINE_SUMMARIZE_PROMPT},
            {"role": "user", "content": "\n\n".join(canonical_json(m) for m in history)}]


def run_summarize(turns: Sequence[Turn], window: int, appended: bool = False,
                  references: dict[int, Call] | None = None) -> Ledger:
    """Everything verbatim; over 90% of the window, the whole history becomes one summary message.

    `appended`: the summarize request is the agent's request with the instruction appended (and so
    mostly cached), not a prompt of its own (see the module's docstring). A step that needs an
    observation summarized away runs its command again first (`rerun_turn`)."""
    ledger = Ledger("summarize@90%" + (" cached" if appended else ""))
    history: list[Message] = []
    present: set[str] = set()  # calls whose output is in `history` whole
    by_call = calls_by_id(turns)
    for turn in _with_rereads(turns, references or {}, lambda c: c.id in present,
                              lambda t, c: rerun_turn(t, c, by_call)):
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}, *history]
        tokens = prompt_tokens_of(messages, TOOLS)
        if len(tokens) > SUMMARIZE_AT * window and history:
            text = summary_text(history, BASELINE_SUMMARY_TOKENS, f"baseline-{ledger.summaries}")
            if appended:
                request = [*messages, {"role": "user", "content": BASELINE_SUMMARIZE_PROMPT}]
                ledger.account_summary(request, count_tokens(text), TOOLS, from_cache=True)
            else:
                ledger.account_summary(baseline_summarize_request(history), count_tokens(text))
            history = [{"role": "user", "content": "Summary of the work so far:\n\n" + text}]
            present.clear()
            messages = [messages[0], messages[1], *history]
            tokens = prompt_tokens_of(messages, TOOLS)
        ledger.account(tokens, turn.output_tokens, turn.rereads is not None)
        history.extend(turn.verbatim)
        present |= turn.holds
    return ledger


# --- a floor under cairn's cost on the real-shaped workload -----------------------------------------


def cost_floor(turns: Sequence[Turn], raw: Ledger, cfg: ContextConfig, task: str = TASK
               ) -> tuple[float, dict[str, float]]:
    """What any policy that keeps the last `keep_recent_results` turns' results whole must pay at least.

    From the raw agent's own figures: its answers and its new tokens (each step's, sent uncached once)
    are paid by every policy. On top, every request holds the prefix (system, tools, task) and the
    recent turns (their results whole; the text of all but the last `keep_recent_turns` as a pointer),
    `L` tokens, read from the cache; and every compaction re-sends at least those recent turns, `R`,
    uncached: 9 C more a token than a cached read (C). With the request growing `g` tokens a step,
    compacting every `d` tokens of growth costs per step C (L + d/2) + 9 C R g / d, least at
    d = sqrt(18 R g). The older history is counted as free: no pointers, digests, summaries or rereads.
    """
    prefix = len(prompt_tokens_of([{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}], TOOLS))

    def tokens(turn: Turn, whole_text: bool) -> int:
        if whole_text:
            return turn.verbatim_tokens
        message = {**turn.verbatim[0], "content": f"[your text of step {turn.step} moved out of the context: "
                   f"{len(turn.message['content'])} bytes in /cairn/obs/{turn.step}-assistant-call_{turn.step}_0.txt; "
                   "read it with file_read]"}
        return sum(count_tokens(canonical_json(m)) for m in (message, *turn.verbatim[1:]))

    keep, whole = cfg.keep_recent_results, cfg.keep_recent_turns
    recent = statistics.mean(sum(tokens(turns[j], j >= i - whole) for j in range(i - keep, i))
                             for i in range(keep, len(turns) + 1))
    growth = statistics.mean(turn.verbatim_tokens for turn in turns)
    spacing = math.sqrt(18 * recent * growth)
    per_step = PRICE_CACHED * (prefix + recent + spacing / 2) + 9 * PRICE_CACHED * recent * growth / spacing
    floor = raw.cost_output + raw.cost_uncached + len(turns) * per_step
    return floor, {"prefix": prefix, "recent": recent, "growth": growth, "spacing": spacing}


# --- report ----------------------------------------------------------------------------------------


def step_windows(steps: int) -> tuple[range, range]:
    """Steps 5-15 and the last ten (290-300 in a 300-step run), 1-based and inclusive."""
    early = range(min(5, steps), min(15, steps) + 1)
    late = range(max(1, steps - 10), steps + 1)
    return early, late


def window_median(runs: list[list[StepTime]], steps: range, part: Callable[[StepTime], float]) -> float:
    """Median over the steps of the per-step median over the repeats (seconds)."""
    per_step = [statistics.median(part(run[s - 1]) for run in runs) for s in steps]
    return statistics.median(per_step)


def _fmt_int(n: int) -> str:
    return f"{n:,}"


def _fmt_ratio(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:.3f}"


def _ratio(cost: float, ledger: Ledger | None) -> float:
    return cost / ledger.cost if ledger is not None and ledger.cost else math.nan


def _workload(name: str, steps: int, seed: int) -> list[Turn]:
    return make_real_shaped(steps, seed) if name == "real-shaped" else make_workload(steps, seed)


def _config(args: argparse.Namespace, **overrides: Any) -> ContextConfig:
    fields = {"high_water": args.high_water, "low_water": args.low_water, "preview_lines": args.preview_lines,
              "preview_chars": args.preview_chars, "keep_recent_results": args.keep_recent_results,
              "keep_recent_turns": args.keep_recent_turns, "compact_growth": args.compact_growth,
              "digest_budget": args.digest_budget, "vary_framing": args.vary_framing == "on"}
    return ContextConfig(**(fields | overrides))


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=["synthetic", "real-shaped"], default="synthetic",
                        help="the scripted 300-step coding run, or one shaped like real SWE-agent trajectories "
                             "(150 steps, 32k window)")
    parser.add_argument("--steps", type=int, default=None, help="default: 300 (synthetic), 150 (real-shaped)")
    parser.add_argument("--window", type=int, default=None, help="the model's context window, in tokens; "
                        "default: 64,000 (synthetic), 32,768 (real-shaped)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS, help="cairn runs for the timing medians")
    defaults = ContextConfig()
    parser.add_argument("--high-water", type=float, default=defaults.high_water, help="cairn's compaction trigger")
    parser.add_argument("--low-water", type=float, default=defaults.low_water, help="where cairn's compaction stops")
    parser.add_argument("--preview-lines", type=int, default=defaults.preview_lines)
    parser.add_argument("--preview-chars", type=int, default=defaults.preview_chars)
    parser.add_argument("--keep-recent-results", type=int, default=defaults.keep_recent_results)
    parser.add_argument("--rereads", type=float, default=REREAD_RATE,
                        help="share of steps that need an earlier observation again (0 turns references off)")
    parser.add_argument("--summary-request", choices=["fresh", "appended", "both"], default="both",
                        help="which summarize@90%% baselines run: its summarize request as a prompt of its own "
                             "(uncached), appended to the agent's request (cached), or both")
    parser.add_argument("--trajectories", nargs="+", metavar="FILE",
                        help="instead of a scripted workload: real runs (mini-SWE-agent .traj.json, SWE-agent .traj) "
                             "replayed against a raw agent at a 32k window by default (bench/context_trajectories.py)")
    parser.add_argument("--keep-recent-turns", type=int, default=defaults.keep_recent_turns)
    parser.add_argument("--compact-growth", type=float, default=defaults.compact_growth,
                        help="cairn also compacts above the low mark after this share of the window's growth (0: off)")
    parser.add_argument("--digest-budget", type=float, default=defaults.digest_budget,
                        help="cairn folds the earlier digests into one line past this share of the window (0: never)")
    parser.add_argument("--say", type=int, default=0, metavar="N",
                        help="the person speaks N times in each run (the same messages for every policy)")
    parser.add_argument("--keep-said", choices=["on", "off"], default="on",
                        help="cairn keeps the person's words through compaction (off: compacted, as before)")
    parser.add_argument("--vary-framing", choices=["on", "off"], default="on" if defaults.vary_framing else "off",
                        help="cairn varies how results are framed (context.vary_framing)")
    parser.add_argument("--compare", action="store_true",
                        help="also run cairn with --vary-framing off --keep-said off (as before issue 32), beside")
    parser.add_argument("--sweep", action="store_true",
                        help="instead of one run: cairn's marks and preview size over seeds and windows, as a table")
    args = parser.parse_args(argv)
    if args.trajectories:
        from context_trajectories import run_set  # noqa: PLC0415 - only this mode needs it

        args.rereads = args.rereads if "--rereads" in (argv if argv is not None else sys.argv) else 0.0
        return run_set(sys.modules[__name__], args, args.window or REAL_WINDOW)
    steps = args.steps or (REAL_STEPS if args.workload == "real-shaped" else DEFAULT_STEPS)
    window = args.window or (REAL_WINDOW if args.workload == "real-shaped" else DEFAULT_WINDOW)
    if args.sweep:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from context_sweep import sweep, sweep_real  # noqa: PLC0415 - only the sweep needs it

        (sweep_real if args.workload == "real-shaped" else sweep)(sys.modules[__name__], args, steps)
        return {}
    cfg = _config(args)

    turns = with_person(_workload(args.workload, steps, args.seed), args.say, args.seed)
    references = make_references(turns, args.seed, args.rereads)
    kinds = {k: sum(t.kind == k for t in turns) for k in ("small", "medium", "large", "failure")}
    observed = sum(t.observation_tokens() for t in turns)
    todo_rewrites = sum(c.name == "todo_write" for t in turns for c in t.calls)
    print(f"workload: {args.workload}, {steps} steps, seed {args.seed}, window {_fmt_int(window)} tokens "
          f"(cairn compacts at {cfg.high_water:.0%} down to {cfg.low_water:.0%}, keeps the last "
          f"{cfg.keep_recent_results} results whole, previews {cfg.preview_lines} lines); "
          f"main observation per step: {kinds['small']} small, {kinds['medium']} medium, {kinds['large']} large, "
          f"{kinds['failure']} failures; {sum(len(t.calls) for t in turns)} tool calls, "
          f"{sum(c.error for t in turns for c in t.calls)} failed; "
          f"{_fmt_int(observed)} observation tokens; {todo_rewrites} todo rewrites; "
          f"{len(references)} steps need an earlier observation again")

    cairn, runs = measure_cairn(turns, window, max(1, args.repeats), cfg, references, keep_said=args.keep_said == "on")
    before = None
    if args.compare:  # cairn as before issue 32, in the same run: results in the plain form, the person's words compacted
        before = measure_cairn(turns, window, 1, cfg.model_copy(update={"vary_framing": False}), references,
                               keep_said=False)[0]
        before.name = "cairn, before"
    fresh = run_summarize(turns, window, False, references) if args.summary_request != "appended" else None
    appended = run_summarize(turns, window, True, references) if args.summary_request != "fresh" else None
    raw = run_drop_oldest(turns, 10**12, None, "raw, no limit") if args.workload == "real-shaped" else None
    ledgers = [cairn, *(x for x in (before,) if x), run_drop_oldest(turns, window, references),
               *(x for x in (fresh, appended, raw) if x)]

    rows: list[tuple[str, Callable[[Ledger], str]]] = [
        ("requests (incl. summarize)", lambda led: _fmt_int(led.requests)),
        ("cache hit (cached/prompt)", lambda led: f"{led.cache_hit:.3f}"),
        ("prompt tokens, total", lambda led: _fmt_int(led.prompt)),
        ("cached tokens, total", lambda led: _fmt_int(led.cached)),
        ("output tokens, total", lambda led: _fmt_int(led.output)),
        ("peak agent request", lambda led: _fmt_int(led.peak)),
        ("peak summarize request", lambda led: _fmt_int(led.peak_summarize) if led.summaries else "-"),
        ("compactions / summaries", lambda led: f"{led.compactions} / {led.summaries}"),
        ("rereads (extra steps)", lambda led: _fmt_int(led.rereads)),
        ("cost: of it, rereads", lambda led: f"{led.reread_cost:.2f}"),
        ("cost: uncached input", lambda led: f"{led.cost_uncached:.2f}"),
        ("cost: cached input", lambda led: f"{led.cost_cached:.2f}"),
        ("cost: output", lambda led: f"{led.cost_output:.2f}"),
        ("cost: of it, summarizing", lambda led: f"{led.cost_summarize:.2f}"),
        ("cost (USD)", lambda led: f"{led.cost:.2f}"),
    ]
    width = 28
    print()
    print("".ljust(width) + "".join(led.name.rjust(22) for led in ledgers))
    for label, cell in rows:
        print(label.ljust(width) + "".join(cell(led).rjust(22) for led in ledgers))
    for led in ledgers:
        # Verbatim policies cannot shrink one turn: a single observation bigger than the window is
        # sent whole (drop-oldest) or handed whole to the summarizer (summarize@90%).
        if led.peak > window and led is not raw:
            print(f"note: {led.name} sent a request over the window ({_fmt_int(led.peak)} tokens): "
                  "one turn alone is bigger than it")
        if led.peak_summarize > window:
            print(f"note: {led.name}'s largest summarize request ({_fmt_int(led.peak_summarize)} tokens) is over the "
                  "window; a real model would refuse it (it is counted as if accepted)")

    if raw is not None:
        print()
        print("where the tokens and the cost go:")
        print("\n".join(table([("cairn", cairn.breakdown), ("raw, no limit", raw.breakdown)])))
        floor, parts = cost_floor(turns, raw, cfg)
        print(f"floor: any policy keeping the last {cfg.keep_recent_results} results whole pays at least "
              f"${floor:.2f} ({floor / raw.cost:.3f} of the raw agent's ${raw.cost:.2f}): the raw agent's answers and "
              f"new tokens (${raw.cost_output + raw.cost_uncached:.2f}), a prefix of {parts['prefix']:.0f} and recent "
              f"turns of {parts['recent']:.0f} tokens read from the cache every step, re-sent uncached at each "
              f"compaction, one every {parts['spacing']:.0f} tokens of growth ({parts['growth']:.0f} a step) at best")
    early, late = step_windows(len(runs[0]))
    ms = 1000.0
    parts: list[tuple[str, Callable[[StepTime], float]]] = [
        ("total", lambda t: t.total), ("build+estimate", lambda t: t.build),
        ("compaction", lambda t: t.compact), ("shape+append", lambda t: t.shape),
    ]
    print()
    print(f"cairn context work per step, ms (median of steps, each the median of {len(runs)} runs; "
          "steps counted as played, rereads included):")
    heading = "".join(f"steps {steps.start}-{steps.stop - 1}".rjust(16) for steps in (early, late))
    print("".ljust(width) + heading)
    for label, part in parts:
        print(label.ljust(width) + f"{window_median(runs, early, part) * ms:.3f}".rjust(16)
              + f"{window_median(runs, late, part) * ms:.3f}".rjust(16))
    entries = [statistics.median(runs[0][s - 1].entries for s in steps) for steps in (early, late)]
    print("history messages (median)".ljust(width) + "".join(f"{n:g}".rjust(16) for n in entries))
    compaction_steps = [i + 1 for i, t in enumerate(runs[0]) if t.compacted]
    if compaction_steps:
        worst = max(statistics.median(run[s - 1].compact for run in runs) for s in compaction_steps)
        print(f"compactions at steps {compaction_steps}; slowest {worst * ms:.1f} ms")

    overhead_early = window_median(runs, early, lambda t: t.total)
    overhead_late = window_median(runs, late, lambda t: t.total)
    result = {
        "cache_hit": cairn.cache_hit,
        "peak_tokens": float(max(cairn.peak, cairn.peak_summarize)),
        "cost_vs_summarize": _ratio(cairn.cost, fresh),
        "cost_vs_appended": _ratio(cairn.cost, appended),
        "rereads": float(cairn.rereads),
        "overhead_300_vs_10": overhead_late / overhead_early,
    }
    line = (f"cache_hit={result['cache_hit']:.3f} peak_tokens={int(result['peak_tokens'])} "
            f"cost_vs_summarize={_fmt_ratio(result['cost_vs_summarize'])} "
            f"cost_vs_appended={_fmt_ratio(result['cost_vs_appended'])} rereads={cairn.rereads} "
            f"overhead_300_vs_10={result['overhead_300_vs_10']:.2f}")
    if raw is not None:
        result |= {"compactions": float(cairn.compactions), "summaries": float(cairn.summaries),
                   "cost_vs_raw": cairn.cost / raw.cost, "floor_vs_raw": cost_floor(turns, raw, cfg)[0] / raw.cost}
        line += f" compactions={cairn.compactions} summaries={cairn.summaries} cost_vs_raw={result['cost_vs_raw']:.3f}"
    if before is not None:
        result |= {"before_cache_hit": before.cache_hit, "before_cost_vs_summarize": _ratio(before.cost, fresh),
                   "before_cost_vs_appended": _ratio(before.cost, appended),
                   **({"before_cost_vs_raw": before.cost / raw.cost} if raw is not None else {})}
        print(f"\nbefore (the plain form, the person's words compacted): cache_hit={before.cache_hit:.3f} "
              f"cost_vs_summarize={_fmt_ratio(result['before_cost_vs_summarize'])} "
              f"cost_vs_appended={_fmt_ratio(result['before_cost_vs_appended'])}"
              + (f" cost_vs_raw={result['before_cost_vs_raw']:.3f}" if raw is not None else ""))
    critic = Ledger(f"cairn, critic every {CRITIC_EVERY}")
    run_cairn(turns, window, lambda step, messages, tools, output, reread: critic.account(
        prompt_tokens_of(messages, tools), output, reread), critic, cfg, references, critic_every=CRITIC_EVERY)
    result |= {"critic_cache_hit": critic.cache_hit, "critic_cost_vs_without": critic.cost / cairn.cost}
    print(f"\ncairn with --critic-every {CRITIC_EVERY}: {critic.critics} critic requests; {critic.requests} requests, "
          f"cost ${critic.cost:.2f} against ${cairn.cost:.2f} without")
    print(f"critic_every_{CRITIC_EVERY}: cache_hit={critic.cache_hit:.3f} "
          f"cost_vs_without={result['critic_cost_vs_without']:.3f}")
    print()
    print(line)
    return result


if __name__ == "__main__":
    main()
