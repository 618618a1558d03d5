"""Digests: many old turns folded into one message, a line a step, without asking the model.

Once old turns are pointers, each still costs about 150 tokens in the context: the pointer to the
assistant's text, the call with its arguments and the message framing around it, the pointer to
its result. In real trajectories the history is mostly such small turns, so pointers alone stop
making room after a hundred steps, and a written summary (a model call that loses detail) was the
only move left. A digest keeps what a pointer keeps, in about a quarter of the tokens: one line a
step with its calls and where each result is, and a file with the digested messages as they were.
Nothing is lost: every line's file resolves, and the digest's file holds the rest.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.context.history import Entry, replaced_message
from orchestrator.context.offload import CAIRN_DIR, call_arguments, count_lines, obs_path
from orchestrator.context.person import digest_line, keep
from orchestrator.context.pointers import error_line, pointer_path
from orchestrator.context.span_files import digest_file
from orchestrator.context.tokens import TokenCounter

DIGEST_DIR = f"{CAIRN_DIR}/summaries"

# A call's arguments are shown up to this many characters: a command or a path whole, a file's
# content cut (the call whole is in the digest's file).
MAX_ARGUMENT_CHARS = 160
# A result this short is shown in its line ("edited a.py"): a path to it would be no shorter.
MAX_INLINE_RESULT_CHARS = 80
MAX_ERROR_CHARS = 120
# The first line of a digest (and of a fold, which starts alike): the steps it stands for.
_STEPS = re.compile(r"^\[Steps (\d+) to (\d+)", re.MULTILINE)


@dataclass(frozen=True)
class Digest:
    """A digest that could replace a span, with the files it needs saved."""

    ids: list[str]
    message: str
    path: str
    files: list[tuple[str, str]]  # (path, text): the digest's own file, and results that had none
    tokens: int  # of the digest message
    removed: int  # tokens of the span it replaces, as they will be after the pointer pass, less what stays
    kept: dict[str, str | None]  # the person's words in the span, which stay before it (Compaction.kept)


def make_digest(
    old: list[list[Entry]],
    tokens: dict[str, int],
    replacements: dict[str, str],
    counter: TokenCounter,
    prefix: str,
    step: int,
    budget: int = 0,
) -> Digest | None:
    """A digest of the `old` turns after the last summary or digest (their messages' `tokens` and
    pointer `replacements` as the pointer pass left them), or None when there are none, or when it
    would not be smaller than they are. Earlier summaries and digests stay as they are, so the prefix
    up to them stays cached. Results that were in no file yet get one, to be saved with the digest's.

    Unless the digests since the last summary, with the new one, pass `budget` raw tokens (0: no
    budget): then the earlier ones fold into one line before the new digest, naming its file, which
    holds them whole. A line a step piles up to thousands of tokens read at every step of a long run,
    and would in the end need a summary (a model call); the fold costs no call and loses nothing. The
    person's messages in the span, and between the earlier digests, stay before the new message
    (context/person.py).
    (Keeping the newest earlier digests whole beside the fold line, within part of the budget, was
    measured: at the default budget it never kept one, so the fold takes them all.)"""
    start = max((i + 1 for i, turn in enumerate(old) if turn[0].kind in ("summary", "digest")), default=0)
    span = [entry for turn in old[start:] for entry in turn]
    if not span:
        return None
    earlier = _earlier_digests(old[:start])
    messages = [replaced_message(e, replacements[e.id]) if e.id in replacements else e.message for e in span]
    path = digest_path(span, prefix)
    results: dict[str, str | None] = {}
    errors: dict[str, str] = {}
    files: list[tuple[str, str]] = []
    for entry, message in zip(span, messages):
        if entry.kind != "tool":
            continue
        content = str(message.get("content") or "")
        found = entry.offloaded_to or pointer_path(content)
        if found is None and ("\n" in content.strip() or len(content) > MAX_INLINE_RESULT_CHARS):
            found = obs_path(entry.step, entry.tool or "tool", entry.call_id or entry.id)
            files.append((found, entry.content))  # so that this line, like every pointer, resolves
        results[entry.id] = found
        if entry.error:
            # A pointer's own first lines say where the result went and that it failed: skip them.
            text = content.split("\n", 2)[-1] if entry.pointer else entry.content
            errors[entry.id] = error_line(text)
    message = digest_message(span, messages, path, results, errors)
    digest_tokens = counter.message({"role": "user", "content": message})
    first = span[0].step
    if budget and earlier and sum(tokens[e.id] for e in earlier if e.kind == "digest") + digest_tokens > budget:
        first, last = _steps([e for e in earlier if e.kind == "digest"])
        message = fold_line(first, last, path) + "\n\n" + message
        span, messages = [*earlier, *span], [*(e.message for e in earlier), *messages]
        digest_tokens = counter.message({"role": "user", "content": message})
    kept, kept_tokens = keep(span, counter, lambda path, text: files.append((path, text)))
    removed = sum(tokens[entry.id] for entry in span) - kept_tokens
    if digest_tokens >= removed:
        return None
    files.append((path, digest_file(step, span, messages, message, first)))
    return Digest([e.id for e in span], message, path, files, digest_tokens, removed, kept)


def _earlier_digests(before: list[list[Entry]]) -> list[Entry]:
    """The digests that end `before` (the turns up to the new digest's span), back to the last summary:
    they are one run of messages, each digest having replaced all the turns since the one before it, with
    the person's messages each kept before its digest among them (from the first digest on)."""
    earlier: list[Entry] = []
    for turn in reversed(before):
        if len(turn) > 1 or not (turn[0].kind == "digest" or turn[0].said is not None):
            break
        earlier.insert(0, turn[0])
    # It ends with a digest when there is one. Those kept before the first are where a fold would put them.
    return earlier[[e.kind for e in earlier].index("digest"):] if earlier else []


def _steps(digests: Sequence[Entry]) -> tuple[int, int]:
    """The first and last step the `digests` stand for, read from their first lines."""
    steps = [int(n) for entry in digests for pair in _STEPS.findall(entry.content) for n in pair]
    return (min(steps), max(steps)) if steps else (digests[0].step, digests[-1].step)  # else: not cairn's


def fold_line(first: int, last: int, path: str) -> str:
    """The line that stands for folded digests in the context: what they were, where they are, how to read them."""
    return (
        f"[Steps {first} to {last}, folded by cairn to keep the context small: their digests (a line a "
        f"step, with your calls and where each result is) are in {path}, under \"The replaced messages\"; "
        "read any file with file_read.]"
    )


def digest_path(span: Sequence[Entry], prefix: str = "") -> str:
    """`/cairn/summaries/<prefix>steps-<first>-<last>-<id>.md`: spans never overlap, so neither do names."""
    return f"{DIGEST_DIR}/{prefix}steps-{span[0].step}-{span[-1].step}-{span[0].id}.md"


def digest_message(span: Sequence[Entry], messages: Sequence[dict[str, Any]], path: str,
                   results: dict[str, str | None], errors: dict[str, str]) -> str:
    """The one message that stands for `span` (whose messages are, as the context holds them, `messages`).

    `results` maps each tool result's id to the file holding it whole, or None for a result short
    enough to be shown in its line; `errors`, a failed result's id to its first error line.
    """
    first, last = span[0].step, span[-1].step
    lines = [
        f"[Steps {first} to {last}, folded by cairn when the context filled up: a line a step, with your calls "
        f"and where each result is. Your text and the messages whole are in {path}; read any file with file_read.]"
    ]
    for entry, message in zip(span, messages):
        if entry.kind == "assistant":
            calls = [_call(call) for call in message.get("tool_calls") or []]
            lines.append(f"{entry.step}: " + ("; ".join(calls) if calls else "(text only)"))
        elif entry.kind == "tool":
            lines.append("  -> " + _result(entry, results.get(entry.id), errors.get(entry.id)))
        else:
            text = _cut(str(message.get("content") or "").strip().replace("\n", " "), MAX_ARGUMENT_CHARS)
            lines.append(digest_line(entry, text))
    return "\n".join(lines)


def _call(call: dict[str, Any]) -> str:
    function = call.get("function") or {}
    arguments = call_arguments(call)  # None: not a JSON object, shown as the model wrote it
    shown = str(function.get("arguments")) if arguments is None else json.dumps(arguments, ensure_ascii=False, sort_keys=True)
    return f"{function.get('name')} {_cut(shown, MAX_ARGUMENT_CHARS)}"


def _result(entry: Entry, path: str | None, error: str | None) -> str:
    if path is None:
        return ("failed: " if entry.error else "") + entry.content.strip().replace("\n", " ")
    what = f"failed ({_cut(error, MAX_ERROR_CHARS)})" if entry.error and error else "failed" if entry.error else "ok"
    size = "" if entry.pointer or entry.offloaded_to else f", {count_lines(entry.content)} lines"
    return f"{what}{size}: {path}"


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"
