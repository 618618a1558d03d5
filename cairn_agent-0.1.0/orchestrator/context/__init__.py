"""The context engine: what goes into each model request, and how it stays inside the window.

Pure Python with no I/O of its own: the loop hands it callbacks to save files in the sandbox and to
ask the model for a summary. docs/design.md ("Context layout") is the specification.
"""

from orchestrator.context.builder import TODO_MAX_BYTES, Request, build_request, normalize_tools, render_tail, todo_cut_note
from orchestrator.context.compaction import CannotCompact, Summarize, compact, needs_compaction
from orchestrator.context.history import Entry, History
from orchestrator.context.offload import (
    Save,
    Shaped,
    shape_assistant_message,
    shape_result,
    shape_write_arguments,
)
from orchestrator.context.tokens import Count, TokenCounter, canonical_json

__all__ = [
    "CannotCompact",
    "Count",
    "Entry",
    "History",
    "Request",
    "Save",
    "Shaped",
    "Summarize",
    "TODO_MAX_BYTES",
    "TokenCounter",
    "build_request",
    "canonical_json",
    "compact",
    "needs_compaction",
    "normalize_tools",
    "render_tail",
    "shape_assistant_message",
    "shape_result",
    "shape_write_arguments",
    "todo_cut_note",
]
