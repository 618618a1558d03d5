"""Keeping big observations out of the context, without losing them.

A tool result that is too big is shaped *when it enters the history*: the whole text goes to a file
in cairn's directory of the run (`<run>/cairn/obs/`, /cairn/obs/ in the sandbox, outside the project
tree) and the history gets a preview (its head and its tail) with the file's absolute path. Doing
it at insertion, not later, means the history's bytes never have to change for it, so the
provider's prefix cache survives. The agent reads the file back with `file_read`, and so does a person.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator.config import ContextConfig
from orchestrator.context.framing import read_back

Save = Callable[[str, str], None]
"""`save(path, text)` writes text to a path of the sandbox (absolute, or relative to the work directory)."""

CAIRN_DIR = "/cairn"  # cairn's own files in the sandbox: <run>/cairn/ on the host
OBS_DIR = f"{CAIRN_DIR}/obs"

# A cl100k token is never shorter than one byte, so a text of at most `threshold` bytes is under the
# threshold without tokenizing it. A text far longer than the threshold is over it for any real
# output (only long runs of one character pack 32 bytes into a token), so a 200 MB log is not
# tokenized just to learn that it is big.
_SURELY_OVER_BYTES_PER_TOKEN = 32


@dataclass(frozen=True)
class Shaped:
    """What enters the history for one tool result, and where the whole text is, if elsewhere."""

    content: str
    offloaded_to: str | None = None


def obs_path(step: int, tool: str, call_id: str | None = None) -> str:
    """`/cairn/obs/<step>-<tool>[-<call id>].txt`, with names made safe for a file system."""
    name = f"{step}-{_safe(tool)}" + (f"-{_safe(call_id)}" if call_id else "")
    return f"{OBS_DIR}/{name}.txt"


def check_path(number: int) -> str:
    """Where the output of the run's `number`-th check is saved (orchestrator/agent/check.py): among cairn's own
    files, beside the offloaded outputs, so that it moves with them."""
    return f"{OBS_DIR.rsplit('/', 1)[0]}/checks/check-{number}.txt"


def count_lines(text: str) -> int:
    """Lines as `file_read` sees them: split on newlines; a final newline does not open a new line."""
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def byte_size(text: str) -> int:
    return len(text.encode("utf-8", errors="surrogatepass"))


def is_big(text: str, threshold_tokens: int, count: Callable[[str], int]) -> bool:
    """More than `threshold_tokens` tokens, tokenizing only when the byte size cannot tell."""
    size = byte_size(text)
    if size <= threshold_tokens:
        return False
    if size > threshold_tokens * _SURELY_OVER_BYTES_PER_TOKEN:
        return True
    return count(text) > threshold_tokens


def shape_result(
    step: int,
    tool: str,
    text: str,
    *,
    cfg: ContextConfig,
    count: Callable[[str], int],
    save: Save,
    saved_path: str | None = None,
    call_id: str | None = None,
) -> Shaped:
    """The history form of one tool result: the text itself, or a preview pointing at a file.

    `saved_path` is where the toolbox already saved the whole output (output too big to send back
    whole); it is reused, never written again. `call_id`, when given, goes into the file name, so two
    calls of one tool in one step do not write the same file.
    """
    if saved_path is None and not is_big(text, cfg.offload_tokens, count):
        return Shaped(text)
    path = saved_path or obs_path(step, tool, call_id)
    if saved_path is None:
        save(path, text)
    return Shaped(preview(text, path, cfg), offloaded_to=path)


def preview(text: str, path: str, cfg: ContextConfig) -> str:
    """Head and tail of `text`, framed by where the whole text is and how to read it (context/framing.py
    words that last sentence in the result's form)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # a final newline ends the last line; it does not start another
    keep = cfg.preview_lines
    parts = [header(path, count_lines(text), byte_size(text))]
    if len(lines) <= 2 * keep:
        parts.append(_cap_head("\n".join(lines), 2 * cfg.preview_chars))
    else:
        parts.append(_cap_head("\n".join(lines[:keep]), cfg.preview_chars))
        parts.append(f"[... {len(lines) - 2 * keep} lines omitted ...]")
        parts.append(_cap_tail("\n".join(lines[-keep:]), cfg.preview_chars))
    parts.append(read_back(path))
    return "\n".join(parts)


def header(path: str, lines: int, size: int) -> str:
    """First line of every preview. `stats_from_preview` reads it back, so change both together."""
    return f"[Output too big for the context: {lines} lines, {size} bytes, saved whole to {path}. Head and tail:]"


_HEADER = re.compile(r"^\[Output too big for the context: (\d+) lines, (\d+) bytes, saved whole to ")


def stats_from_preview(content: str) -> tuple[int, int] | None:
    """(lines, bytes) of the whole output behind a preview, or None if `content` is no preview."""
    match = _HEADER.match(content)
    return (int(match.group(1)), int(match.group(2))) if match else None


def shape_write_arguments(
    arguments: dict[str, Any], threshold_tokens: int, count: Callable[[str], int]
) -> dict[str, Any]:
    """Tool-call arguments as the history keeps them: a big written `content` becomes a note.

    The file is in the workspace, so the content is not lost, and the history does not carry every
    long file the agent writes twice (once written, once read). Arguments without a `path` are kept:
    without it the note could not say where the content went.
    """
    content, path = arguments.get("content"), arguments.get("path")
    if not isinstance(content, str) or not isinstance(path, str):
        return arguments
    if not is_big(content, threshold_tokens, count):
        return arguments
    note = f"[{byte_size(content)} bytes, {count_lines(content)} lines written to {path}; read it back with file_read]"
    return {**arguments, "content": note}


TODO_TOOL = "todo_write"


def todo_note(content: str) -> str:
    """What the history keeps of a `todo_write`'s content: its size, and where its text is shown."""
    return (
        f"[todo.md rewritten: {count_lines(content)} lines, {byte_size(content)} bytes; "
        "its current text is shown at the end of every request]"
    )


def call_arguments(call: dict[str, Any]) -> dict[str, Any] | None:
    """A tool call's arguments as a JSON object, or None when the model wrote anything else."""
    raw = (call.get("function") or {}).get("arguments")
    try:
        arguments = json.loads(raw) if isinstance(raw, str) else None
    except json.JSONDecodeError:
        return None
    return arguments if isinstance(arguments, dict) else None


def with_arguments(call: dict[str, Any], arguments: dict[str, Any]) -> dict[str, Any]:
    """`call` with other arguments, serialized with sorted keys, so the bytes are stable."""
    function = {**(call.get("function") or {}), "arguments": json.dumps(arguments, sort_keys=True, ensure_ascii=False)}
    return {**call, "function": function}


def shape_assistant_message(
    message: dict[str, Any], threshold_tokens: int, count: Callable[[str], int]
) -> dict[str, Any]:
    """An assistant message with `shape_write_arguments` applied to each of its tool calls.

    A `todo_write`'s content is always kept as a `todo_note`: the tail recites the current todo.md
    every request, so old versions in the history would only repeat it (and it is the one argument
    an agent rewrites all run long). Arguments that are not a JSON object stay exactly as the model
    wrote them: the failure is part of the history. Shaped arguments are re-serialized with sorted
    keys, so the bytes are stable.
    """
    calls = message.get("tool_calls")
    if not calls:
        return message
    shaped_calls = []
    for call in calls:
        arguments = call_arguments(call)
        if arguments is None:
            shaped_calls.append(call)
            continue
        if call["function"].get("name") == TODO_TOOL and isinstance(arguments.get("content"), str):
            shaped = {**arguments, "content": todo_note(arguments["content"])}
        else:
            shaped = shape_write_arguments(arguments, threshold_tokens, count)
        shaped_calls.append(call if shaped is arguments else with_arguments(call, shaped))
    return {**message, "tool_calls": shaped_calls}


def _cap_head(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f" [... cut at {limit} characters]"


def _cap_tail(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"[cut ... last {limit} characters:] " + text[-limit:]


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:80] or "_"
