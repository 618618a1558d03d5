"""Interactive mode (`cairn run` with no task): its banner, the `you>` prompt (with history, and
multi-line input) and the slash commands, which cairn answers itself: they never reach the model.

A message of several lines: end a line with a backslash to go on to the next, or open a block with a
line of three double quotes and close it with another. Ctrl-D or Ctrl-C at the prompt, or /exit, ends
the session; the run stays resumable.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any, Callable

from orchestrator.terminal import clean

COMMANDS = {
    "/help": "these commands",
    "/todo": "the agent's plan (todo.md)",
    "/diff": "what the run changed so far, file by file",
    "/cost": "tokens and cost so far",
    "/model": "the model this session talks to",
    "/exit": "end the session (Ctrl-D does too); cairn resume RUN goes on later",
}
# "/todo" and friends, and nothing like a path ("/etc/hosts is wrong" is a message for the model).
COMMAND = re.compile(r"^/[a-z]+$")
BLOCK = '"""'
HISTORY = Path("~/.cairn/history")
EXIT = "exit"


def banner(model: str) -> str:
    return (f"cairn, interactive · model {clean(model)}\n"
            "Type a task, then talk to the agent. /help lists commands; Ctrl-D or /exit ends the session.\n"
            'Several lines: end a line with \\ to go on, or put them between lines of """.')


def is_command(text: str) -> bool:
    return text.startswith("/") and bool(COMMAND.match(text.split(maxsplit=1)[0]))


def read_message(prompt: str, read: Callable[[str], str] = input, out: Any = None) -> str | None:  # noqa: ANN401
    """One message typed at `prompt`: a line, lines joined by a trailing backslash, or a block between
    lines of three double quotes. None on Ctrl-D or Ctrl-C (then the closing lines start on a line of
    their own)."""
    out = out or sys.stderr
    try:
        first = read(prompt)
        if first.strip() == BLOCK:
            lines = []
            while (line := read("... ")).strip() != BLOCK:
                lines.append(line)
            return "\n".join(lines).strip() or None
        lines = [first]
        while lines[-1].endswith("\\"):
            lines[-1] = lines[-1][:-1]
            lines.append(read("... "))
        return "\n".join(lines).strip() or None
    except (EOFError, KeyboardInterrupt):
        out.write("\n")
        out.flush()
        return None


def with_history() -> None:
    """Up and down arrows bring back earlier messages, of this session and the ones before (readline,
    where Python has it); kept in ~/.cairn/history."""
    try:
        import readline
    except ImportError:
        return
    import atexit

    path = HISTORY.expanduser()
    try:
        readline.read_history_file(path)
    except OSError:
        pass
    readline.set_history_length(1000)

    def save() -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            readline.write_history_file(path)
        except OSError:
            pass

    atexit.register(save)


def run_command(text: str, run: Any, session: Any) -> str | None:  # noqa: ANN401 - RunDir, Session
    """The answer to a slash command, or EXIT."""
    name = text.split(maxsplit=1)[0]
    if name == "/exit":
        return EXIT
    if name == "/help":
        return "\n".join(f"  {command:<7} {what}" for command, what in COMMANDS.items())
    if name == "/todo":
        from orchestrator.store.regular import read_regular

        todo = read_regular(run.workspace / "todo.md")
        return clean(todo).rstrip() if todo else "(no todo.md yet)"
    if name == "/diff":
        from orchestrator.inspect.changes import diff

        stat = diff(run, stat=True, stat_width=min(os.get_terminal_size(sys.stderr.fileno()).columns, 120)
                    if sys.stderr.isatty() else None)
        return clean(stat).rstrip() or "(no changes yet)"
    if name == "/cost":
        from orchestrator.display import money

        t = session.agent.state.totals
        return (f"{t.prompt_tokens:,} prompt tokens ({t.cache_hit_ratio:.0%} cached), {t.completion_tokens:,} "
                f"completion; {money(t)}")
    if name == "/model":
        return (f"model {clean(session.cfg.model.model)}"
                + (f" at {clean(session.cfg.model.api_base)}" if session.cfg.model.api_base else "")
                + f" (another: cairn resume {run.id} --model M)")
    return f"no command {name}; /help lists them"
