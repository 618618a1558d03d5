"""Turning a tool call of the model into an action in the sandbox, and its result into text.

Every outcome is an observation the model sees, failures included: malformed arguments, unknown
tools, non-zero exits, timeouts and refused paths all come back as text with `error=True`.
`task_done` and `ask_user` end the step by raising, carrying what the loop must record.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Protocol

from orchestrator.config import SandboxConfig


class SandboxLike(Protocol):
    network_enabled: bool

    def call(self, op: str, **args: Any) -> dict[str, Any]: ...


@dataclass
class Observation:
    text: str  # the result itself: what a big result's file holds, byte for byte
    error: bool = False
    footer: str = ""  # facts about the result (exit code, time), kept in context after any preview
    saved_path: str | None = None  # the toolbox already saved the full output here
    note: str | None = None  # e.g. the sandbox was restarted
    child: dict[str, Any] | None = None  # agent_delegate: the sub-agent's id, log path, status, paths


class TaskDone(Exception):
    def __init__(self, summary: str) -> None:
        super().__init__(summary)
        self.summary = summary


class AskUser(Exception):
    def __init__(self, question: str) -> None:
        super().__init__(question)
        self.question = question


class BadCall(Exception):
    """The call cannot be run as written; the message goes back to the model."""


_REQUIRED: dict[str, tuple[str, ...]] = {
    "shell_exec": ("command",),
    "file_read": ("path",),
    "file_write": ("path", "content"),
    "file_edit": ("path", "old", "new"),
    "web_fetch": ("url",),
    "todo_write": ("content",),
    "task_done": ("summary",),
    "ask_user": ("question",),
    "agent_delegate": ("task",),  # run by the loop itself (orchestrator/delegate.py), not by ToolRunner
}


def parse_arguments(name: str, raw: str, extra: Collection[str] = ()) -> dict[str, Any]:
    """The call's arguments as a dict, or BadCall saying exactly what is wrong with them.

    `extra` names the run's other tools (MCP): their arguments are checked by their server."""
    if name not in _REQUIRED and name not in extra:
        raise BadCall(f"unknown tool {name!r}; the tools are: {', '.join([*_REQUIRED, *sorted(extra)])}")
    try:
        args = json.loads(raw or "{}")
    except json.JSONDecodeError as exc:
        raise BadCall(f"the arguments of {name} are not valid JSON ({exc}); they were: {raw[:500]}") from None
    if not isinstance(args, dict):
        raise BadCall(f"the arguments of {name} must be a JSON object, not {type(args).__name__}")
    missing = [key for key in _REQUIRED.get(name, ()) if not isinstance(args.get(key), str)]
    if missing:
        raise BadCall(f"{name} needs the string argument(s): {', '.join(missing)}")
    return args


class ToolRunner:
    """Runs the built-in tools against one sandbox."""

    def __init__(self, sandbox: SandboxLike, cfg: SandboxConfig, mcp: Any = None) -> None:
        self.sandbox = sandbox
        self.cfg = cfg
        self.mcp = mcp  # tools.mcp.McpHub of the run's MCP servers, if it has any

    @property
    def extra_names(self) -> Collection[str]:
        """The names of the run's MCP tools (those of its stored list, also when one has vanished)."""
        return self.mcp.known if self.mcp is not None else ()

    def run(self, name: str, args: dict[str, Any], obs_path: str) -> Observation:
        """`obs_path` is where a big output of this call is saved (`/cairn/obs/<step>-<tool>.txt`)."""
        if name not in _REQUIRED and self.mcp is not None:
            # Offload of a big result and the error flag are the loop's, as for the built-in tools.
            text, is_error = self.mcp.call(name, args)
            return Observation(text, error=is_error)
        if name == "task_done":
            raise TaskDone(args["summary"])
        if name == "ask_user":
            raise AskUser(args["question"])
        return getattr(self, "_" + name)(args, obs_path)

    def _shell_exec(self, args: dict[str, Any], obs_path: str) -> Observation:
        timeout = _number(args.get("timeout"), self.cfg.command_timeout)
        timeout = min(timeout, self.cfg.max_command_timeout)
        r = self.sandbox.call(
            "shell",
            command=args["command"],
            timeout=timeout,
            save_as=obs_path,
            inline_bytes=self.cfg.inline_output_bytes,
            max_file_bytes=self.cfg.max_output_file_bytes,
        )
        footer = f"[exit code {r['exit_code']}, {r['duration_ms'] / 1000:.1f} s]"
        if r.get("timed_out"):
            footer = f"[timed out after {timeout:g} s; the command's processes were killed; exit code 124]"
        if r.get("truncated"):
            footer += (f"\n[the output was {r['output_bytes']} bytes, {r['output_lines']} lines; only its head and "
                       f"tail came back; all of it is in {r['output_path']}]")
        footer = "\n".join([footer, *(n for n in (r.get("note"), r.get("sandbox_restarted")) if n)])
        return Observation(
            r["output"],
            error=r["exit_code"] != 0 or bool(r.get("timed_out")),
            footer=footer,
            saved_path=r.get("output_path") if r.get("truncated") else None,
            note=r.get("sandbox_restarted"),
        )

    def _file_read(self, args: dict[str, Any], obs_path: str) -> Observation:
        extra = {k: int(args[k]) for k in ("offset", "limit") if isinstance(args.get(k), (int, float))}
        r = self.sandbox.call("read", path=args["path"], **extra)
        footer = ""
        if r["start_line"] > 1 or r["end_line"] < r["total_lines"]:
            shown = r["end_line"] - r["start_line"] + 1
            by_size = r.get("truncated") and shown < extra.get("limit", r["total_lines"])
            footer = (f"[lines {r['start_line']}-{r['end_line']} of {r['total_lines']} of {r['path']}"
                      f"{' (cut at the size limit)' if by_size else ''}; read on with offset={r['end_line'] + 1}]")
        return Observation(r["content"], footer=footer)

    def _file_write(self, args: dict[str, Any], obs_path: str) -> Observation:
        r = self.sandbox.call("write", path=args["path"], content=args["content"])
        return Observation(f"wrote {r['bytes']} bytes to {r['path']}")

    def _file_edit(self, args: dict[str, Any], obs_path: str) -> Observation:
        r = self.sandbox.call("edit", path=args["path"], old=args["old"], new=args["new"])
        return Observation(f"edited {r['path']} ({r['bytes']} bytes now)")

    def _web_fetch(self, args: dict[str, Any], obs_path: str) -> Observation:
        if not self.sandbox.network_enabled:
            raise BadCall("web_fetch needs the network, and this run's sandbox has none (start it with --network bridge)")
        r = self.sandbox.call("fetch", url=args["url"])
        return Observation(
            f"[{r['status']} {r['content_type']}, {r['bytes']} bytes, saved as text to {r['path']}]\n{r['text']}",
            error=not 200 <= int(r["status"]) < 400,
        )

    def _todo_write(self, args: dict[str, Any], obs_path: str) -> Observation:
        r = self.sandbox.call("write", path="todo.md", content=args["content"])
        return Observation(f"todo.md updated ({r['bytes']} bytes)")


def _number(value: Any, default: float) -> float:
    if isinstance(value, (int, float)) and value > 0:
        return float(value)
    return default
