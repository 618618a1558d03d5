"""The history: the part of every request between the task and the tail.

It is append-only, because every byte that stays put is a byte the provider's prefix cache can
reuse. The one exception is a compaction, and a compaction is an event in the log: `apply` replays it,
so a history rebuilt from the events after a resume is byte for byte the history the run had.

What the person said is never compacted away: a message of theirs (and the reason they gave for denying a
call) that a digest or a summary replaces stays, word for word and in order, just before the message
that stands for its span (`kept_entry`), so every later request holds it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from typing import Any, Literal

from orchestrator.context.tokens import Count, TokenCounter
from orchestrator.events import Compaction

Kind = Literal["assistant", "tool", "user", "summary", "digest"]

_KIND_OF_ROLE: dict[str, Kind] = {"assistant": "assistant", "tool": "tool", "user": "user"}

# Values that need no copy: a message shares them with its copies without any risk.
_ATOMIC = frozenset({str, int, float, bool, type(None)})


@dataclass(frozen=True)
class Entry:
    """One history message and what cairn knows about it. `message` is never changed in place."""

    id: str  # the id of the event that created it ("e42"), stable across resumes
    message: dict[str, Any]  # OpenAI chat format
    step: int
    kind: Kind
    tokens: int  # raw tokens of the message's canonical JSON
    tool: str | None = None
    call_id: str | None = None
    error: bool = False
    offloaded_to: str | None = None  # where the whole result text is, if not in the message
    said: str | None = None  # the person's words it carries (their message; a denied call's reason): kept
    pointer: bool = False  # a compaction replaced the content with a pointer

    @property
    def content(self) -> str:
        content = self.message.get("content")
        return content if isinstance(content, str) else ""


class History:
    """The ordered history messages, with their token counts kept as a running sum."""

    def __init__(self, counter: TokenCounter | None = None, *, count: Count | None = None) -> None:
        """Counts with `counter`, else with a new counter around `count`, else with cl100k_base.

        Give it the loop's own `TokenCounter` where you can: compaction reads the calibrated ratio
        from `history.counter` unless it is handed a counter.
        """
        self.counter = counter or TokenCounter(count)
        self._entries: list[Entry] = []
        self._index: dict[str, int] = {}
        self._tokens = 0
        self._compacted_at = 0  # raw tokens the last compaction left: what `growth` counts from

    def append(
        self,
        id: str,
        message: dict[str, Any],
        step: int,
        *,
        kind: Kind | None = None,
        tool: str | None = None,
        call_id: str | None = None,
        error: bool = False,
        offloaded_to: str | None = None,
        said: str | None = None,
    ) -> Entry:
        """Add a message at the end. It is copied, so the caller's dict can change without harm. `said`:
        the person's words the message carries, which no compaction drops (see `kept_entry`)."""
        if id in self._index:
            raise ValueError(f"history already has a message with id {id!r}")
        message = _copy_message(message)
        kind = kind or _KIND_OF_ROLE.get(message.get("role", ""))
        if kind is None:
            raise ValueError(f"message {id!r} has role {message.get('role')!r}; the history holds no such role")
        if kind == "tool":
            call_id = call_id or message.get("tool_call_id")
            tool = tool or message.get("name")
        entry = Entry(id, message, step, kind, self.counter.message(message), tool, call_id, error, offloaded_to, said)
        self._index[id] = len(self._entries)
        self._entries.append(entry)
        self._tokens += entry.tokens
        return entry

    def apply(self, event: Compaction) -> None:
        """Replay a compaction: pointer replacements first, then the summarized span, if any, with the
        person's words in it (`event.kept`) left before the message that replaces it.

        Applying an event twice changes nothing the second time, so the loop may both let `compact`
        apply it and send it through the same path as every recorded event.

        `event.replacements` maps a history id to its replacement, read by the kind of the entry
        (`replaced_message`): for a tool result, the new `content`; for an assistant message, the
        canonical JSON of its new `tool_calls` list (old arguments turned into pointers), or of an
        object with its new `content` and `tool_calls` (its old text turned into a pointer too). The
        event's schema predates the assistant cases and a plain string carries them exactly, so all
        go in the one field and old event logs replay unchanged.
        """
        for id, value in sorted(event.replacements.items(), key=lambda item: self._position(item[0])):
            position = self._position(id)
            entry = self._entries[position]
            message = replaced_message(entry, value)
            tokens = self.counter.message(message)
            self._tokens += tokens - entry.tokens
            self._entries[position] = replace(entry, message=message, tokens=tokens, pointer=True)
        if event.kind in ("summary", "digest"):
            self._replace_span(event)
        if event.replacements or event.span:  # as recorded: an event that changes nothing is not logged
            self._compacted_at = self._tokens

    def growth(self) -> int:
        """Raw tokens the history grew by since the last compaction (since it began, before any): a
        compaction's event sets the mark, so a history rebuilt from the events has the same growth."""
        return self._tokens - self._compacted_at

    def messages(self) -> list[dict[str, Any]]:
        """Copies of the messages, in order: whatever a caller does to them, the history is unchanged.

        Built every step for every message, so it copies dicts and lists by hand and shares strings
        (`_copy_message`): a deepcopy of each made this the one cost that grew with the history.
        """
        return [_copy_message(entry.message) for entry in self._entries]

    def tokens(self) -> int:
        """Raw tokens of all messages (see `TokenCounter.ratio` for what the provider will count)."""
        return self._tokens

    @property
    def entries(self) -> Sequence[Entry]:
        return tuple(self._entries)

    def get(self, id: str) -> Entry:
        return self._entries[self._position(id)]

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[Entry]:
        return iter(tuple(self._entries))

    def _replace_span(self, event: Compaction) -> None:
        if not event.span or event.summary is None or event.summary_path is None:
            raise ValueError(f"a {event.kind} compaction needs a span, a summary and a summary_path")
        # Applied already: its message is in, and the span's messages are gone, but for the person's.
        if summary_id(event.summary_path) in self._index and not (set(event.span) - set(event.kept)) & self._index.keys():
            return
        start = self._position(event.span[0])
        if [entry.id for entry in self._entries[start : start + len(event.span)]] != event.span:
            raise ValueError(f"compaction span {event.span[0]}..{event.span[-1]} is not a run of the history")
        message = {"role": "user", "content": event.summary}
        kind: Kind = "digest" if event.kind == "digest" else "summary"
        summary = Entry(summary_id(event.summary_path), message, event.step, kind, self.counter.message(message))
        if summary.id in self._index:
            raise ValueError(f"history already has a summary with id {summary.id!r}")
        removed = self._entries[start : start + len(event.span)]
        kept = [kept_entry(entry, event.kept[entry.id], self.counter) for entry in removed if entry.id in event.kept]
        self._entries[start : start + len(event.span)] = [*kept, summary]
        self._tokens += summary.tokens + sum(e.tokens for e in kept) - sum(entry.tokens for entry in removed)
        self._index = {entry.id: i for i, entry in enumerate(self._entries)}

    def _position(self, id: str) -> int:
        try:
            return self._index[id]
        except KeyError:
            raise ValueError(f"the history has no message with id {id!r}") from None


