"""Output that fits where it goes: colour, the full width and a pager on a terminal; plain whole lines,
no escape codes, when piped or redirected (`NO_COLOR` and `TERM=dumb` are honoured)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from typing import TextIO


def is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty() and os.environ.get("TERM") != "dumb"
    except ValueError:  # a closed stream
        return False


def colour(stream: TextIO) -> bool:
    """Colour for this stream: on a terminal, unless NO_COLOR (https://no-color.org) is set."""
    return is_terminal(stream) and not os.environ.get("NO_COLOR")


def width(stream: TextIO) -> int | None:
    """The terminal's width, or None when the output is not a terminal (then nothing is cut to fit)."""
    return shutil.get_terminal_size().columns if is_terminal(stream) else None


def page(text: str) -> None:
    """Print `text` to stdout; like git, through a pager when stdout is a terminal and the text is taller
    than it: `$PAGER`, else `less` (with `LESS=FRX` unless LESS is set: quit when it fits, keep
    colours, leave the screen as it was). Never when piped."""
    if not text.endswith("\n"):
        text += "\n"
    command = _pager() if is_terminal(sys.stdout) else None
    if command is None or text.count("\n") < shutil.get_terminal_size().lines:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    env = {**os.environ, "LESS": os.environ.get("LESS", "FRX"), "LV": os.environ.get("LV", "-c")}
    try:
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, env=env, text=True, errors="replace")
    except OSError:  # the pager named is not there: the text still reaches the person
        sys.stdout.write(text)
        return
    try:
        proc.stdin.write(text)
        proc.stdin.close()
    except BrokenPipeError:  # the person quit the pager before the end: that is fine
        pass
    proc.wait()


def _pager() -> list[str] | None:
    chosen = os.environ.get("PAGER")
    if chosen is not None:
        words = shlex.split(chosen)
        return None if not words or words == ["cat"] else words
    return ["less"] if shutil.which("less") else None
