"""agent_delegate: a self-contained sub-task for a sub-agent on the same sandbox.

Running a sub-agent is the agent's business (orchestrator/agent/delegate.py, `delegate_tool`): this file
holds what the model sees and makes the tool from the two functions the agent side gives it, so the
tools import nothing of the agent. The composition root registers it (`builtin_tools`)."""

from __future__ import annotations

from typing import Any, Callable

from orchestrator.tools.outcome import Observation
from orchestrator.tools.registry import STRING, Tool, ToolContext, function_spec

SPEC = function_spec(
    "agent_delegate",
    "Hand a self-contained sub-task to a sub-agent: it starts with a fresh context (your task text only), "
    "works in the same work directory with the same tools, and you wait for it. You get back its summary and "
    "the paths it wrote. Good for a well-defined piece of work whose details you do not need to see. Several "
    "agent_delegate calls in one answer run at the same time, each in its own context: give independent "
    "sub-tasks (that do not write the same files) together.",
    {
        "task": {**STRING, "description": "The sub-task, complete: what to do, where, and what to report."},
        "max_steps": {"type": "integer", "description": "Step budget of the sub-agent (optional; capped)."},
    },
    ["task"],
)


def tool(run: Callable[[dict[str, Any], ToolContext], Observation],
         take_up: Callable[[Any, Any], Callable[[int], Observation] | None]) -> Tool:
    """The tool: `run` carries out a call; `take_up(agent, call)` gives what finishes a call a crash cut
    off (its child goes on where its log ends), or None when the child never began."""
    return Tool(SPEC, run, take_up=take_up)
