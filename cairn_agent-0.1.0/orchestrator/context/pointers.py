"""The pointers compaction leaves in the context: the one-line forms that stand for what moved to a file.

Each form names the file that holds what it replaced, and `pointer_path` reads that path back, so the
forms and the patterns that parse them live together here.
"""

from __future__ import annotations

import re

from orchestrator.context.history import Entry
from orchestrator.context.offload import byte_size, count_lines, stats_from_preview

# Lines that tell what went wrong. Only failed results are searched, so a loose pattern is fine.
_ERROR_LINE = re.compile(
    r"traceback|error|exception|exit (code|status)|failed|fail:|fatal|panic|timed out|timeout"
    r"|command not found|no such file|permission denied|segmentation fault|killed",
    re.IGNORECASE,
)
_EXCEPTION_LINE = re.compile(r"^[\w.]*(Error|Exception|Interrupt|Exit)\b:?")
MAX_ERROR_LINES = 8
MAX_ERROR_LINE_CHARS = 200


def text_pointer(step: int, text: str, path: str) -> str:
    """What stands for the long text of an old assistant message."""
    return f"[your text of step {step} moved out of the context: {byte_size(text)} bytes in {path}{_POINTER_END}"


def argument_pointer(value: str, path: str) -> str:
    """What stands for one long argument value of an old tool call."""
    return f"[{byte_size(value)} bytes; the original arguments are in {path}{_POINTER_END}"


# `pointer_path` reads the path back from this ending, so the two change together.
_POINTER_END = "; read it with file_read]"
_POINTER_PATH = re.compile(r" in (\S+)" + re.escape(_POINTER_END))
ARGUMENTS_PATH = re.compile(r"the original arguments are in (\S+)" + re.escape(_POINTER_END))
TEXT_PATH = re.compile(r"^\[your text of step \d+ moved out of the context: \d+ bytes in (\S+)" + re.escape(_POINTER_END))


def pointer_text(entry: Entry, path: str) -> str:
    """The one line that replaces a tool result, and for a failed result its error lines."""
    # An offloaded result's sizes are those of the whole output, which its preview's first line gives.
    whole = (count_lines(entry.content), byte_size(entry.content))
    stats = stats_from_preview(entry.content) if entry.offloaded_to else whole
    size = f"{stats[0]} lines, {stats[1]} bytes" if stats else "whole output"
    tool = entry.tool or "tool"
    line = f"[{tool} result of step {entry.step} moved out of the context: {size} in {path}{_POINTER_END}"
    if not entry.error:
        return line
    return "\n".join([line, "It failed; its first error lines:", *error_lines(entry.content)])


def pointer_path(content: str) -> str | None:
    """The file a pointer made by `pointer_text` names, or None if `content` is no such pointer."""
    match = _POINTER_PATH.search(content.split("\n", 1)[0])
    return match.group(1) if match else None


def error_line(text: str) -> str:
    """The one line that best says what went wrong: the last line naming an exception, else the first
    of `error_lines` (empty for an empty text)."""
    named = [line.strip() for line in text.split("\n") if _EXCEPTION_LINE.match(line.strip())]
    return _cut(named[-1], MAX_ERROR_LINE_CHARS) if named else next(iter(error_lines(text)), "")


def error_lines(text: str) -> list[str]:
    """The first lines that say what went wrong (or the first line, if none says so), capped."""
    lines = [line.strip() for line in text.split("\n") if line.strip()]
    matching = [line for line in lines if _ERROR_LINE.search(line)] or lines[:1]
    return [_cut(line, MAX_ERROR_LINE_CHARS) for line in matching[:MAX_ERROR_LINES]]


def _cut(line: str, limit: int) -> str:
    return line if len(line) <= limit else line[:limit] + " [...]"
