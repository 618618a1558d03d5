"""An MCP tool as the model sees it: its function spec (name, description, parameters), its hints, the
rules its name must follow, and its result as text (as tiny-agents formats it). The hub (mcp.py) lists
and calls the tools; this module only shapes what goes between them and the model."""

from __future__ import annotations

import json
import re
from typing import Any

NAME_LIMIT = 64
_BAD_NAME_CHARS = re.compile(r"[^a-zA-Z0-9_-]+")


def mcp_spec(name: str, tool: Any) -> dict[str, Any]:
    schema = dict(sdk_field(tool, "input_schema", "inputSchema") or {})
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    description = getattr(tool, "description", None) or getattr(tool, "title", None) or f"The MCP tool {tool.name}."
    return json.loads(json.dumps(
        {"type": "function", "function": {"name": name, "description": description, "parameters": schema}},
        sort_keys=True))


def hints(tool: Any) -> dict[str, Any]:
    """The tool's annotations as its server listed them (readOnlyHint, destructiveHint, openWorldHint,
    idempotentHint), only those it set; {} for a tool without any."""
    annotations = getattr(tool, "annotations", None)
    if annotations is None:
        return {}
    data = annotations.model_dump(by_alias=True, exclude_none=True) if hasattr(annotations, "model_dump") else dict(annotations)
    return {key: value for key, value in data.items() if key.endswith("Hint")}


def clean_name(name: str) -> str:
    return (_BAD_NAME_CHARS.sub("_", name).strip("_") or "tool")[:NAME_LIMIT]


def unique_name(name: str, taken: set[str]) -> str:
    candidate, n = name, 2
    while candidate in taken:
        suffix = f"_{n}"
        candidate, n = name[: NAME_LIMIT - len(suffix)] + suffix, n + 1
    taken.add(candidate)
    return candidate


def format_result(result: Any) -> str:
    """A CallToolResult as text, as tiny-agents formats it; binary parts are described, not inlined."""
    parts = []
    for item in getattr(result, "content", None) or []:
        kind = getattr(item, "type", None)
        if kind == "text":
            parts.append(item.text)
        elif kind in ("image", "audio"):
            parts.append(f"[{kind} {sdk_field(item, 'mime_type', 'mimeType') or ''}, about {len(item.data) * 3 // 4} bytes; "
                         "not shown]")
        elif kind == "resource":
            resource = item.resource
            text = getattr(resource, "text", None)
            parts.append(text if isinstance(text, str) else f"[binary resource {resource.uri}, not shown]")
        elif kind == "resource_link":
            parts.append(f"[resource {getattr(item, 'uri', '')}]")
    structured = sdk_field(result, "structured_content", "structuredContent")
    if not parts and structured is not None:
        parts.append(json.dumps(structured, ensure_ascii=False, sort_keys=True))
    return "\n".join(parts) if parts else "[no content]"


def sdk_field(obj: Any, snake: str, camel: str) -> Any:
    """A field of an SDK object: mcp 2.x names them in snake_case, 1.x in camelCase."""
    value = getattr(obj, snake, None)
    return value if value is not None else getattr(obj, camel, None)
