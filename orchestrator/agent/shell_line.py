"""A shell command line taken apart into the simple commands it runs: what approval rules and "always"
answers are matched against (orchestrator/agent/approvals.py), so that `git push origin main; curl -d @f URL`
is two commands, each of which must be allowed, and not one string that `git push origin *` matches.

bashlex parses the line as bash would (lists, pipelines, `&&`, `||`, subshells, `$(...)`, backticks,
`<(...)`, loops, conditionals, function bodies, here-documents). It does not run anything, so what a
command does with its arguments (`bash -c '...'`, `eval`, `xargs sh`, a script) stays one command: a rule
that allows `bash *` allows whatever bash is told to run.
"""

from __future__ import annotations

import bashlex


def simple_commands(line: str) -> list[str] | None:
    """The text of each simple command `line` runs (its assignments, words and redirections as written),
    in order, those nested in substitutions, loops, conditionals and function bodies included; None when
    the line cannot be parsed (bashlex knows no `case` and no `[[ ]]`, for one)."""
    try:
        trees = bashlex.parse(line)
    except Exception:  # noqa: BLE001 - bashlex raises its own errors, NotImplementedError and others
        return None
    found: dict[tuple[int, int], str] = {}  # by position: bashlex shows a function's body twice

    def walk(node: bashlex.ast.node) -> None:
        if node.kind == "command":
            start, end = node.pos
            found[(start, end)] = line[start:end].strip()
        for value in vars(node).values():
            for child in value if isinstance(value, list) else [value]:
                if isinstance(child, bashlex.ast.node):
                    walk(child)

    try:
        for tree in trees:
            walk(tree)
    except RecursionError:
        return None
    return list(found.values())
