"""How an approval rule's `match` meets a call (agent/approvals.py decides with it): the units of a call a
rule is matched against, and how a pattern matches a unit of each kind.

- A shell line (shell_exec's and shell_start's command, shell_send's keys) is matched command by
  command (agent/shell_line.py); one the parser cannot see whole has no units, and is never allowed.
  shell_send's keys are the line they type: Enter ends a line; any other key (Tab, an arrow, Ctrl-R,
  Esc...) can make the shell run what is not written in them, so keys with one are not seen whole.
- A URL (web_fetch) is matched part by part: the scheme, then the host (and port), then the path and
  query, so a `*` never reaches from one into another: `https://*.python.org/*` does not match
  `https://evil.example/?x=.python.org/`. The path is taken with its `.` and `..` segments resolved
  (`%2e` counts as a dot). A pattern without `://` has any scheme; one without a path, any path.
- A path (the file tools) is made absolute from the work directory and normalised before it is matched,
  so `/workspace/*` does not match `/workspace/../usr/local/bin/git` (that is `/usr/local/bin/git`); a
  relative pattern is matched against the path relative to the work directory, and matches nothing
  outside it. Normalising is lexical: a symbolic link in the sandbox is resolved there, by the toolbox.
- Anything else: fnmatch over the whole subject.

A deny rule matches a call when it matches the subject as written or any unit of it; allow and ask rules
only through the units.
"""

from __future__ import annotations

import posixpath
import re
from fnmatch import fnmatchcase
from typing import Callable
from urllib.parse import urlsplit

from orchestrator.agent.shell_line import simple_commands
from orchestrator.tools.sessions import keys as key_names

# The calls whose text can be a shell command line, and the argument that holds it: a terminal session
# runs commands too, started (shell_start) or typed into a shell in it (shell_send).
SHELL_TEXT = {"shell_exec": "command", "shell_start": "command", "shell_send": "keys"}
PATH_TOOLS = ("file_read", "file_write", "file_edit")
_LINE_ENDS = ("\r", "\n")


def units(name: str, what: str) -> list[str] | None:
    """What rules are matched against for this call's subject `what`; None for a shell line that cannot
    be seen whole."""
    if name not in SHELL_TEXT:
        return [what]
    line = typed_line(what) if name == "shell_send" else what
    return simple_commands(line) if line is not None else None


def typed_line(keys: str) -> str | None:
    """The shell text `keys` types, Enter as a newline; None when a key other than Enter or a control
    character is among them."""
    out = []
    for piece in key_names.parse(keys):
        if piece in _LINE_ENDS:
            out.append("\n")
        elif len(piece) > 1 and piece.startswith("\x1b") or any(ord(c) < 32 or ord(c) == 127 for c in piece):
            return None
        else:
            out.append(piece)
    return "".join(out)


def matcher(name: str, workdir: str) -> Callable[[str, str], bool]:
    """(pattern, unit) -> whether the pattern matches, for units of this tool."""
    if name == "web_fetch":
        return url_matches
    if name in PATH_TOOLS:
        return lambda pattern, path: path_matches(pattern, path, workdir)
    return lambda pattern, text: fnmatchcase(text, pattern)


def url_matches(pattern: str, url: str) -> bool:
    if pattern == "*":
        return True
    if "://" not in pattern:
        pattern = "*://" + pattern
    try:
        wanted, got = urlsplit(pattern), urlsplit(url)
        host = got.hostname or ""
        port = got.port
    except ValueError:
        return False
    where = f"{host}:{port}" if port is not None else host
    if not (fnmatchcase(got.scheme.lower(), wanted.scheme.lower()) and fnmatchcase(where, wanted.netloc.lower())):
        return False
    rest = wanted.path + (f"?{wanted.query}" if wanted.query else "")
    if not rest:
        return True
    return fnmatchcase(_resolved(got.path) + (f"?{got.query}" if got.query else ""), rest)


def _resolved(path: str) -> str:
    """A URL's path with its dot segments removed (RFC 3986, 5.2.4), `%2e` taken as the dot it means."""
    segments = re.sub(r"%2[eE]", ".", path).split("/")
    out: list[str] = []
    for segment in segments[1:] if path.startswith("/") else segments:
        if segment == "..":
            if out:
                out.pop()
        elif segment != ".":
            out.append(segment)
    last = segments[-1] if segments else ""
    return "/" + "/".join(out) + ("/" if last in (".", "..") and out else "")


def path_matches(pattern: str, path: str, workdir: str) -> bool:
    if pattern == "*":
        return True
    absolute = posixpath.normpath(posixpath.join(workdir, path))
    if pattern.startswith("/"):
        return fnmatchcase(absolute, pattern)
    root = posixpath.normpath(workdir)
    if absolute != root and not absolute.startswith(root.rstrip("/") + "/"):
        return False
    return fnmatchcase(posixpath.relpath(absolute, root), pattern)
