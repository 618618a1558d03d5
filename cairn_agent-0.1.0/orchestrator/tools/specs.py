"""The built-in tools' specs as one list (what the model sees: names and arguments are a contract,
docs/contracts.md), for code that needs the list without the tools: the run's first event, benches, tests.
The tools themselves are in `tools/builtin/`, one file each."""

from __future__ import annotations

from typing import Any

from orchestrator.tools.builtin import builtin_specs
from orchestrator.tools.registry import canonical, force, tool_names

__all__ = ["BUILTIN_TOOLS", "canonical", "force", "tool_names"]

BUILTIN_TOOLS: list[dict[str, Any]] = builtin_specs()
