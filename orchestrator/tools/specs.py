"""The built-in tools the model sees (names and arguments are a contract: CONTRACTS.md).

The list is fixed for the whole run and serialized with sorted keys, so it is part of the stable,
cached prefix. Names carry group prefixes (`shell_`, `file_`, `web_`, `todo_`, `task_`, `agent_`) so that a group
can be forced or masked through `tool_choice` without ever changing the list.
"""

from __future__ import annotations

import json
from typing import Any


def _tool(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


_STR = {"type": "string"}

BUILTIN_TOOLS: list[dict[str, Any]] = [
    _tool(
        "shell_exec",
        "Run a bash command in the sandbox (cwd starts at the work directory; cwd, variables and activated "
        "environments persist between calls). Output is stdout and stderr merged; a big output is saved "
        "to a file under /cairn/obs/ and you get its head, tail and path.",
        {
            "command": {**_STR, "description": "The command line."},
            "timeout": {"type": "number", "description": "Seconds before the command is killed (optional)."},
        },
        ["command"],
    ),
    _tool(
        "file_read",
        "Read a text file, optionally a range of lines.",
        {
            "path": {**_STR, "description": "Relative paths are relative to the work directory; absolute "
                     "paths reach anywhere in the container."},
            "offset": {"type": "integer", "description": "First line to read, 1-based (optional)."},
            "limit": {"type": "integer", "description": "How many lines to read (optional)."},
        },
        ["path"],
    ),
    _tool(
        "file_write",
        "Write a whole file (atomically; parent folders are created). Relative paths are relative to the "
        "work directory.",
        {"path": _STR, "content": {**_STR, "description": "The complete new content."}},
        ["path", "content"],
    ),
    _tool(
        "file_edit",
        "Replace one exact, unique occurrence of `old` with `new` in a file.",
        {"path": _STR, "old": {**_STR, "description": "Text that occurs exactly once."}, "new": _STR},
        ["path", "old", "new"],
    ),
    _tool(
        "web_fetch",
        "Fetch a web page (needs the network on); it is saved as text under /cairn/web/ and you get a "
        "preview and its path.",
        {"url": _STR},
        ["url"],
    ),
    _tool(
        "todo_write",
        "Replace todo.md in the work directory, your plan, with new markdown. It is shown to you at the end of "
        "every request; keep it current.",
        {"content": {**_STR, "description": "The whole new todo.md."}},
        ["content"],
    ),
    _tool(
        "task_done",
        "Finish the task. Call it once the work is complete and checked.",
        {"summary": {**_STR, "description": "What was done and where the results are."}},
        ["summary"],
    ),
    _tool(
        "ask_user",
        "Stop and ask the person a question; the run waits for the answer.",
        {"question": _STR},
        ["question"],
    ),
    _tool(
        "agent_delegate",
        "Hand a self-contained sub-task to a sub-agent: it starts with a fresh context (your task text only), "
        "works in the same work directory with the same tools, and you wait for it. You get back its summary and "
        "the paths it wrote. Good for a well-defined piece of work whose details you do not need to see.",
        {
            "task": {**_STR, "description": "The sub-task, complete: what to do, where, and what to report."},
            "max_steps": {"type": "integer", "description": "Step budget of the sub-agent (optional; capped)."},
        },
        ["task"],
    ),
]


def canonical(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tools as they are sent: every dict with sorted keys, so the bytes never vary."""
    return json.loads(json.dumps(tools, sort_keys=True))


def tool_names(tools: list[dict[str, Any]]) -> list[str]:
    return [t["function"]["name"] for t in tools]


def force(name: str) -> dict[str, Any]:
    """A `tool_choice` that forces one tool, leaving the tool list (and the cache) untouched."""
    return {"type": "function", "function": {"name": name}}
