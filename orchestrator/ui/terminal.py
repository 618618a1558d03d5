"""Output on a person's terminal: text from a run made safe to print, and output that fits where it goes.

Everything a run holds (the agent's messages, tool output, file names, a task from an imported run)
was written by something cairn does not trust. Printed as it is, an escape sequence in it can retitle
the window (`ESC ] 0 ; ... BEL`), clear the screen (`ESC [ 2 J`), move the cursor to overwrite earlier
lines, or on some terminals answer back into the shell. `clean` removes every control sequence and
control character but newline and tab, so the text shows as the characters it is.

Bidirectional controls (U+202A-202E, U+2066-2069, the marks) would make a line show as something else
than it is (a command that reads one way and runs another): `clean` shows each as its code, `[U+202E]`.

`--json` output is not cleaned (it must stay the exact data): `json_text` writes it with every control
character and bidirectional control escaped instead (`\\u001b`, `\\u202e`), which JSON's own escaping
does for C0 only.

Where output goes: colour, the full width and a pager on a terminal; plain whole lines, no escape
codes, when piped or redirected (`NO_COLOR` and `TERM=dumb` are honoured).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from typing import Any, TextIO

# ECMA-48. The string sequences (OSC, DCS, SOS, PM, APC, by ESC or as C1 bytes) carry a payload up to a
# terminator (BEL or ST); an unterminated one is cut at the end of its line, which a terminal would
# otherwise swallow. Then CSI (parameters, intermediates, a final byte), then any other escape (ESC,
# intermediates, a final byte), then a lone ESC and the remaining C0 and C1 controls and DEL.
_SEQUENCE = re.compile(
    r"(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"
    r"|(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?"
    r"|\x1b[\x20-\x2f]*[\x30-\x7e]?"
    r"|\r\n?"
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"
)
_C1_AND_DEL = re.compile(r"[\x7f-\x9f]")
_ESCAPED = re.compile("[\x7f-\x9f\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]")
# Bidirectional controls (embeddings, overrides, isolates, marks) reorder what follows them on screen:
# `ls \u202e; rm -rf ~ \u202c` can show as something else than what runs. Shown as what they are.
BIDI = re.compile("[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]")


def _replace(match: re.Match[str]) -> str:
    return "\n" if match.group().startswith("\r\n") else ""


def clean(text: str | None) -> str:
    """`text` without control sequences or control characters (newline and tab stay; CR LF becomes LF),
    and with bidirectional controls shown as `[U+202E]` (`visible_bidi`)."""
    if not text:
        return ""
    return visible_bidi(_SEQUENCE.sub(_replace, text))


def visible_bidi(text: str) -> str:
    """`text` with each bidirectional control shown as its code, `[U+202E]`, instead of acting."""
    return BIDI.sub(lambda m: f"[U+{ord(m.group()):04X}]", text)


def clean_name(name: str | None) -> str:
    """A file name on one line: cleaned, with its newlines and tabs shown as `\\n` and `\\t`."""
    return clean(name).replace("\n", "\\n").replace("\t", "\\t")


def json_text(doc: Any, indent: int | None = 2, sort_keys: bool = True) -> str:
    """`doc` as JSON that is safe on a terminal and still exactly `doc`: C0 controls are escaped by
    `json.dumps`; DEL and the C1 controls (which it leaves as they are without `ensure_ascii`) are
    escaped here. They can only occur inside JSON strings, so the escape is exact."""
    text = json.dumps(doc, indent=indent, sort_keys=sort_keys, ensure_ascii=False)
    return _ESCAPED.sub(lambda m: f"\\u{ord(m.group()):04x}", text)



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


_DIFF_COLOURS = (("diff --git", "1"), ("+++", "1"), ("---", "1"), ("@@", "36"), ("+", "32"), ("-", "31"))


def colour_diff(patch: str) -> str:
    """A cleaned unified diff coloured as git colours one (headers bold, hunks cyan, added lines green,
    removed ones red). git's own colours cannot be used: they would have to pass the cleaning."""
    lines = []
    for line in patch.split("\n"):
        code = next((c for prefix, c in _DIFF_COLOURS if line.startswith(prefix)), None)
        lines.append(f"\x1b[{code}m{line}\x1b[m" if code and line else line)
    return "\n".join(lines)
