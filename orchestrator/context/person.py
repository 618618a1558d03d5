"""The person's words in the context: compaction keeps them word for word.

Users of every agent complain most that after a compaction the agent forgets what they told it: a
correction, a preference, the answer to its own question. So what the person says (the task, which is
never in the history; their messages: `cairn say`, the page's Message, answers to ask_user, `resume
--message`, the interactive follow-ups; the reason they give for denying a call) is history no digest,
fold or summary takes away. When a digest or a summary replaces a span, the person's messages in it stay,
in order, just before the message that replaces it (`History.apply`), and the digest's line for each says
so. After a fold they sit together between the task and the fold line, part of the cached prefix from
then on. A check's feedback is not the person's: it is compacted like any message.

A message from the person longer than `MAX_KEPT_CHARS` stays as its head, with a pointer to a file that
holds it whole, once a compaction moves it (until then it is in the context whole). A denied call goes
into the digest with its result; the reason stays as a message of its own.
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.context.history import Entry
from orchestrator.context.offload import CAIRN_DIR, Save, byte_size, obs_path
from orchestrator.context.tokens import TokenCounter

# The sources of a UserMessage that are the person's words (events.UserMessage.source): not "check", nor
# "resume" (a failed check's output handed back by `cairn resume`), nor the old "inbox" (a workspace file).
PERSON_SOURCES = frozenset({"user", "answer", "say"})
# Who answers an approval as a person (events.ApprovalAnswered.by): their reason for a denial is kept.
PERSON_ANSWERS = frozenset({"terminal", "cairn approve"})
# About 4,000 tokens of prose: a message longer than this is kept as its head once compaction moves it.
MAX_KEPT_CHARS = 16_000
SAID_DIR = f"{CAIRN_DIR}/inbox"  # the person's long messages, whole
KEPT = " The person's messages of those steps are kept word for word above."  # said by a summary that kept some


def kept_text(entry: Entry) -> tuple[str | None, list[tuple[str, str]]]:
    """What stays of `entry` (one with the person's words, `entry.said`) when a digest or summary replaces
    its span, as `Compaction.kept` records it: None for the message as it is, else the text of the message
    that stays in its place; and the files (path, text) to save first."""
    if entry.kind == "tool":  # a denied call: its reason, as a message of its own
        path = entry.offloaded_to
        files = []
        if path is None and len(entry.said or "") > MAX_KEPT_CHARS:
            path = obs_path(entry.step, "denial", entry.call_id or entry.id)
            files.append((path, entry.said or ""))
        where = f" (the whole result is in {path})" if path else ""
        text = (f"[The person denied your {entry.tool or 'tool'} call of step {entry.step}{where}; their reason, "
                f"kept word for word by cairn:]\n{_head(entry.said or '', path)}")
        return text, files
    if entry.pointer or len(entry.content) <= MAX_KEPT_CHARS:
        return None, []  # as it is (a long one cut by an earlier compaction stays cut)
    path = f"{SAID_DIR}/{entry.step}-{entry.id}.txt"
    return _head(entry.content, path), [(path, entry.content)]


def _head(text: str, path: str | None) -> str:
    if len(text) <= MAX_KEPT_CHARS or path is None:
        return text
    return (text[:MAX_KEPT_CHARS] + f"\n[cairn keeps the person's long message here as its first "
            f"{MAX_KEPT_CHARS:,} characters; all {byte_size(text):,} bytes of it are in {path}; read it with "
            "file_read]")


def digest_line(entry: Entry, text: str) -> str:
    """A digest's line for a message (not a call or a result): for one of the person's, that it is kept above,
    and its start as a reminder."""
    if entry.said is None:
        return f"{entry.step}: [{entry.kind} message] {text}"
    return f"{entry.step}: [the person's message, kept word for word above] {text}"


def keep(span: Sequence[Entry], counter: TokenCounter, save: Save) -> tuple[dict[str, str | None], int]:
    """The person's words in a `span` a digest or summary replaces: `Compaction.kept` (by id, in the span's
    order), and the raw tokens the kept messages will take. The files a long one needs go to `save(path,
    text)`, before the event exists."""
    kept: dict[str, str | None] = {}
    tokens = 0
    for entry in span:
        if entry.said is None:
            continue
        text, needed = kept_text(entry)
        kept[entry.id] = text
        for path, whole in needed:
            save(path, whole)
        tokens += entry.tokens if text is None else counter.message({"role": "user", "content": text})
    return kept, tokens
