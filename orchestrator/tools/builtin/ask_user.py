"""ask_user: the model asks the person a question; the run waits for the answer."""

from __future__ import annotations

from typing import Any

from orchestrator.tools.outcome import AskUser, Observation
from orchestrator.tools.registry import STRING, Tool, ToolContext, function_spec


def run(args: dict[str, Any], ctx: ToolContext) -> Observation:
    raise AskUser(args["question"])


TOOL = Tool(
    function_spec(
        "ask_user",
        "Stop and ask the person a question; the run waits for the answer.",
        {"question": STRING},
        ["question"],
    ),
    run,
)
