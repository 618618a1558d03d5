"""Asking a person on the terminal whether a tool call may run (orchestrator/agent/approvals.py decides when).

The live display stops (LiveDisplay.ask_approval), the call is shown whole, and one key answers it (on
a terminal, without Enter; elsewhere a line):

    y  run it, this once
    a  run it, and every later call this answer covers (the tool, or the shell pattern or rule that asked)
    n  do not run it; then an optional reason, which the model is given
    e  edit the arguments, then run it: typed as one JSON line right after the `e`, or (with nothing
       typed after it) in $VISUAL or $EDITOR when one is set, else typed as one JSON line when asked;
       what is not a JSON object is said and asked again

The end of input (Ctrl-D) leaves the question unanswered: the run then waits, as it does without a
terminal, for `cairn approve` or a resume on a terminal. Ctrl-C denies the call and stops the run after
its current step (interrupted, resumable).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from typing import Callable, TextIO

from orchestrator.ports import Answer, Question
from orchestrator.ui.terminal import clean

CHOICES = "[y]es once · [a]lways · [n]o · [e]dit"
EDITOR_OR_BACK = "\0"  # `e` then Enter alone, on a terminal


def ask(question: Question, read: Callable[[str], str] | None = None, out: TextIO | None = None,
        key: Callable[[str], str] | None = None) -> Answer | None:
    """The person's answer, or None when the input ended before one was given. `read(prompt)` reads a
    line; `key(prompt)` one key (on a terminal: the default when neither is given)."""
    out = out or sys.stderr
    if read is None:
        read = _reader(out)
        if key is None and sys.stdin.isatty():
            key = _key_reader(out)
    out.write(render(question))
    out.flush()
    try:
        while True:
            choice, rest = _choice(f"approve? {CHOICES}: ", read, key)
            if choice in ("y", "yes"):
                return Answer(True)
            if choice in ("a", "always"):
                return Answer(True, always=True)
            if choice in ("n", "no"):
                if key is None and not rest:  # a line that said only `n`: the reason next (a key asked it already)
                    rest = read("reason (optional, told to the model): ").strip()
                out.write(f"(denied: the model is told so{': ' + clean(rest) if rest else ''})\n")
                return Answer(False, rest or None)
            if choice in ("e", "edit"):
                if rest == EDITOR_OR_BACK and not (os.environ.get("VISUAL") or os.environ.get("EDITOR")):
                    continue
                edited = _edit(question.arguments, read, out, "" if rest == EDITOR_OR_BACK else rest)
                if edited is not None:
                    return Answer(True, arguments=edited)
                continue
            out.write("answer y, a, n or e\n")
    except EOFError:
        out.write("\n(no answer: the run waits for `cairn approve`)\n")
        return None
    except KeyboardInterrupt:
        out.write("\n(Ctrl-C: denied; the run stops after this step)\n")
        return Answer(False, "the person stopped the run (Ctrl-C)", stop=True)


def render(question: Question) -> str:
    """The question as the person sees it: the call whole, cleaned of control sequences."""
    always = f"always: every later call of {clean(question.grant)}"
    return (f"\n── approval needed ── {clean(question.name)}\n{clean(question.why)}\n"
            f"{shown_call(question.name, question.arguments)}\n({always}, for the rest of the run)\n")


def shown_call(name: str, arguments: str | dict | None, indent: str = "    ") -> str:
    """A call's arguments whole, as a person deciding on it must see them: a shell command as the lines
    it is, other arguments as indented JSON; cleaned of control sequences, never cut. Every place a person
    answers a question shows this (the terminal's question, `cairn show`, `show --step`, the exit line of
    a run that waits, `cairn approve`)."""
    try:
        args = json.loads(arguments or "{}") if isinstance(arguments, str) or arguments is None else arguments
    except json.JSONDecodeError:
        args = arguments
    text = {"shell_exec": "command", "shell_start": "command", "shell_send": "keys"}.get(name)
    if text and isinstance(args, dict) and isinstance(args.get(text), str):  # the command line as it is
        rest = {k: v for k, v in args.items() if k != text}
        body = args[text] + (f"\n{json.dumps(rest, ensure_ascii=False)}" if rest else "")
    elif name in ("file_write", "file_edit") and isinstance(args, dict) and set(args) <= FILE_ARGS \
            and all(isinstance(v, str) for v in args.values()):
        body = _file_body(name, args)  # the file as it would be written, or the edit as a diff
    else:
        body = args if isinstance(args, str) else json.dumps(args, indent=2, ensure_ascii=False)
    return "\n".join(indent + line for line in clean(body).splitlines() or [""])


def waiting_block(name: str, arguments: str | dict | None, why: str, indent: str = "  ") -> str:
    """The question a run waits for, for a person reading it off the terminal: why it was asked (every
    pattern or rule that asked) and the call whole."""
    return (f"{indent}why: {clean(why)}\n{indent}the call ({clean(name)}), whole:\n"
            + shown_call(name, arguments, indent + "    "))


FILE_ARGS = {"path", "content", "old", "new"}


def _file_body(name: str, args: dict[str, str]) -> str:
    if name == "file_write":
        lines = args.get("content", "").splitlines()
        return "\n".join([f"{args.get('path', '?')} ({len(lines)} line{'s' if len(lines) != 1 else ''}):",
                          *(f"  {line}" for line in lines)])
    return "\n".join([f"{args.get('path', '?')}:", *(f"- {line}" for line in args.get("old", "").splitlines()),
                      *(f"+ {line}" for line in args.get("new", "").splitlines())])


def _choice(prompt: str, read: Callable[[str], str], key: Callable[[str], str] | None) -> tuple[str, str]:
    """The answer's letter (or word) and what was typed after it on the same line: `e {"command": ...}`.
    With `key`, the letter is one key; after `e` (or `n`) the rest of the line is read."""
    if key is None:
        word, _, rest = read(prompt).strip().partition(" ")
        return word.lower(), rest.strip()
    letter = key(prompt).lower()
    if letter == "n":
        return letter, read(" · reason, told to the model (Enter: none): ").strip()
    if letter == "e":  # the JSON on the same line; Enter alone: the editor, or back to the question
        editor = "edit them in $EDITOR" if os.environ.get("VISUAL") or os.environ.get("EDITOR") else "back"
        return letter, read(f" · the arguments as one JSON line (Enter: {editor}): ").strip() or EDITOR_OR_BACK
    return letter, ""


def _edit(arguments: str, read: Callable[[str], str], out: TextIO, given: str = "") -> str | None:
    """Edited arguments as a JSON object's text; None to go back to the question. `given`: the JSON
    typed on the line of the answer, tried first."""
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR")
    try:
        text = json.dumps(json.loads(arguments or "{}"), indent=2, ensure_ascii=False)
    except json.JSONDecodeError:
        text = arguments
    while True:
        if given:
            text, given = given, ""
        elif editor:
            text = _in_editor(editor, text, out)
            if text is None:
                return None
        else:
            text = read("arguments as one JSON line (empty: back): ")
            if not text.strip():
                return None
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            out.write(f"not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); again\n")
            continue
        if not isinstance(value, dict):
            out.write(f"the arguments must be a JSON object, not {type(value).__name__}; again\n")
            continue
        return json.dumps(value, ensure_ascii=False)


def _in_editor(editor: str, text: str, out: TextIO) -> str | None:
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="cairn-arguments-", delete=False) as f:
        f.write(text + "\n")
        path = f.name
    try:
        done = subprocess.run([*shlex.split(editor), path])
        if done.returncode != 0:
            out.write(f"the editor exited with {done.returncode}; back to the question\n")
            return None
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        out.write(f"cannot run the editor {editor!r}: {exc}\n")
        return None
    finally:
        os.unlink(path)


def _key_reader(out: TextIO) -> Callable[[str], str]:
    """One key from the terminal, without Enter (cbreak mode: Ctrl-C still interrupts), echoed with the
    end of the line unless it is `e` or `n`, whose line goes on. Ctrl-D is the end of input."""
    import termios
    import tty

    def key(prompt: str) -> str:
        out.write(prompt)
        out.flush()
        fd = sys.stdin.fileno()
        before = termios.tcgetattr(fd)
        try:
            tty.setcbreak(fd)
            data = os.read(fd, 1)
            if data and data not in b"yanYAN" + b"eE":
                termios.tcflush(fd, termios.TCIFLUSH)  # the rest of an arrow key's sequence, or a paste
        finally:
            termios.tcsetattr(fd, termios.TCSADRAIN, before)
        if not data or data == b"\x04":
            raise EOFError
        letter = data.decode("utf-8", "replace")
        shown = letter if letter.isprintable() else ""
        out.write(shown if letter.lower() in ("e", "n") else shown + "\n")
        out.flush()
        return letter

    return key


def _reader(out: TextIO) -> Callable[[str], str]:
    def read(prompt: str) -> str:
        out.write(prompt)
        out.flush()
        line = sys.stdin.readline()
        if not line:
            raise EOFError
        return line.rstrip("\n")

    return read