def replaced_message(entry: Entry, value: str) -> dict[str, Any]:
    """`entry`'s message with a compaction's replacement `value` put in (see `History.apply`)."""
    if entry.kind == "tool":
        return {**entry.message, "content": value}
    if entry.kind == "assistant":
        parsed = json.loads(value)
        if isinstance(parsed, list):
            return {**entry.message, "tool_calls": parsed}
        if isinstance(parsed, dict) and set(parsed) <= {"content", "tool_calls"}:
            message = {**entry.message, "content": parsed.get("content")}
            if parsed.get("tool_calls") is not None:
                message["tool_calls"] = parsed["tool_calls"]
            return message
        raise ValueError(f"compaction replaces the message {entry.id!r} with {type(parsed).__name__}")
    raise ValueError(f"compaction replaces {entry.id!r}, a {entry.kind} message; only tool results and calls move")


def _copy_message(value: Any) -> Any:  # noqa: ANN401 - a message, or any value inside one
    """A copy that shares no mutable part with `value`: dicts and lists are copied all the way down,
    strings and numbers are shared (immutable), and anything unusual is deepcopied."""
    if type(value) is dict:
        copied = dict(value)  # in C; only the values that are not atomic are copied again
        for key, item in value.items():
            if type(item) not in _ATOMIC:
                copied[key] = _copy_message(item)
        return copied
    if type(value) is list:
        return [_copy_message(item) for item in value]
    return value if type(value) in _ATOMIC else copy.deepcopy(value)


def kept_entry(entry: Entry, text: str | None, counter: TokenCounter) -> Entry:
    """What stays in the history of `entry`, one of the person's, when a digest or summary replaces its span:
    the entry itself (`text` None), or a message of the person's words with the `text` the compaction recorded
    (context/person.py: a denied call's reason, as the call goes into the digest; a very long message's head)."""
    message = {"role": "user", "content": text}
    return entry if text is None else Entry(entry.id if entry.kind == "user" else f"said-{entry.id}", message,
                                            entry.step, "user", counter.message(message), pointer=True, said=entry.said)


def summary_id(summary_path: str) -> str:
    """History id of a summary message, derived from its file, so a replay gives the same id."""
    return "summary-" + PurePosixPath(summary_path).stem
