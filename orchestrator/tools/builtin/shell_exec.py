"""shell_exec: a bash command in the sandbox (the toolbox's `shell` op)."""

from __future__ import annotations

from typing import Any

from orchestrator.context.framing import exit_line
from orchestrator.tools.outcome import Observation
from orchestrator.tools.registry import STRING, Tool, ToolContext, function_spec


def run(args: dict[str, Any], ctx: ToolContext) -> Observation:
    # The sandbox fills in the output limits; the timeout is decided here, where the footer names it.
    timeout = ctx.cfg.shell_timeout(args.get("timeout"))
    r = ctx.op("shell", command=args["command"], timeout=timeout, save_as=ctx.obs_path)
    footer = exit_line(r["exit_code"], r["duration_ms"] / 1000)  # its form varies in the context (framing.py)
    if r.get("timed_out"):
        footer = (f"[timed out after {timeout:g} s; the command's processes were killed; exit code 124. To run "
                  "something longer, start it with shell_start and read it later with shell_send]")
    elif r.get("interrupted"):
        footer = "[interrupted: the person stopped the run while it ran; its processes were killed (it may have partly run)]"
    if r.get("truncated"):
        footer += (f"\n[the output was {r['output_bytes']} bytes, {r['output_lines']} lines; only its head and "
                   f"tail came back; all of it is in {r['output_path']}]")
    footer = "\n".join([footer, *(n for n in (r.get("note"), r.get("sandbox_restarted")) if n and not (
        r.get("interrupted") and n.startswith("interrupted:")))])
    return Observation(
        r["output"],
        error=r["exit_code"] != 0 or bool(r.get("timed_out")) or bool(r.get("interrupted")),
        footer=footer,
        saved_path=r.get("output_path") if r.get("truncated") else None,
        note=r.get("sandbox_restarted"),
    )


TOOL = Tool(
    function_spec(
        "shell_exec",
        "Run a bash command that finishes, and get its output and exit code. cwd starts at the work directory; "
        "cwd, variables and activated environments persist between calls. stdout and stderr are merged; a big "
        "output is saved to a file under /cairn/obs/ and you get its head, tail and path. Its stdin is empty, "
        "and it is killed at its timeout: run servers, long jobs and programs that ask for input with "
        "shell_start instead.",
        {
            "command": {**STRING, "description": "The command line."},
            "timeout": {"type": "number", "description": "Seconds before the command is killed (optional; the "
                        "run's default otherwise)."},
        },
        ["command"],
    ),
    run,
    op="shell",
)
