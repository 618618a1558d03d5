"""Text from a run, made safe to print on a person's terminal.

Everything a run holds (the agent's messages, tool output, file names, a task from an imported run)
was written by something cairn does not trust. Printed as it is, an escape sequence in it can retitle
the window (`ESC ] 0 ; ... BEL`), clear the screen (`ESC [ 2 J`), move the cursor to overwrite earlier
lines, or on some terminals answer back into the shell. `clean` removes every control sequence and
control character but newline and tab, so the text shows as the characters it is.

`--json` output is not cleaned (it must stay the exact data): `json_text` writes it with every control
character escaped instead (`\\u001b`), which JSON's own escaping does for C0 only.
"""

from __future__ import annotations

import json
import re
from typing import Any

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


def _replace(match: re.Match[str]) -> str:
    return "\n" if match.group().startswith("\r\n") else ""


def clean(text: str | None) -> str:
    """`text` without control sequences or control characters (newline and tab stay; CR LF becomes LF)."""
    if not text:
        return ""
    return _SEQUENCE.sub(_replace, text)


def clean_name(name: str | None) -> str:
    """A file name on one line: cleaned, with its newlines and tabs shown as `\\n` and `\\t`."""
    return clean(name).replace("\n", "\\n").replace("\t", "\\t")


def json_text(doc: Any, indent: int | None = 2, sort_keys: bool = True) -> str:
    """`doc` as JSON that is safe on a terminal and still exactly `doc`: C0 controls are escaped by
    `json.dumps`; DEL and the C1 controls (which it leaves as they are without `ensure_ascii`) are
    escaped here. They can only occur inside JSON strings, so the escape is exact."""
    text = json.dumps(doc, indent=indent, sort_keys=sort_keys, ensure_ascii=False)
    return _C1_AND_DEL.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
