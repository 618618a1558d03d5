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


def hides_a_command(text: str, mode: str, parsed: set[int], offset: int = 0) -> bool:
    """Whether `text` holds a place where bash may run a command that is not among `parsed` (the
    positions where bashlex's substitutions begin, `offset` being where `text` begins in the line).
    `mode`: "code" (a command line) or "heredoc" (the body of one whose delimiter is not quoted: quotes
    are plain characters there). Errs towards True: a `$(` in a comment counts."""
    # "code", "heredoc", '"' (double quotes), "`" (backticks), "(" (parentheses), "{" and '{"' (${...} in code,
    # and within double quotes or a here-document)
    stack = [mode]
    i, n = 0, len(text)
    while i < n:
        c, top, two = text[i], stack[-1], text[i:i + 2]
        if c == "\\":
            i += 2
            continue
        if top == "code" or top == "(" or top == "`":
            if c == "'" and top != "`":  # single quotes: nothing runs inside (within backticks: counted)
                end = text.find("'", i + 1)
                i = n if end < 0 else end + 1
                continue
            if two == "$'":  # ANSI-C quotes: \' does not end them
                j = i + 2
                while j < n and text[j] != "'":
                    j += 2 if text[j] == "\\" else 1
                i = j + 1
                continue
            if c == '"':
                stack.append('"')
                i += 1
                continue
            if c == ")" and top == "(":
                stack.pop()
                i += 1
                continue
            if c == "(":
                stack.append("(")
                i += 1
                continue
            if two in ("<(", ">("):
                if offset + i not in parsed:
                    return True
                stack.append("(")
                i += 2
                continue
        elif top == '"' and c == '"':
            stack.pop()
            i += 1
            continue
        elif top in ("{", '{"'):  # ${...}, in code or within double quotes (where ' is a plain character)
            if c == "}":
                stack.pop()
                i += 1
                continue
            if c == "'" and top == "{":
                end = text.find("'", i + 1)
                i = n if end < 0 else end + 1
                continue
            if c == '"':
                stack.append('"')
                i += 1
                continue
            if c == "[" and not _plain_subscript(text, i):
                return True  # an arithmetic subscript: a variable's value may run a command
            if two == "@P":
                return True  # prompt expansion runs the command substitutions of a value
        if c == "`":
            if top == "`":
                stack.pop()
            elif offset + i not in parsed:
                return True
            else:
                stack.append("`")
            i += 1
            continue
        if two == "$(" or two == "$[":
            if two == "$[" or offset + i not in parsed:
                return True
            stack.append("(")
            i += 2
            continue
        if two == "${":
            if _offset_is_arithmetic(text, i + 2):
                return True
            stack.append('{"' if top in ('"', '{"', "heredoc") else "{")
            i += 2
            continue
        i += 1
    return False


def _plain_subscript(text: str, at: int) -> bool:
    """Whether the subscript opening at `at` is `@`, `*` or a number: no arithmetic on a name."""
    end = text.find("]", at)
    return end > 0 and bool(_PLAIN_SUBSCRIPT.fullmatch(text[at + 1:end]))


def _offset_is_arithmetic(text: str, at: int) -> bool:
    """Whether the `${` expansion whose name begins at `at` takes a substring at an offset that is not a
    plain number (`${s:i}`, `${s:0:n}`: evaluated as arithmetic, so a name's value may run a command)."""
    match = re.match(r"[#!]?[A-Za-z_][A-Za-z0-9_]*:(?![-=+?])([^}]*)\}", text[at:])
    return bool(match) and not re.fullmatch(r"[\s\d:-]*", match.group(1))
