"""The person at the terminal. Interactive mode (`cairn run` with no task): its banner, the `you>`
prompt (with history, and multi-line input) and the slash commands, which cairn answers itself: they
never reach the model. And for any run that ends: the question it waits on, and the next command.

A message of several lines: end a line with a backslash to go on to the next, or open a block with a
line of three double quotes and close it with another. The history keeps it whole: the up arrow brings
the message back as one entry, not line by line. Ctrl-D or Ctrl-C at the prompt, or /exit, ends
the session; the run stays resumable.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Callable

from orchestrator.errors import UsageError
from orchestrator.ui.terminal import clean

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
_readline: list[Any] = []  # the readline module, once with_history() has loaded the history


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
    before = _history_length()
    try:
        first = read(prompt)
        if first.strip() == BLOCK:
            lines = []
            while (line := read("... ")).strip() != BLOCK:
                lines.append(line)
            return _kept_whole("\n".join(lines).strip(), before)
        lines = [first]
        while lines[-1].endswith("\\"):
            lines[-1] = lines[-1][:-1]
            lines.append(read("... "))
        return _kept_whole("\n".join(lines).strip(), before) if len(lines) > 1 else first.strip() or None
    except (EOFError, KeyboardInterrupt):
        out.write("\n")
        out.flush()
        return None


def _history_length() -> int:
    return _readline[0].get_current_history_length() if _readline else 0


def _kept_whole(message: str, before: int) -> str | None:
    """A message of several lines, as one entry of the history in place of its lines (and of the
    lines of three quotes around it): the up arrow brings it back whole, and Enter sends it whole."""
    if _readline:
        readline = _readline[0]
        for position in range(readline.get_current_history_length() - 1, before - 1, -1):
            readline.remove_history_item(position)
        if message:
            readline.add_history(message)
    return message or None


def with_history() -> None:
    """Up and down arrows bring back earlier messages, of this session and the ones before (readline,
    where Python has it); kept in ~/.cairn/history, an entry a line (a message of several lines, or one
    that starts with a double quote, as a JSON string)."""
    try:
        import readline
    except ImportError:
        return
    import atexit

    path = HISTORY.expanduser()
    readline.set_history_length(1000)
    for entry in _read_history(path):
        readline.add_history(entry)
    _readline[:] = [readline]

    def save() -> None:
        entries = [readline.get_history_item(i) for i in range(1, readline.get_current_history_length() + 1)]
        lines = [json.dumps(e, ensure_ascii=False) if "\n" in e or e.startswith('"') else e
                 for e in entries[-1000:] if e]
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        except OSError:
            pass

    atexit.register(save)


def _read_history(path: Path) -> list[str]:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    entries = []
    for line in lines[-1000:]:
        if line.startswith('"'):
            try:
                decoded = json.loads(line)
            except ValueError:
                decoded = None
            if isinstance(decoded, str):
                line = decoded
        if line:
            entries.append(line)
    return entries


def run_command(text: str, run: Any, live: Any) -> str | None:  # noqa: ANN401 - RunDir, LiveRun
    """The answer to a slash command, or EXIT."""
    name = text.split(maxsplit=1)[0]
    if name == "/exit":
        return EXIT
    if name == "/help":
        return "\n".join(f"  {command:<7} {what}" for command, what in COMMANDS.items())
    if name == "/todo":
        from orchestrator.store import run_files

        todo = run_files.read_text(run.workspace, "todo.md", max_bytes=256 * 1024)
        return clean(todo).rstrip() if todo else "(no todo.md yet)"
    if name == "/diff":
        from orchestrator.ui.inspect.changes import diff

        stat = diff(run, stat=True, stat_width=min(os.get_terminal_size(sys.stderr.fileno()).columns, 120)
                    if sys.stderr.isatty() else None)
        return clean(stat).rstrip() or "(no changes yet)"
    if name == "/cost":
        from orchestrator.ui.display import money

        t = live.agent.state.totals
        return (f"{t.prompt_tokens:,} prompt tokens ({t.cache_hit_ratio:.0%} cached), {t.completion_tokens:,} "
                f"completion; {money(t)}")
    if name == "/model":
        return (f"model {clean(live.cfg.model.model)}"
                + (f" at {clean(live.cfg.model.api_base)}" if live.cfg.model.api_base else "")
                + f" (another: cairn resume {run.id} --model M)")
    return f"no command {name}; /help lists them"


def first_task(model: str) -> str:
    """Interactive mode's opening: the banner, then the task (/help and /exit work here too)."""
    if not sys.stdin.isatty():
        raise UsageError("no task given and no terminal to ask for one: cairn run \"TASK\"")
    with_history()
    print(banner(model), file=sys.stderr, flush=True)
    while True:
        task = read_message("task> ")
        if task is None or task.split()[0] == "/exit":
            raise UsageError("no task given")
        if not is_command(task):
            return task
        print("  /help  these commands\n  /exit  end without starting a run\n(/todo, /diff, /cost and /model "
              "work once the run has started)", file=sys.stderr, flush=True)


def waiting_question(run_dir: Any) -> str | None:  # noqa: ANN401 - RunDir
    """The agent's question (ask_user) the run waits on; None when it waits for something else."""
    from orchestrator import events as ev

    for event in reversed(run_dir.events.read()[0]):
        if isinstance(event, ev.StatusChanged):
            return (event.result or "") if event.status == "waiting" and event.reason == "ask_user" else None
    return None


def next_command(run_dir: Any, status: str) -> str | None:  # noqa: ANN401 - RunDir
    """The exact command that takes an ended run further, where one does."""
    from orchestrator.agent.approval_answers import approval_wait

    if status == "waiting":
        if approval_wait(run_dir)[0] is not None:
            return f"answer it with: cairn approve {run_dir.id} --resume  (or --deny REASON)"
        return f'answer it with: cairn resume {run_dir.id} --message "ANSWER"'
    if status in ("stopped", "interrupted"):
        return f"go on with: cairn resume {run_dir.id}" + (' --message "..."' if status == "stopped" else "")
    return None
