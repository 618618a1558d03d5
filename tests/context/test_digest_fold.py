"""Folding digests: past their budget, the earlier digests become one line naming the file that holds them.

A digest is a line a step; over a long run the digests pile up to thousands of tokens read at every
step, and in the end force a summary (a model call). Past `context.digest_budget` of the window the
earlier ones fold into one line, with no model call and nothing lost.
"""

from __future__ import annotations

from orchestrator.config import ContextConfig
from orchestrator.context.digest import fold_line
from orchestrator.context.history import History
from orchestrator.context.tokens import TokenCounter, canonical_json
from orchestrator.events import Compaction, dump_event, parse_event
from tests.context.test_requests_and_compaction import REASONING, Files, Tokenizer, run_compact

WINDOW = 40_000
# Low marks no pointer pass can reach, so every compaction folds the old turns into a digest.
MARKS = {"keep_recent_results": 1, "keep_recent_turns": 1, "low_water": 0.01, "high_water": 0.5}


def add_turns(history: History, first: int, count: int) -> None:
    """`count` turns of one shell_exec call and its short result, from step `first`."""
    for i in range(first, first + count):
        function = {"name": "shell_exec", "arguments": '{"command":"ls"}'}
        call = {"id": f"call_{i}", "type": "function", "function": function}
        history.append(f"e{2 * i}", {"role": "assistant", "content": REASONING, "tool_calls": [call]}, step=i)
        history.append(f"e{2 * i + 1}", {"role": "tool", "tool_call_id": f"call_{i}", "content": "3 passed\n" * 3},
                       step=i, tool="shell_exec")


def budget(tokens: int) -> float:
    """`digest_budget` for a budget of `tokens` (the counter's ratio is 1 before any calibration)."""
    return tokens / WINDOW


def two_digests(files: Files, first_turns: int = 10) -> tuple[History, list[Compaction]]:
    """A history whose first two messages are digests (of `first_turns` turns, then of 5), and 5 turns after."""
    history = History(TokenCounter(Tokenizer()))
    events = []
    for first, count in ((0, first_turns), (first_turns, 5), (first_turns + 5, 5)):
        add_turns(history, first, count)
        if first:
            events.append(run_compact(history, ContextConfig(**MARKS, digest_budget=0), window=WINDOW, files=files))
    assert [e.kind for e in history.entries[:2]] == ["digest", "digest"]
    return history, events


def test_past_the_budget_the_earlier_digests_fold_into_one_line_naming_a_file_that_holds_them_whole() -> None:
    files = Files()
    history, _ = two_digests(files)
    old = history.entries[:2]
    add_turns(history, 20, 5)
    cfg = ContextConfig(**MARKS, digest_budget=budget(old[1].tokens))  # less than the two digests
    event = run_compact(history, cfg, window=WINDOW, files=files)
    assert event.kind == "digest" and event.span[:2] == [old[0].id, old[1].id]
    fold = history.entries[0]
    line = fold_line(0, 18, event.summary_path)  # the digests of steps 0-13 and 14-18 (step 19 was whole)
    assert fold.kind == "digest" and fold.content.startswith(line + "\n\n[Steps 19 to 23, folded by cairn")
    assert "read any file with file_read" in line  # the model is told how to read it back
    saved = files.saved[event.summary_path]
    assert saved.startswith("# Steps 0 to ")
    assert old[0].content in saved and old[1].content in saved  # byte for byte
    assert fold.tokens < old[0].tokens + old[1].tokens


def test_within_the_budget_no_digest_is_folded() -> None:
    files = Files()
    history, _ = two_digests(files)
    old = history.entries[:2]
    add_turns(history, 20, 5)
    event = run_compact(history, ContextConfig(**MARKS, digest_budget=budget(10_000)), window=WINDOW, files=files)
    assert history.entries[:2] == old and old[0].id not in event.span


def test_a_fold_folds_again_whole_and_its_file_keeps_the_earlier_fold() -> None:
    files = Files()
    history, _ = two_digests(files)
    add_turns(history, 20, 5)
    small = ContextConfig(**MARKS, digest_budget=budget(50))
    first = run_compact(history, small, window=WINDOW, files=files)
    fold = history.entries[0]
    add_turns(history, 25, 5)
    second = run_compact(history, small, window=WINDOW, files=files)
    assert history.entries[0].content.startswith(fold_line(0, 23, second.summary_path))
    assert fold.content in files.saved[second.summary_path]
    assert first.summary_path in files.saved[second.summary_path]  # that file still resolves


def test_replaying_the_compactions_with_a_fold_gives_the_same_bytes_and_the_same_growth() -> None:
    files = Files()
    live, events = two_digests(files)
    add_turns(live, 20, 5)
    events.append(run_compact(live, ContextConfig(**MARKS, digest_budget=budget(50)), window=WINDOW, files=files))
    live.append("e999", {"role": "assistant", "content": "next"}, step=26)

    replayed = History(TokenCounter(Tokenizer()))
    add_turns(replayed, 0, 10)
    for event, (first, count) in zip(events, ((10, 5), (15, 5), (20, 5))):
        add_turns(replayed, first, count)
        replayed.apply(parse_event(dump_event(event)))
        replayed.apply(event)  # twice: the second changes nothing
    replayed.append("e999", {"role": "assistant", "content": "next"}, step=26)
    assert canonical_json(replayed.messages()) == canonical_json(live.messages())
    assert replayed.growth() == live.growth() > 0
