"""cairn's frames around text from the sandbox, and that text made unable to open or close one.

Two frames hold text the sandbox wrote: the status block at the end of every request
(`<cairn-status>`: todo.md, notices, the critic's note) and the project's instructions in the system
prompt (`<project-instructions>`: AGENTS.md). A repository can ship either file with a frame's closing
tag in it, followed by "a message from your user", or a whole forged status block. So every tag of
either frame in recited text is defused, in any spelling a model would read as one: any case, spaces
(`< /Cairn-Status >`), full-width or look-alike brackets (`＜`, `〈`, `‹`), HTML entities
(`&lt;/cairn-status&gt;`, `&#60;`, even escaped twice), characters that show as nothing (a zero-width space inside the
name), look-alike letters (a Cyrillic `с`), `_` or `.` for the hyphen. Such a tag becomes `[` its name
`]` (`[/cairn-status]`), which no reader takes for the frame. The same text always gives the same bytes,
so the prefix cache and a resume are unaffected.
"""

from __future__ import annotations

import re
import unicodedata

NAMES = ("cairn-status", "project-instructions")

# Brackets that read as < and > (NFKC already maps the full-width and small forms).
_OPEN = "<\u2039\u2329\u27e8\u3008\u02c2\u1438\u276e\u29fc\u276c\u2770"
_CLOSE = ">\u203a\u232a\u27e9\u3009\u02c3\u1433\u276f\u29fd\u276d\u2771"
_SLASH = "/\u2044\u2215\u29f8"
# Letters of the names that other scripts draw alike.
_LETTERS = {"\u0430": "a", "\u0441": "c", "\u0435": "e", "\u0456": "i", "\u043e": "o", "\u0440": "p",
            "\u0455": "s", "\u0458": "j", "\u03bf": "o", "\u03b9": "i", "\u03b1": "a", "\u03c4": "t",
            "\u03c5": "u", "\u0442": "t", "\u0433": "r", "\u0578": "n", "\u057c": "n"}
_ENTITY = re.compile(r"&(?:amp;)*(?:(lt|gt|sol|lsaquo|rsaquo|langle|rangle)|#0*(\d{1,7})|#[xX]0*([0-9a-fA-F]{1,6}));?",
                     re.IGNORECASE)  # `&amp;lt;`: escaped twice, and read once more
_NAMED = {"lt": "<", "gt": ">", "sol": "/", "lsaquo": "<", "rsaquo": ">", "langle": "<", "rangle": ">"}
# A tag in the skeleton (see _skeleton): an opening bracket, maybe a slash, a frame's name, up to 40
# more characters on its line (attributes), maybe the closing bracket.
_TAG = re.compile(r"<\s*/?\s*(?:cairn[\s_.\-]*status|project[\s_.\-]*instructions)\b[^<>\n]{0,40}(>)?")
_MAYBE = re.compile("[&" + _OPEN + "\uff1c\ufe64]")  # text without any of these holds no tag


def defuse(text: str) -> str:
    """`text` with every tag of either frame in it made inert (see the module's docstring)."""
    if not _MAYBE.search(text):
        return text
    skeleton, origin = _skeleton(text)
    out, done = [], 0
    for match in _TAG.finditer(skeleton):
        start, end = origin[match.start()], origin[match.end() - 1] + 1
        inner = skeleton[match.start() + 1: match.end() - (1 if match.group(1) else 0)].strip()
        out += [text[done:start], "[", re.sub(r"\s+", " ", inner.replace("<", "")), "]" if match.group(1) else ""]
        done = _end_of(text, end)
    return "".join(out) + text[done:] if out else text


def _skeleton(text: str) -> tuple[str, list[int]]:
    """The text as a model would read it for tags: entities decoded, NFKC, look-alike brackets, slashes
    and letters made plain, characters that show as nothing left out, lower case; and for each of its
    characters, where it came from in `text`."""
    chars: list[str] = []
    origin: list[int] = []
    i = 0
    while i < len(text):
        entity = _ENTITY.match(text, i) if text[i] == "&" else None
        if entity is not None:
            chars.append(_decoded(entity))
            origin.append(i)
            i = entity.end()
            continue
        c = text[i]
        if unicodedata.category(c) == "Cf":  # zero-width space, joiners, bidi marks: shown as nothing
            i += 1
            continue
        for plain in unicodedata.normalize("NFKC", c).lower() or " ":
            plain = "<" if plain in _OPEN else ">" if plain in _CLOSE else "/" if plain in _SLASH else plain
            chars.append(_LETTERS.get(plain, plain))
            origin.append(i)
        i += 1
    return "".join(chars), origin


def _decoded(entity: re.Match[str]) -> str:
    named, decimal, hexadecimal = entity.groups()
    if named:
        return _NAMED[named.lower()]
    code = int(decimal) if decimal else int(hexadecimal, 16)
    char = chr(code) if code < 0x110000 else "?"
    plain = unicodedata.normalize("NFKC", char)
    return "<" if plain in _OPEN else ">" if plain in _CLOSE else "/" if plain in _SLASH else plain[:1] or "?"


def _end_of(text: str, end: int) -> int:
    """Past the whole of an entity that ends the tag (`&gt;`): origin gives only its first character."""
    if text[end - 1:end] == "&":
        entity = _ENTITY.match(text, end - 1)
        if entity is not None:
            return entity.end()
    return end
