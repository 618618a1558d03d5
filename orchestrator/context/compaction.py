"""Compaction: making room in the context without losing anything.

It runs in bulk, every few steps at most. When a request crosses the high-water mark, or is above the
low-water mark after the history grew by `compact_growth` of the window since the last compaction
(`needs_compaction`), one compaction brings the history down towards the low-water mark, so the prefix
cache is rebuilt once for several steps, and every step between reads a small cached prefix.

Three moves, cheapest first:

1. Old tool results become one-line pointers to a file holding their text; the long arguments
   of old tool calls (a file written whole, an edit's old and new text) become pointers to a file
   holding the call's original arguments; and the assistant's own long old text (its reasoning)
   becomes a pointer to a file holding it. Oldest first, the last `keep_recent_results` results
   (and their calls) staying whole, because the agent is probably still working with them, and the
   last `keep_recent_turns` turns keeping the assistant's text too. A failed result keeps its error
   lines, so the agent still sees what went wrong without reading the file. In real trajectories
   the assistant's text is as big as the observations, so masking results alone leaves most of an
   old turn in place.
2. If that does not reach the low-water mark, the old turns since the last summary or digest are
   folded into a digest (context/digest.py): one message, a line a step with its calls and where
   each result is, and a file with the turns as they were. No model call, nothing lost, about a
   quarter of the tokens of the same turns as pointers; earlier digests stay as they are, until
   they pass `digest_budget` of the window: then they all fold into one line naming the new
   digest's file, which holds them whole (a line a step still piles up over a long run, and would
   otherwise force a summary). The digest is enough when it leaves the request below the middle of
   the two marks: what stays (the prefix, the digests, the recent turns) may itself be above the low mark.
3. If the digest does not leave that room (the digests have piled up, or the fold is off), the oldest turns (earlier
   digests included) are summarized by the model. The summary is saved as a file with the paths of
   every saved output of those turns and the turns themselves, and one message holding the summary
   and that file's path takes their place. The summary request is the agent's own request as it stands (the history
   not yet compacted) with the instruction appended as one user message, so the provider's prefix
   cache serves all of it but that message, as Claude Code and Codex CLI send theirs.

The person's words are never compacted away (context/person.py): their messages in a span a digest or a
summary replaces stay, word for word and in order, just before the message that replaces it.

Every pointer resolves to a file in the workspace, and the event log keeps every byte besides.
The result is a `Compaction` event, applied with `History.apply`: the same call a resume makes, so
a live history and a replayed one cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from orchestrator.config import ContextConfig
from orchestrator.context.digest import make_digest
from orchestrator.context.history import Entry, History, replaced_message
from orchestrator.context.offload import CAIRN_DIR, Save, call_arguments, is_big, obs_path, with_arguments
from orchestrator.context.person import KEPT, keep
from orchestrator.context.pointers import argument_pointer, pointer_text, text_pointer
from orchestrator.context.span_files import summary_file
from orchestrator.context.tokens import TokenCounter, canonical_json
from orchestrator.errors import CairnError
from orchestrator.events import Compaction

Summarize = Callable[[list[dict[str, Any]]], str]
"""`summarize(request)` returns the model's answer to `request` (an LLM call, with the agent's tools and
none of them callable): the messages of `summary_request`, which end with the instruction."""

SUMMARY_DIR = f"{CAIRN_DIR}/summaries"

# An argument value over this many tokens is worth a pointer (~40 tokens) once its call is old: it
# catches the files written and the edits made, and leaves paths, commands and patterns alone.
ARGUMENT_POINTER_TOKENS = 200

# The assistant's own text over this many tokens is worth a pointer (~35 tokens) once its turn is
# old: a paragraph of reasoning is, a one-line "Now run the tests." is not.
TEXT_POINTER_TOKENS = 100


class CannotCompact(CairnError):
    """Even after compaction the request would not fit the model's window."""


def needs_compaction(estimated_tokens: int, window: int, cfg: ContextConfig, growth: int = 0) -> bool:
    """True when a request of `estimated_tokens` is above the high-water mark of `window`, or above the
    low-water mark with the history grown by more than `cfg.compact_growth` of the window (`growth`, in
    tokens, estimated: `History.growth` times the counter's ratio) since the last compaction.

    The second keeps the context near the low mark all run long: each compaction then rewrites only
    what is above the part that stays (the digests, the recent turns), and every step between reads
    a small cached prefix. Waiting for the high mark reads twice as much at every step for fewer, larger
    rewrites, which costs more on real work (docs/compaction.md)."""
    grown = cfg.compact_growth > 0 and growth > cfg.compact_growth * window
    return estimated_tokens > (cfg.low_water if grown else cfg.high_water) * window


