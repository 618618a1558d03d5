"""The files a digest or a summary leaves behind: what replaced messages were, whole, for the agent (or
a person) to read back with file_read. Their layout is never part of a request: a newcomer following a
run from the task to the model call can skip this module (bench/core_size.py counts it apart).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from orchestrator.context.history import Entry
from orchestrator.context.pointers import ARGUMENTS_PATH, TEXT_PATH, pointer_path


def digest_file(step: int, span: Sequence[Entry], messages: Sequence[dict[str, Any]], message: str,
                first: int | None = None) -> str:
    """The saved digest: the message that stands for the span, then the span's messages as they were.
    `first` is the first step the span stands for (a folded digest's entry has its compaction's step)."""
    parts = [
        f"# Steps {span[0].step if first is None else first} to {span[-1].step}",
        "",
        f"Folded at step {step} by cairn's compaction: {len(span)} messages replaced in the context by",
        "the digest below. The messages follow it as the context held them; a pointer in them names",
        "the file that holds what it replaced.",
        "",
        message,
        "",
        "## The replaced messages",
        "",
    ]
    return "\n".join(parts + replaced_messages(span, messages))


def summary_file(number: int, step: int, text: str, span: list[Entry], replaced: list[dict[str, Any]]) -> str:
    """The saved summary: the summary, the pointers of the span, and the span itself."""
    parts = [
        f"# Summary {number:03d}",
        "",
        f"Written at step {step} by cairn's compaction. It replaced {len(span)} messages "
        f"(steps {span[0].step} to {span[-1].step}) in the context.",
        "",
        text,
        "",
        "## Saved outputs of these steps",
        "",
    ]
    saved = [(entry, path) for entry, message in zip(span, replaced) for path in _saved_paths(entry, message)]
    parts += [f"- step {entry.step}, {entry.tool or 'tool call'}: {path}" for entry, path in saved] or ["- none"]
    parts += ["", "## The replaced messages, as they were in the context", ""]
    return "\n".join(parts + replaced_messages(span, replaced))


def replaced_messages(span: Sequence[Entry], messages: Sequence[dict[str, Any]]) -> list[str]:
    """The lines that keep a span's messages whole in its file (a digest's or a summary's): each with
    its kind, tool, step, text and tool calls."""
    parts: list[str] = []
    for entry, message in zip(span, messages):
        label = entry.kind + (f" {entry.tool}" if entry.tool else "") + (", failed" if entry.error else "")
        parts += [f"### {label} (step {entry.step})", "", str(message.get("content") or "")]
        for call in message.get("tool_calls") or []:
            function = call.get("function", {})
            parts.append(f"tool call {function.get('name')}: {function.get('arguments')}")
        parts.append("")
    return parts


def _saved_paths(entry: Entry, message: dict[str, Any]) -> list[str]:
    """Where the text of a span's tool result, or the arguments of a span's tool calls, are in files."""
    if entry.kind == "tool":
        path = entry.offloaded_to or pointer_path(str(message.get("content") or ""))
        return [path] if path else []
    if entry.kind == "assistant":
        arguments = [str((call.get("function") or {}).get("arguments")) for call in message.get("tool_calls") or []]
        text = TEXT_PATH.findall(str(message.get("content") or ""))
        return text + sorted({path for args in arguments for path in ARGUMENTS_PATH.findall(args)})
    return []
