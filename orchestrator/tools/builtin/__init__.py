"""The built-in tools, one file each, in the order the model sees them (a contract: docs/contracts.md).

Adding a tool is a new file here (or anywhere) that makes a `Tool`, and its registration: in this
list for a built-in, or `Registry.add` for a run's own (docs/extending.md)."""

from __future__ import annotations

from typing import Any

from orchestrator.tools.builtin import (agent_delegate, ask_user, file_edit, file_read, file_write, shell_exec,
                                        shell_send, shell_start, shell_stop, task_done, todo_write, web_fetch)
from orchestrator.tools.registry import Tool

# Every one but agent_delegate, which the agent side makes (agent/delegate.py's `delegate_tool`).
TOOLS: list[Tool] = [shell_exec.TOOL, file_read.TOOL, file_write.TOOL, file_edit.TOOL, web_fetch.TOOL,
                     todo_write.TOOL, task_done.TOOL, ask_user.TOOL]
# Terminal sessions come after agent_delegate, the order in which they joined the contract.
SESSION_TOOLS: list[Tool] = [shell_start.TOOL, shell_send.TOOL, shell_stop.TOOL]


def builtin_tools(delegate: Tool) -> list[Tool]:
    """The built-in tools in the model's order, with `delegate` (agent/delegate.py's `delegate_tool(Loop)`)
    in agent_delegate's place: the composition root gives it."""
    return [*TOOLS, delegate, *SESSION_TOOLS]


def builtin_specs() -> list[dict[str, Any]]:
    """What the model sees of the built-in tools, in order."""
    return [*(tool.spec for tool in TOOLS), agent_delegate.SPEC, *(tool.spec for tool in SESSION_TOOLS)]

