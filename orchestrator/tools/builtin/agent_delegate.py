"""agent_delegate: a self-contained sub-task for a sub-agent on the same sandbox (orchestrator/agent/delegate.py).

The tool is made from an agent factory, the class of the agent that calls it, from which the child is
made: so neither the tool nor agent/delegate.py imports the loop."""

from __future__ import annotations

from typing import Any, Callable

from orchestrator.agent.delegate import delegate, open_child, resume_delegate
from orchestrator.tools.dispatch import Observation
from orchestrator.tools.registry import STRING, Tool, ToolContext, function_spec

SPEC = function_spec(
    "agent_delegate",
    "Hand a self-contained sub-task to a sub-agent: it starts with a fresh context (your task text only), "
    "works in the same work directory with the same tools, and you wait for it. You get back its summary and "
    "the paths it wrote. Good for a well-defined piece of work whose details you do not need to see.",
    {
        "task": {**STRING, "description": "The sub-task, complete: what to do, where, and what to report."},
        "max_steps": {"type": "integer", "description": "Step budget of the sub-agent (optional; capped)."},
    },
    ["task"],
)


def tool(agent_class: type) -> Tool:
    """The tool for agents of `agent_class` (the loop's Agent, or a subclass of it)."""

    def run(args: dict[str, Any], ctx: ToolContext) -> Observation:
        return delegate(ctx.agent, agent_class, ctx.call, ctx.step, args)

    def take_up(agent: Any, call: Any) -> Callable[[int], Observation] | None:
        """A child a crash cut off goes on where its log ends, if it got as far as having one."""
        child = open_child(agent.run_dir, call.id)
        if child is None:
            return None
        return lambda step: resume_delegate(agent, agent_class, child, step)

    return Tool(SPEC, run, take_up=take_up)