def compact(
    history: History,
    *,
    window: int,
    cfg: ContextConfig,
    save: Save,
    summarize: Summarize,
    step: int,
    next_summary_number: int,
    overhead_tokens: int = 0,
    counter: TokenCounter | None = None,
    summary_prefix: str = "",
    prefix: Sequence[dict[str, Any]] = (),
) -> Compaction:
    """Bring the history down to `cfg.low_water × window`, apply that to it, and return the event.

    `overhead_tokens` is the estimate of the rest of the request (system prompt, tools, task, tail;
    `TokenCounter.overhead` gives it), which counts against the window as well. `counter` is the
    calibrated counter of the loop (default: the history's own). `prefix` is what the agent's request
    puts before the history (the system prompt and the task), for the summary request. Files are written
    through `save` before the event exists, so a recorded pointer never points at nothing.

    It does what it may even when that stops short of the low-water mark; when nothing may be moved
    at all, the event changes nothing (no replacements, no span) and need not be recorded. Raises
    `CannotCompact`, leaving the history as it was, when the request would still be over `window`.
    """
    counter = counter or history.counter

    def estimate(raw_history_tokens: int) -> int:
        return round(overhead_tokens + raw_history_tokens * counter.ratio)

    def fits(raw_history_tokens: int, mark: float = cfg.low_water) -> bool:
        return estimate(raw_history_tokens) <= mark * window

    entries = list(history)
    recent = _recent_results(entries, cfg.keep_recent_results)
    turns = _turns(entries)
    protected = _protected_turns(turns, recent, cfg)
    # The calls whose results stay whole keep their arguments; only the last `keep_recent_turns`
    # turns keep the assistant's text as well (its reasoning is worth less once its step is done).
    calls = {e.id for turn in turns[max(0, len(turns) - protected) :] for e in turn if e.kind == "assistant"}
    last = {e.id for turn in turns[max(0, len(turns) - cfg.keep_recent_turns) :] for e in turn if e.kind == "assistant"}
    tokens = {entry.id: entry.tokens for entry in entries}  # as they will be after the compaction
    replacements = _pointers(entries, recent | last, calls, tokens, counter, save, fits)
    total = sum(tokens.values())

    digest = None if fits(total) else make_digest(
        turns[: max(0, len(turns) - protected)], tokens, replacements, counter, summary_prefix, step,
        # The budget in raw tokens, as the history counts them.
        round(cfg.digest_budget * window / counter.ratio))
    # A digest when it leaves the request below the middle of the marks (the part that stays, the digests
    # and the recent turns, may be above the low mark: a summary then would be written at every compaction),
    # else a summary; a digest still, when no summary can be made.
    span = [] if fits(total) or (digest and fits(total - digest.removed + digest.tokens, (cfg.low_water + cfg.high_water) / 2)) else (
        _oldest_span(turns, protected, tokens, cfg, fits))
    kind, span_ids, summary, summary_path, kept = "pointers", [], None, None, {}
    after = "after turning old results into pointers and summarizing old turns"
    if digest is not None and not span:
        for path, text in digest.files:
            save(path, text)
        total += digest.tokens - digest.removed
        kind, span_ids, summary, summary_path, kept = "digest", digest.ids, digest.message, digest.path, digest.kept
        after = "after turning old results into pointers and folding old turns"
    elif span:
        kept, kept_tokens = keep(span, counter, save)  # (a long message's whole text goes to a file first)
        total += kept_tokens - sum(tokens[entry.id] for entry in span)
        # Hopeless even if the summary were empty: say so before paying for the summary.
        _fail_if_over(estimate(total), window, "even with every older turn summarized away")
        replaced = [
            replaced_message(entry, replacements[entry.id]) if entry.id in replacements else entry.message
            for entry in span
        ]
        # The history as it is, which the provider has cached; when that would not fit (the provider
        # refused it as too long), the span alone with its pointers, which is smaller but not cached.
        cached = estimate(history.tokens()) < window
        text = summarize(summary_request(prefix, history.messages() if cached else replaced, span)).strip()
        # A sub-agent shares the workspace: its prefix keeps its summaries from overwriting the parent's.
        summary_path = f"{SUMMARY_DIR}/{summary_prefix}{next_summary_number:03d}.md"
        save(summary_path, summary_file(next_summary_number, step, text, span, replaced))
        summary = summary_message(next_summary_number, summary_path, span, text, bool(kept))
        total += counter.message({"role": "user", "content": summary})
        kind, span_ids = "summary", [entry.id for entry in span]

    _fail_if_over(estimate(total), window, after)
    event = Compaction(
        step=step, kind=kind, span=span_ids, summary=summary, summary_path=summary_path, kept=kept,
        # A message inside the span disappears into the summary or digest; its pointer lives on in the file.
        replacements={id: content for id, content in replacements.items() if id not in span_ids},
        tokens_before=estimate(history.tokens()), tokens_after=estimate(total),
    )
    history.apply(event)
    return event


