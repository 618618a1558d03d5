"""A shell command line taken apart into the simple commands it runs: what approval rules and "always"
answers are matched against (orchestrator/agent/approvals.py), so that `git push origin main; curl -d @f URL`
is two commands, each of which must be allowed, and not one string that `git push origin *` matches.

bashlex parses the line as bash would (lists, pipelines, `&&`, `||`, subshells, `$(...)`, backticks,
`<(...)`, loops, conditionals, function bodies). It does not run anything, so what a command does with
its arguments (`bash -c '...'`, `eval`, `xargs sh`, a script) stays one command: a rule that allows
`bash *` allows whatever bash is told to run.

bashlex does not look everywhere bash runs commands: not inside a parameter expansion
(`${x:-$(CMD)}`, `${x/$(CMD)/}`, `${a[$(CMD)]}`), after a tilde (`~$(CMD)`), in a here-document's body,
nor where bash evaluates a variable's value as arithmetic (`${a[i]}`, `${s:i}`: `i='b[$(CMD)]'` runs
CMD) or as a prompt (`${x@P}`). So the line is also read by a small scanner of bash's quoting, and a
place where a command may run that bashlex did not parse as one makes the whole line unseen: None, and
a line that is not seen whole is never allowed by a rule, only asked.
"""

from __future__ import annotations

import re

import bashlex

_SUBSTITUTIONS = ("commandsubstitution", "processsubstitution")
_PLAIN_SUBSCRIPT = re.compile(r"\s*(?:@|\*|-?\d+)\s*")


def simple_commands(line: str) -> list[str] | None:
    """The text of each simple command `line` runs (its assignments, words and redirections as written),
    in order, those nested in substitutions, loops, conditionals and function bodies included; None when
    the line cannot be parsed (bashlex knows no `case` and no `[[ ]]`, for one), or may run a command
    bashlex did not see (see the module's docstring)."""
    try:
        trees = bashlex.parse(line)
    except Exception:  # noqa: BLE001 - bashlex raises its own errors, NotImplementedError and others
        return None
    found: dict[tuple[int, int], str] = {}  # by position: bashlex shows a function's body twice
    parsed: set[int] = set()  # where the substitutions bashlex parsed begin
    bodies: list[tuple[int, int, bool]] = []  # here-documents: start, end, whether their delimiter is quoted

    def walk(node: bashlex.ast.node) -> None:
        if node.kind == "command":
            start, end = node.pos
            found[(start, end)] = line[start:end].strip()
        elif node.kind in _SUBSTITUTIONS:
            parsed.add(node.pos[0])
        elif node.kind == "redirect" and getattr(node, "heredoc", None) is not None:
            delimiter = line[node.output.pos[0]:node.output.pos[1]] if hasattr(node.output, "pos") else ""
            bodies.append((*node.heredoc.pos, any(q in delimiter for q in "'\"\\")))
        for value in vars(node).values():
            for child in value if isinstance(value, list) else [value]:
                if isinstance(child, bashlex.ast.node):
                    walk(child)

    try:
        for tree in trees:
            walk(tree)
    except RecursionError:
        return None
    code = list(line)
    for start, end, quoted in bodies:
        if not quoted and hides_a_command(line[start:end], "heredoc", set(), start):
            return None
        code[start:end] = " " * (end - start)  # the body is not shell code: the scanner skips it
    if hides_a_command("".join(code), "code", parsed):
        return None
    return list(found.values())


CODE = ("code", "(", "`")  # where bash reads commands: the line, a substitution or subshell, backticks
BRACES = ("{", '{"')  # ${...} in code, and within double quotes or a here-document (' is plain there)


def hides_a_command(text: str, mode: str, parsed: set[int], offset: int = 0) -> bool:
    """Whether `text` holds a place where bash may run a command that is not among `parsed` (the
    positions where bashlex's substitutions begin, `offset` being where `text` begins in the line).
    `mode`: "code" (a command line) or "heredoc" (the body of one whose delimiter is not quoted: quotes
    are plain characters there). Errs towards True: a `$(` in a comment counts, and so does one inside
    backticks' single quotes."""
    stack, i = [mode], 0  # the contexts: CODE, BRACES, '"' (double quotes), "heredoc"
    while i < len(text):
        c, top, two = text[i], stack[-1], text[i:i + 2]
        step = 1
        if c == "\\":
            step = 2
        elif c == "'" and top in ("code", "(", "{"):  # single quotes: nothing runs inside
            step = _quote_end(text, i + 1) - i
        elif two == "$'" and top in CODE:  # ANSI-C quotes, where \' does not end them
            step = _quote_end(text, i + 2, escapes=True) - i
        elif (c == '"' and top == '"') or (c == ")" and top == "(") or (c == "}" and top in BRACES) \
                or (c == "`" and top == "`"):
            stack.pop()
        elif c == '"' and top != "heredoc":
            stack.append('"')
        elif c == "`" or two == "$(" or (two in ("<(", ">(") and top in CODE):
            if offset + i not in parsed:
                return True  # a command bashlex did not parse
            stack.append("`" if c == "`" else "(")
            step = 1 if c == "`" else 2
        elif two == "$[" or (top in BRACES and (two == "@P" or (c == "[" and not _plain_subscript(text, i)))):
            return True  # old arithmetic, a prompt expansion, an arithmetic subscript: a value may run a command
        elif two == "${":
            if _offset_is_arithmetic(text, i + 2):
                return True
            stack.append('{"' if top in ('"', '{"', "heredoc") else "{")
            step = 2
        elif c == "(" and top in CODE:
            stack.append("(")
        i += step
    return False


def _quote_end(text: str, at: int, escapes: bool = False) -> int:
    """Just past the single quote that closes a quote whose text begins at `at` (the end if none)."""
    while at < len(text) and text[at] != "'":
        at += 2 if escapes and text[at] == "\\" else 1
    return at + 1


def _plain_subscript(text: str, at: int) -> bool:
    """Whether the subscript opening at `at` is `@`, `*` or a number: no arithmetic on a name."""
    end = text.find("]", at)
    return end > 0 and bool(_PLAIN_SUBSCRIPT.fullmatch(text[at + 1:end]))


def _offset_is_arithmetic(text: str, at: int) -> bool:
    """Whether the `${` expansion whose name begins at `at` takes a substring at an offset that is not a
    plain number (`${s:i}`, `${s:0:n}`: evaluated as arithmetic, so a name's value may run a command)."""
    match = re.match(r"[#!]?[A-Za-z_][A-Za-z0-9_]*:(?![-=+?])([^}]*)\}", text[at:])
    return bool(match) and not re.fullmatch(r"[\s\d:-]*", match.group(1))
