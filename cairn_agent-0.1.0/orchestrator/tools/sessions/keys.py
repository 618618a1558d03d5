"""The `keys` of shell_send: what the model writes, as the bytes a terminal's keyboard would send.

A newline is Enter, and a few names in angle brackets are keys (the tool's description lists them);
everything else is typed as it is, an unknown `<Name>` included, so text like `a <b> c` is never lost.
"""

from __future__ import annotations

import re

# Enter is a carriage return, as on a real terminal; the line discipline turns it into a newline for
# programs that read lines.
NAMED = {
    "enter": "\r",
    "tab": "\t",
    "esc": "\x1b",
    "backspace": "\x7f",
    "up": "\x1b[A",
    "down": "\x1b[B",
    "right": "\x1b[C",
    "left": "\x1b[D",
}
_TOKEN = re.compile(r"<([A-Za-z]+|[Cc]-[A-Za-z])>")
# How a key is shown to a person (cairn show, watch, the report): typed text stays as it is.
SHOWN = {"\r": "⏎", "\t": "⇥", "\x1b": "⎋", "\x7f": "⌫", "\x1b[A": "↑", "\x1b[B": "↓", "\x1b[C": "→", "\x1b[D": "←"}


def parse(keys: str) -> list[str]:
    """`keys` as a list of pieces: named keys as their bytes, typed text as itself."""
    pieces: list[str] = []
    at = 0
    for match in _TOKEN.finditer(keys):
        key = _key(match.group(1))
        if key is None:
            continue
        pieces += _typed(keys[at:match.start()])
        pieces.append(key)
        at = match.end()
    return pieces + _typed(keys[at:])


def to_bytes(keys: str) -> str:
    """What is written to the session's terminal for `keys`."""
    return "".join(parse(keys))


def shown(keys: str) -> str:
    """`keys` as a person reads them: ⏎ for Enter, ^C for Ctrl-C, arrows as arrows."""
    out = []
    for piece in parse(keys):
        if piece in SHOWN:
            out.append(SHOWN[piece])
        elif len(piece) == 1 and ord(piece) < 32:
            out.append("^" + chr(ord(piece) + 64))
        else:
            out.append(piece)
    return "".join(out)


def _key(name: str) -> str | None:
    if name[:2].lower() == "c-":
        return chr(ord(name[2].lower()) - ord("a") + 1)
    return NAMED.get(name.lower())


def _typed(text: str) -> list[str]:
    return ["\r" if piece == "\n" else piece for piece in re.split(r"(\n)", text.replace("\r\n", "\n")) if piece]