def _recent_results(entries: list[Entry], keep: int) -> set[str]:
    """Ids of the `keep` most recent tool results: the agent is probably still working with them."""
    results = [entry.id for entry in entries if entry.kind == "tool"]
    return set(results[max(0, len(results) - keep) :]) if keep else set()  # fewer than `keep`: all


def _pointers(
    entries: list[Entry],
    recent: set[str],
    keep_arguments: set[str],
    tokens: dict[str, int],
    counter: TokenCounter,
    save: Save,
    fits: Callable[[int], bool],
) -> dict[str, str]:
    """Turn old tool results, old assistant text and old long call arguments into pointers, oldest
    first, until it `fits`.

    `recent` holds the ids never touched; `keep_arguments`, the assistant messages whose text may
    go but whose calls stay as they are. Returns the replacements by message id in the form
    `History.apply` reads (see there), and updates `tokens` to match them. A file is saved only for a
    message that gets shorter, before the event exists, so a recorded pointer never points at nothing.
    """
    total = sum(tokens.values())
    replacements: dict[str, str] = {}
    for entry in entries:
        if fits(total):
            break
        if entry.id in recent or entry.pointer or entry.kind not in ("tool", "assistant") or entry.said is not None:
            continue  # (a call the person denied keeps their reason whole: context/person.py)
        if entry.kind == "tool":
            message, files = _result_pointer(entry)
        else:
            message, files = _assistant_pointers(entry, counter, arguments=entry.id not in keep_arguments)
        if message is entry.message:
            continue  # nothing in it is long
        pointer_tokens = counter.message(message)
        if pointer_tokens >= entry.tokens:
            continue  # a short message is cheaper kept whole than pointed at
        for path, text in files:
            save(path, text)
        replacements[entry.id], tokens[entry.id] = _replacement(entry, message), pointer_tokens
        total += pointer_tokens - entry.tokens
    return replacements


def _result_pointer(entry: Entry) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """One tool result as its pointer, and the file to save: none when the result is in one already."""
    path = entry.offloaded_to or obs_path(entry.step, entry.tool or "tool", entry.call_id or entry.id)
    files = [] if entry.offloaded_to else [(path, entry.content)]  # so that, like every pointer, it resolves
    return {**entry.message, "content": pointer_text(entry, path)}, files


