"""cairn from Python: one run in the Docker sandbox, driven by the built-in offline demo script.

    python examples/python_api.py [RUNS_DIR]

With a real model, pass its litellm name instead (`model="anthropic/claude-sonnet-4-5"`). No display is
shown: the events go to `on_event`, and the result says how the run ended.
"""

from __future__ import annotations

import sys

import orchestrator


def show(event) -> None:  # noqa: ANN001 - an orchestrator.events event
    if event.type == "tool_started":
        print(f"  step {event.step}: {event.name}")


def main(runs_dir: str | None = None) -> orchestrator.RunResult:
    result = orchestrator.run(
        "Write a small Python program, run it, and report what it printed",
        model="scripted:demo",  # the offline demo; any litellm model string works the same way
        max_steps=20,
        runs_dir=runs_dir,
        on_event=show,
    )
    print(f"run {result.id}: {result.status}: {result.result}")
    print(f"tokens: {result.usage['prompt_tokens']} in, {result.usage['completion_tokens']} out")
    return result


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else None).exit_code)
