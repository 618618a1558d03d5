"""The tool registry: every tool the model can call is one `Tool` object, registered once.

A tool holds together what used to be spread over four places: its spec (the name, description and
JSON schema the model sees; required arguments are read from the schema), its handler (what the call
does, and how the answer becomes an Observation) and the toolbox op it uses in the sandbox (PROTOCOL.md),
if any. The built-in tools are one file each under `tools/builtin/`; MCP tools (`tools/mcp.py`) and
`agent_delegate` register the same way.

    registry = Registry(builtin_tools(delegate_tool(agent_class)))
    registry.add(my_tool)
    args = registry.parse_arguments("file_read", '{"path": "a.txt"}')   # or BadCall
    observation = registry.run("file_read", args, context)

The list is fixed for the whole run and serialized with sorted keys (`canonical`), so it is part of the
stable, cached prefix. Names carry group prefixes (`shell_`, `file_`, `web_`, `todo_`, `task_`, `agent_`)
so that a group can be forced or masked through `tool_choice` without ever changing the list.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable

from orchestrator.ports import Caller, ToolContext
from orchestrator.tools.outcome import BadCall, Observation

if TYPE_CHECKING:
    from orchestrator.llm.types import ToolCall

__all__ = ["STRING", "Registry", "Tool", "ToolContext", "canonical", "force", "function_spec", "tool_names"]


Handler = Callable[[dict[str, Any], ToolContext], Observation]
# After a crash: given the agent and the call it had begun, a way to finish that call (agent_delegate's
# child goes on where its log ends), or None when the call cannot be taken up.
TakeUp = Callable[["Caller", "ToolCall"], "Callable[[int], Observation] | None"]


@dataclass
class Tool:
    """One tool: its spec as the model sees it, its handler, and the toolbox op the handler uses.

    `op` is None for a tool that never reaches the toolbox (task_done, agent_delegate, an MCP tool):
    such a call is not journaled in the sandbox. `checks_arguments` is False for tools whose own
    server checks them (MCP)."""

    spec: dict[str, Any]
    handler: Handler
    op: str | None = None
    checks_arguments: bool = True
    take_up: TakeUp | None = None
    # An MCP tool's annotations as its server listed them (readOnlyHint, ...; {} when it gave none), read
    # by agent/approvals.py; None for cairn's own tools.
    annotations: dict[str, Any] | None = None

    @property
    def journaled(self) -> bool:
        """Whether its calls are journaled in the sandbox: those of a tool with a toolbox op."""
        return self.op is not None

    @property
    def name(self) -> str:
        return self.spec["function"]["name"]

    @property
    def parameters(self) -> dict[str, Any]:
        return self.spec["function"].get("parameters") or {}

    def check(self, args: dict[str, Any]) -> None:
        """BadCall unless every required argument of the schema is there, with its type when it is a string."""
        if not self.checks_arguments:
            return
        properties = self.parameters.get("properties") or {}
        missing = [key for key in self.parameters.get("required") or ()
                   if key not in args or (properties.get(key, {}).get("type") == "string"
                                          and not isinstance(args[key], str))]
        if missing:
            raise BadCall(f"{self.name} needs the string argument(s): {', '.join(missing)}")

    def run(self, args: dict[str, Any], ctx: ToolContext) -> Observation:
        return self.handler(args, ctx)


def function_spec(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """An OpenAI function spec, the form every tool is sent in."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


STRING: dict[str, Any] = {"type": "string"}


class Registry:
    """The tools of one run, in the order they were registered (the order the model sees)."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self.extend(tools)

    def add(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name} is already registered")
        self._tools[tool.name] = tool

    def extend(self, tools: Iterable[Tool]) -> None:
        for tool in tools:
            self.add(tool)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self) -> list[dict[str, Any]]:
        """The tools as they are sent: registration order, every dict with sorted keys."""
        return canonical([tool.spec for tool in self._tools.values()])

    def parse_arguments(self, name: str, raw: str) -> dict[str, Any]:
        """The call's arguments as a dict, or BadCall saying exactly what is wrong with them."""
        tool = self._tools.get(name)
        if tool is None:
            raise BadCall(f"unknown tool {name!r}; the tools are: {', '.join(self._tools)}")
        try:
            args = json.loads(raw or "{}")
        except json.JSONDecodeError as exc:
            raise BadCall(f"the arguments of {name} are not valid JSON ({exc}); they were: {raw[:500]}") from None
        if not isinstance(args, dict):
            raise BadCall(f"the arguments of {name} must be a JSON object, not {type(args).__name__}")
        tool.check(args)
        return args

    def run(self, name: str, args: dict[str, Any], ctx: ToolContext) -> Observation:
        return self._tools[name].run(args, ctx)


def canonical(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tools as they are sent: every dict with sorted keys, so the bytes never vary."""
    return json.loads(json.dumps(tools, sort_keys=True))


def tool_names(tools: list[dict[str, Any]]) -> list[str]:
    return [t["function"]["name"] for t in tools]


def force(name: str) -> dict[str, Any]:
    """A `tool_choice` that forces one tool, leaving the tool list (and the cache) untouched."""
    return {"type": "function", "function": {"name": name}}
