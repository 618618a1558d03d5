"""The core's size: the lines a newcomer must read to follow a run from the task to the model call.

    python bench/core_size.py

Issue 12's target: the core (the loop, the ports, the tool registry, the context engine and the
litellm client) holds at most 1,500 lines of code. The core is the set of files in CORE below, fixed
here so that the figure compares across versions: a file split out of one of them (a module that
some part of one of these files moved into) is added to the set and stays in it, so that moving code
to a new module cannot shrink the count; a file leaves the set only when what it holds is honestly
not the core any more, and the commit that takes it out says why. Code that left a core file for a
module that is not the core is listed in OUTSIDE, with the reason, and printed below the total (not
counted), so that what left can be checked.

For each file it prints its `wc -l` lines and its code lines: the lines that hold code, counted with
tokenize and ast, so that blank lines, lines of comment alone and docstrings (of the module, of each
class and function) are not counted. Comments and docstrings are the book a newcomer reads: the target
asks for less code, never for less explanation. The last line is
`core_code_lines=<n> core_wc_lines=<n> target=1500`. It checks nothing: the figure is read, not asserted.
"""

from __future__ import annotations

import ast
import io
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = 1500

# The core, relative to the repository's root. Files split out of these later are added here.
CORE = (
    "orchestrator/agent/loop.py",
    "orchestrator/ports.py",
    "orchestrator/tools/registry.py",
    "orchestrator/context/__init__.py",
    "orchestrator/context/builder.py",
    "orchestrator/context/compaction.py",
    "orchestrator/context/digest.py",
    "orchestrator/context/history.py",
    "orchestrator/context/offload.py",
    "orchestrator/context/pointers.py",
    "orchestrator/context/request.py",
    "orchestrator/context/tokens.py",
    "orchestrator/llm/client.py",
    "orchestrator/llm/types.py",
)

# Modules that took code out of the core files, with why they are not the core (2026-11-23).
OUTSIDE = (
    ("orchestrator/llm/cost.py", "an answer's price in USD (the script's pricing or litellm's list): "
                                 "asked after the call, not part of it"),
    ("orchestrator/llm/retry.py", "which failures are retried and how a failure is worded: took the final "
                                  "error's wording (Failure.given_up) and the test for a too-long request"),
    ("orchestrator/llm/scripted.py", "the scripted model (a test and demo server): took the registry of "
                                     "its running servers"),
    ("orchestrator/llm/openai_compat.py", "the direct path to a server of one's own: took the body and key "
                                          "of its request"),
    # 2026-11-25
    ("orchestrator/context/span_files.py", "the text of the files a digest or a summary leaves for reading back "
                                           "(digest_file, summary_file, replaced_messages): no request holds it"),
    # 2026-11-27
    ("orchestrator/llm/first_request.py", "what a first request imports, done ahead while the container starts, "
                                          "and litellm's MCP check skipped: start-up speed, not the call"),
    ("orchestrator/llm/answer.py", "how a stream's chunks add up to one answer (text, reasoning, the pieces of "
                                   "each tool call, usage): the wire format's detail, not the call"),
    ("orchestrator/agent/stop_signals.py", "took stop_now and the mark of a model request in flight: a "
                                           "person's stop, a policy around the loop (it already held the signals)"),
    ("orchestrator/agent/recovery.py", "took finish_approval_step: the rest of a step that stopped for an "
                                       "approval, beside the rest of a step a crash cut off"),
)


def docstring_lines(tree: ast.AST) -> set[int]:
    """The line numbers of every docstring: a module's, a class's or a function's first statement."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            lines.update(range(body[0].lineno, body[0].end_lineno + 1))
    return lines


def code_lines(source: str) -> int:
    """Lines holding at least one token of code that is not part of a docstring."""
    skipped = docstring_lines(ast.parse(source))
    not_code = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                tokenize.ENDMARKER, tokenize.ENCODING}
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in not_code:
            continue
        # A token may span lines (a triple-quoted string that is not a docstring): each one holds code.
        lines.update(n for n in range(token.start[0], token.end[0] + 1) if n not in skipped)
    return len(lines)


def main() -> int:
    total_code = total_wc = 0
    print(f"{'file':<40} {'wc -l':>6} {'code':>6}")
    for name in CORE:
        source = (ROOT / name).read_text(encoding="utf-8")
        wc, code = source.count("\n"), code_lines(source)
        total_code += code
        total_wc += wc
        print(f"{name:<40} {wc:>6} {code:>6}")
    for name, why in OUTSIDE:
        code = code_lines((ROOT / name).read_text(encoding="utf-8"))
        print(f"  not counted: {name} ({code} code lines): {why}")
    print(f"core_code_lines={total_code} core_wc_lines={total_wc} target={TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
