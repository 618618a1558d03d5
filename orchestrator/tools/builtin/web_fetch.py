"""web_fetch: a web page, saved as text under /cairn/web/ (the toolbox's `fetch` op)."""

from __future__ import annotations

from typing import Any

from orchestrator.tools.outcome import BadCall, Observation
from orchestrator.tools.registry import STRING, Tool, ToolContext, function_spec


def run(args: dict[str, Any], ctx: ToolContext) -> Observation:
    if not ctx.sandbox.network_enabled:
        raise BadCall("web_fetch needs the network, and this run's sandbox has none (start it with --network bridge)")
    r = ctx.op("fetch", url=args["url"])
    return Observation(
        f"[{r['status']} {r['content_type']}, {r['bytes']} bytes, saved as text to {r['path']}]\n{r['text']}",
        error=not 200 <= int(r["status"]) < 400,
    )


TOOL = Tool(
    function_spec(
        "web_fetch",
        "Fetch a web page (needs the network on); it is saved as text under /cairn/web/ and you get a "
        "preview and its path.",
        {"url": STRING},
        ["url"],
    ),
    run,
    op="fetch",
)
