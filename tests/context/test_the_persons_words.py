"""What the person says is never compacted away: digests, folds and summaries replace the turns around their
messages, and the messages stay word for word, in order, in every later request (context/person.py)."""

from __future__ import annotations

from orchestrator.config import ContextConfig
from orchestrator.context.history import History
from orchestrator.context.person import MAX_KEPT_CHARS
from orchestrator.context.tokens import TokenCounter, canonical_json
from orchestrator.events import Compaction, dump_event, parse_event
from tests.context.test_digest_fold import MARKS, WINDOW, add_turns, budget
from tests.context.test_requests_and_compaction import Files, Tokenizer, run_compact

SAID = ["Use the second option, not the first.", "Also keep the old flag working.",
        "Stop editing setup.py; it is generated."]


def person(history: History, id: str, text: str, step: int) -> None:
    history.append(id, {"role": "user", "content": text}, step=step, kind="user", said=text)


def users(history: History) -> list[str]:
    return [e.content for e in history if e.kind == "user"]


def a_run_with_the_person_speaking(files: Files, fold: float = 0.0) -> tuple[History, list[Compaction]]:
    """Turns of a shell call, the person speaking between them, a digest every five turns (folded past `fold`
    of the window: 0 never)."""
    history = History(TokenCounter(Tokenizer()))
    events = []
    add_turns(history, 0, 5)
    for n, text in enumerate(SAID):
        person(history, f"p{n}", text, step=5 * n + 5)
        add_turns(history, 5 * n + 5, 5)
        events.append(run_compact(history, ContextConfig(**MARKS, digest_budget=fold), window=WINDOW, files=files))
    return history, events


def test_a_digest_keeps_the_persons_messages_whole_and_in_order_before_it() -> None:
    history, events = a_run_with_the_person_speaking(Files())
    assert all(e.kind == "digest" for e in events)
    assert users(history) == SAID  # word for word, in the order said
    for n, (event, text) in enumerate(zip(events, SAID)):  # each digest kept the message said in its span
        assert event.kept == {f"p{n}": None}
        assert "[the person's message, kept word for word above] " + text in event.summary
    digests = [i for i, e in enumerate(history.entries) if e.kind == "digest"]
    assert [history.entries[i - 1].content for i in digests] == SAID  # each just before its digest


def test_a_fold_keeps_them_too_and_then_they_sit_before_the_fold_as_a_cached_prefix() -> None:
    files = Files()
    history, events = a_run_with_the_person_speaking(files, fold=budget(50))
    assert users(history) == SAID
    fold = next(i for i, e in enumerate(history.entries) if e.kind == "digest")
    assert [e.content for e in history.entries[:fold]] == SAID  # the kept words lead the history
    before = canonical_json(history.messages()[:fold])
    add_turns(history, 40, 5)
    run_compact(history, ContextConfig(**MARKS, digest_budget=budget(50)), window=WINDOW, files=files)
    assert canonical_json(history.messages()[:fold]) == before  # a later fold leaves them (and the cache) alone


def test_a_summary_keeps_them_as_well() -> None:
    history = History(TokenCounter(Tokenizer()))
    add_turns(history, 0, 5)
    person(history, "p0", SAID[0], step=5)
    add_turns(history, 5, 8)
    # No fold and no digest room: the digest would not leave the request below the middle of the marks.
    cfg = ContextConfig(keep_recent_results=1, keep_recent_turns=1, low_water=0.001, high_water=0.002, digest_budget=0,
                        summary_tokens=100)
    event = run_compact(history, cfg, window=WINDOW, summarize=lambda request: "what happened")
    assert event.kind == "summary" and event.kept == {"p0": None}
    assert users(history)[:1] == [SAID[0]] and "kept word for word above" in history.entries[1].content


def test_a_denied_calls_reason_stays_as_a_message_of_its_own() -> None:
    history = History(TokenCounter(Tokenizer()))
    add_turns(history, 0, 3)
    call = {"id": "call_d", "type": "function", "function": {"name": "shell_exec", "arguments": '{"command":"git push"}'}}
    history.append("a", {"role": "assistant", "content": None, "tool_calls": [call]}, step=3)
    reason = "Never push to main; open a pull request instead."
    history.append("r", {"role": "tool", "tool_call_id": "call_d", "content": f"denied by the user: {reason}"},
                   step=3, tool="shell_exec", error=True, said=reason)
    add_turns(history, 4, 5)
    event = run_compact(history, ContextConfig(**MARKS, digest_budget=0), window=WINDOW)
    assert event.kind == "digest" and "r" in event.span and list(event.kept) == ["r"]
    kept = history.get("said-r")
    assert kept.kind == "user" and kept.content.endswith("their reason, kept word for word by cairn:]\n" + reason)


def test_a_very_long_message_is_kept_as_its_head_with_a_pointer_to_all_of_it() -> None:
    files = Files()
    history = History(TokenCounter(Tokenizer()))
    add_turns(history, 0, 5)
    long = "Here is the whole spec. " + "A requirement, stated at length. " * 1000
    person(history, "p0", long, step=5)
    add_turns(history, 5, 5)
    event = run_compact(history, ContextConfig(**MARKS, digest_budget=0), window=WINDOW * 4, files=files)
    path = "/cairn/inbox/5-p0.txt"
    kept = history.get("p0")
    assert kept.content.startswith(long[:MAX_KEPT_CHARS]) and path in kept.content and "long message" in kept.content
    assert files.saved[path] == long and event.kept["p0"] == kept.content
    add_turns(history, 10, 5)
    again = run_compact(history, ContextConfig(**MARKS, digest_budget=budget(10)), window=WINDOW * 4, files=files)
    assert again.kept.get("p0", None) is None and history.get("p0").content == kept.content  # cut once


def test_a_check_s_feedback_is_not_the_persons_and_is_compacted_as_before() -> None:
    history = History(TokenCounter(Tokenizer()))
    add_turns(history, 0, 5)
    history.append("c", {"role": "user", "content": "the check failed: 2 tests"}, step=5, kind="user")
    add_turns(history, 5, 5)
    event = run_compact(history, ContextConfig(**MARKS, digest_budget=0), window=WINDOW)
    assert "c" in event.span and not event.kept and users(history) == []


def test_replaying_the_compactions_gives_the_same_bytes_with_the_persons_words_kept() -> None:
    files = Files()
    live, events = a_run_with_the_person_speaking(files, fold=budget(50))
    replayed = History(TokenCounter(Tokenizer()))
    add_turns(replayed, 0, 5)
    for n, (text, event) in enumerate(zip(SAID, events)):
        person(replayed, f"p{n}", text, step=5 * n + 5)
        add_turns(replayed, 5 * n + 5, 5)
        replayed.apply(parse_event(dump_event(event)))
        replayed.apply(event)  # twice: the second changes nothing
    assert canonical_json(replayed.messages()) == canonical_json(live.messages())
    assert replayed.tokens() == live.tokens()


def test_an_old_log_without_kept_replays_as_it_did() -> None:
    history, events = a_run_with_the_person_speaking(Files())
    old = [Compaction.model_validate({k: v for k, v in e.model_dump().items() if k != "kept"}) for e in events]
    replayed = History(TokenCounter(Tokenizer()))
    add_turns(replayed, 0, 5)
    for n, (text, event) in enumerate(zip(SAID, old)):
        person(replayed, f"p{n}", text, step=5 * n + 5)
        add_turns(replayed, 5 * n + 5, 5)
        replayed.apply(event)
    assert users(replayed) == []  # as an older cairn compacted them
