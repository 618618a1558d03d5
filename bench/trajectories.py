"""Real agent runs as the context bench's workload: published trajectories, replayed step by step.

A trajectory file is read into the task and one `Turn` a step (`context_bench.Turn`): the model's
message as it was sent, each tool call with the observation it got back, and the model's answer size.
The bench then plays those turns through cairn's pipeline and through a raw agent that keeps its whole
history, so both pay for exactly the same work.

Formats read (`load`):

- mini-SWE-agent's `.traj.json` (`trajectory_format` "mini-swe-agent-1" and "mini-swe-agent-1.1"): a
  `messages` list in OpenAI chat format. The text-based agent answers with a THOUGHT and one ```bash
  block, observed in the next user message (`<returncode>N</returncode><output>...`); that block becomes
  a `shell_exec` call whose `command` is the block, the rest of the answer stays the message's text. The
  tool-calling agent's `tool_calls` and `tool` messages are kept as they are.
- SWE-agent's `.traj` (a `history` list in the same chat format, with `thought`/`action` on assistant
  messages and the command in a ``` block), read the same way; its demonstration (`is_demo`) is left out.

Where the runs used by docs/compaction.md come from is written there; none is committed here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_BASH_BLOCK = re.compile(r"```(?:bash|sh)?\s*\n(.*?)```", re.DOTALL)
_RETURN_CODE = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>")
_KEEP = ("role", "content", "tool_calls", "tool_call_id")  # the chat fields; `extra` and the like go


class TrajectoryError(ValueError):
    """A file that is no trajectory this loader reads; the message says which and why, in one line."""


@dataclass(frozen=True)
class Trajectory:
    name: str
    task: str
    steps: list[tuple[dict[str, Any], list[tuple[str, str, str, bool]]]]
    """One (assistant message in OpenAI format, [(call id, tool, observation, failed)]) a step."""


def load(path: Path) -> Trajectory:
    """Read one trajectory file. Raises `TrajectoryError` with a one-line reason for anything else."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise TrajectoryError(f"{path}: not a readable JSON trajectory ({error})") from None
    messages = (data.get("messages") or data.get("history")) if isinstance(data, dict) else data
    if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
        raise TrajectoryError(f"{path}: no list of chat messages under 'messages' or 'history'")
    return from_messages(path.name.removesuffix(".json").removesuffix(".traj"), messages, where=str(path))


def from_messages(name: str, messages: Sequence[dict[str, Any]], where: str | None = None) -> Trajectory:
    """The task (the first user message) and the steps of one chat transcript; errors name `where`
    (default: `name`)."""
    where = where or name
    # SWE-agent puts a demonstration before the task (`is_demo`): the agent's prompt, not the run's task.
    chat = [{key: m[key] for key in _KEEP if m.get(key) is not None} for m in messages if not m.get("is_demo")]
    task = next((_text(m) for m in chat if m["role"] == "user"), None)
    if task is None:
        raise TrajectoryError(f"{where}: no user message holds a task")
    start = next(i for i, m in enumerate(chat) if m["role"] == "user") + 1
    steps: list[tuple[dict[str, Any], list[tuple[str, str, str, bool]]]] = []
    i = start
    while i < len(chat):
        message = chat[i]
        i += 1
        if message["role"] != "assistant":
            continue  # a stray user message (a format error's reminder) answers no call: the next step has it
        number = len(steps) + 1
        replies = []
        while i < len(chat) and chat[i]["role"] in ("tool", "user"):
            replies.append(chat[i])
            i += 1
        steps.append(_step(number, message, replies))
    if not steps:
        raise TrajectoryError(f"{where}: no assistant message after the task")
    return Trajectory(name, task, steps)


def _step(number: int, message: dict[str, Any], replies: list[dict[str, Any]]
          ) -> tuple[dict[str, Any], list[tuple[str, str, str, bool]]]:
    text = _text(message)
    calls = message.get("tool_calls")
    if calls:  # a tool-calling agent: its calls as they were, each answered by a tool message
        answers = {r.get("tool_call_id"): _text(r) for r in replies if r["role"] == "tool"}
        kept, results = [], []
        for n, call in enumerate(calls):
            function = call.get("function") or {}
            call_id = str(call.get("id") or f"call_{number}_{n}")
            arguments = function.get("arguments")
            arguments = arguments if isinstance(arguments, str) else json.dumps(arguments or {}, sort_keys=True)
            name = str(function.get("name") or "tool")
            kept.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}})
            observation = answers.get(call.get("id"), "")
            results.append((call_id, name, observation, _failed(observation)))
        return {"role": "assistant", "content": text, "tool_calls": kept}, results
    observation = "\n".join(_text(r) for r in replies)
    block = _BASH_BLOCK.search(text)
    if block is None:  # no command: the environment's reply (a format error) is its observation
        return {"role": "assistant", "content": text}, [] if not replies else [
            (f"call_{number}_0", "shell_exec", observation, True)]
    call_id = f"call_{number}_0"
    command = block.group(1).strip()
    thought = (text[: block.start()] + text[block.end() :]).strip()
    arguments = json.dumps({"command": command}, sort_keys=True)
    call = {"id": call_id, "type": "function", "function": {"name": "shell_exec", "arguments": arguments}}
    return {"role": "assistant", "content": thought, "tool_calls": [call]}, [
        (call_id, "shell_exec", observation, _failed(observation))]


def _failed(observation: str) -> bool:
    code = _RETURN_CODE.search(observation[:200])
    return bool(code and code.group(1) != "0")


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):  # content parts: the text ones, joined
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""