def _assistant_pointers(
    entry: Entry, counter: TokenCounter, *, arguments: bool
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """One old assistant message with its long text and (if `arguments`) its long call arguments
    turned into pointers, and the files (path, text) that hold what they replaced. The message is
    `entry.message` itself when nothing in it is long."""
    message, files = entry.message, []
    text = entry.content
    if text and is_big(text, TEXT_POINTER_TOKENS, counter.count_text):
        # A call id, when there is one, keeps a parent's and a sub-agent's files apart (as for arguments).
        calls = message.get("tool_calls") or []
        label = (calls[0].get("id") if calls and isinstance(calls[0], dict) else None) or entry.id
        path = obs_path(entry.step, "assistant", label)
        message = {**message, "content": text_pointer(entry.step, text, path)}
        files.append((path, text))
    if arguments:
        calls, call_files = _argument_pointers(entry, counter)
        if call_files:
            message, files = {**message, "tool_calls": calls}, files + call_files
    return message, files


def _replacement(entry: Entry, message: dict[str, Any]) -> str:
    """A message turned into pointers, in the form `History.apply` reads (`replaced_message`)."""
    if entry.kind == "tool":
        return message["content"]
    if message.get("content") == entry.message.get("content"):
        return canonical_json(message["tool_calls"])  # the form old event logs hold
    return canonical_json({"content": message.get("content"), "tool_calls": message.get("tool_calls")})


def _argument_pointers(entry: Entry, counter: TokenCounter) -> tuple[list[Any], list[tuple[str, str]]]:
    """One assistant message's tool calls with every long argument value turned into a pointer.

    Each call so shortened has its arguments, as the history held them, to be saved whole to
    `/cairn/obs/<step>-<tool>-args-<call id>.txt`. Returns the new `tool_calls` and the files to save
    (path, text), none when no argument is long. Unparsable arguments stay as the model wrote them.
    """
    new_calls, files = [], []
    for call in entry.message.get("tool_calls") or []:
        arguments = call_arguments(call) or {}
        long = [key for key, value in arguments.items()
                if isinstance(value, str) and is_big(value, ARGUMENT_POINTER_TOKENS, counter.count_text)]
        if not long:
            new_calls.append(call)
            continue
        name = call["function"].get("name")
        # The call id keeps two runs on one workspace (a parent and its sub-agent) from sharing a file.
        path = obs_path(entry.step, f"{name if isinstance(name, str) else 'tool'}-args", call.get("id"))
        shortened = {**arguments, **{key: argument_pointer(arguments[key], path) for key in long}}
        new_calls.append(with_arguments(call, shortened))
        files.append((path, call["function"]["arguments"]))
    return new_calls, files


def _turns(entries: list[Entry]) -> list[list[Entry]]:
    """The history cut into turns: a message with the tool results that answer it."""
    turns: list[list[Entry]] = []
    for entry in entries:
        if entry.kind == "tool" and turns:
            turns[-1].append(entry)
        else:
            turns.append([entry])
    return turns


def _protected_turns(turns: list[list[Entry]], recent: set[str], cfg: ContextConfig) -> int:
    """How many of the last turns stay whole: `cfg.keep_recent_turns`, and at least those holding
    the results the pointer pass keeps whole (so a recent result keeps its call's arguments)."""
    first_recent = next((i for i, turn in enumerate(turns) if any(e.id in recent for e in turn)), len(turns))
    return max(cfg.keep_recent_turns, len(turns) - first_recent)


def _oldest_span(
    turns: list[list[Entry]],
    protected: int,
    tokens: dict[str, int],
    cfg: ContextConfig,
    fits: Callable[[int], bool],
) -> list[Entry]:
    """The oldest whole turns whose replacement by a summary makes the history fit.

    Whole turns, so an assistant's tool call is never parted from its results; the last
    `protected` turns are never taken. If no span is enough, it is every turn that may be taken;
    if those are no bigger than a summary would be, it is none, so a lone earlier summary is not
    summarized again at every step.
    """
    remaining = sum(tokens.values()) + cfg.summary_tokens
    span: list[Entry] = []
    for turn in turns[: max(0, len(turns) - protected)]:
        span.extend(turn)
        remaining -= sum(tokens[entry.id] for entry in turn if entry.said is None)  # the person's words stay
        if fits(remaining):
            break
    return span if sum(tokens[entry.id] for entry in span if entry.said is None) > cfg.summary_tokens else []


def summary_request(
    prefix: Sequence[dict[str, Any]], messages: Sequence[dict[str, Any]], span: Sequence[Entry]
) -> list[dict[str, Any]]:
    """The request that asks the model for a summary of `span`: the request's `prefix` and history
    `messages`, then one user message with the instruction (which steps to summarize, and how). Given
    the history as the last request sent it, every byte but that message's is a prefix the provider
    has cached."""
    instruction = (
        f"[cairn is compacting your context: the messages of steps {span[0].step} to {span[-1].step} above, "
        "but the person's, will be replaced by a summary you write now, and saved whole to a file you can read. "
        "Summarize those steps for yourself: decisions, facts learned, files written, errors met and their state, "
        "and every file path mentioned. Answer with the summary only, in plain text; call no tool.]"
    )
    return [*prefix, *messages, {"role": "user", "content": instruction}]


def summary_message(number: int, path: str, span: list[Entry], text: str, kept: bool = False) -> str:
    """The history message that stands for a summarized span (`kept`: the person's messages of those steps
    stay above it)."""
    first, last = span[0].step, span[-1].step
    return (
        f"[Summary {number:03d} of the earlier work (steps {first} to {last}), written by cairn when the "
        f"context filled up. The file {path} holds this summary, the path of every saved output of "
        f"those steps, and the replaced messages whole; read it with file_read when you need a detail.{KEPT * kept}]\n\n"
        + text
    )


def _fail_if_over(tokens: int, window: int, after: str) -> None:
    if tokens > window:
        raise CannotCompact(
            f"the context cannot fit the model's window: about {tokens} tokens {after}, "
            f"over the window of {window}",
            hint="use a model with a larger window, or lower context.keep_recent_turns and "
            "context.keep_recent_results",
        )
