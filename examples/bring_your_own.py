"""cairn's loop on a model and a sandbox of your own: here the in-memory ones of orchestrator.testing.

    python examples/bring_your_own.py [RUNS_DIR]

A model is any object with `complete(messages, tools, tool_choice, history_end, on_text) -> Reply` and
`context_window() -> int`; a sandbox, any object with `call(op, **args) -> dict` answering the toolbox's
ops (sandbox_image/PROTOCOL.md). `ScriptedModel` plays a script in this process, without HTTP or
litellm; `LocalSandbox` runs the toolbox's ops over a folder of this machine, without Docker (and
without a wall: commands run as you). No Docker engine and no model service are needed.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import orchestrator
from orchestrator.testing import LocalSandbox, ScriptedModel

SCRIPT = {"turns": [
    {"content": "First the plan.",
     "tool_calls": [{"name": "todo_write", "arguments": {"content": "- [ ] write add.py\n- [ ] run it\n"}}]},
    {"tool_calls": [{"name": "file_write", "arguments": {"path": "add.py", "content": "print(2 + 3)\n"}}]},
    {"tool_calls": [{"name": "shell_exec", "arguments": {"command": "python3 add.py"}}]},
    {"tool_calls": [{"name": "task_done", "arguments": {"summary": "add.py prints 5"}}]},
]}


def main(runs_dir: str | None = None) -> orchestrator.RunResult:
    project = Path(tempfile.mkdtemp(prefix="byo-project-"))  # the folder the agent works in, in place
    agent = orchestrator.Agent(
        model=ScriptedModel(SCRIPT),
        sandbox=LocalSandbox(project),
        tools=["todo_write", "file_write", "shell_exec"],  # task_done is always offered
        runs_dir=runs_dir or Path(tempfile.mkdtemp(prefix="byo-runs-")),
    )
    result = agent.run("Write add.py, which prints 2 + 3, and run it")
    print(f"run {result.id}: {result.status}: {result.result}")
    print(f"{project}/add.py: {(project / 'add.py').read_text().strip()}")
    return result


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else None).exit_code)
