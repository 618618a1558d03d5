"""How a tool result is framed in the context, varied on purpose so the model does not copy a pattern.

A model imitates its context: when it fills with near-identical action/observation pairs, it repeats the
pattern instead of thinking about the next step (Manus: "don't few-shot yourself"). So the wrapper around
each output (a header, the exit line, the sentence that points at a saved output) takes one of a few
forms that say the same things differently. Only the wrapper varies: the output itself is byte for byte
what the tool gave (or, for a big one, its head and tail with the file that holds it whole).

The form of a result is chosen when it enters the history, from the run's seed (recorded in its first
event, RunStarted.seed) and the result's number in the run, and is recorded with it (ToolFinished.content),
so a resume and a replay send the same bytes and the provider's cache still holds. The numbers go in
blocks of FRAMINGS, each block a permutation of the forms chosen by the seed: any 2 x FRAMINGS - 1
results in a row show every form, and no fixed cycle forms a pattern of its own. `context.vary_framing`
false gives every result form 0, cairn's plain form.
"""

from __future__ import annotations

import random
import re

FRAMINGS = 4

# The line shell_exec puts under an output (tools/builtin/shell_exec.py), made and read here together.
_EXIT_LINE = re.compile(r"^\[exit code (-?\d+), (\d+(?:\.\d+)?) s\]$")


def exit_line(code: int, seconds: float) -> str:
    """The exit line of a command, in form 0: `[exit code 0, 0.1 s]`."""
    return f"[exit code {code}, {seconds:.1f} s]"


# The sentence under a preview that says how to read the rest of a big output (context/offload.py), a form each.
READ_BACK = (
    '[Read the whole output with file_read(path="{path}", offset=..., limit=...): a window of lines at a time.]',
    '[All of it is in {path}: file_read(path="{path}", offset=N, limit=M) reads any window of its lines.]',
    '[To see more, file_read "{path}" with an offset and a limit: a window of lines at a time.]',
    '[The whole output, line by line: file_read(path="{path}", offset=..., limit=...).]',
)


def read_back(path: str, form: int = 0) -> str:
    """The preview's last line in `form`: where the whole output is, and how to read it a window at a time."""
    return READ_BACK[form % len(READ_BACK)].format(path=path)


def framing(seed: int, number: int, vary: bool = True) -> int:
    """The form (0 to FRAMINGS - 1) of the run's `number`-th tool result (from 0), for the run's `seed`."""
    if not vary:
        return 0
    block, place = divmod(number, FRAMINGS)
    order = list(range(FRAMINGS))
    random.Random(f"{seed}:{block}").shuffle(order)  # a str seed is hashed with sha512: the same everywhere
    return order[place]


def frame_result(body: str, footer: str, tool: str, form: int, offloaded_to: str | None = None) -> str:
    """One result as the history keeps it: `body` (the output, or the preview of an output saved whole to
    `offloaded_to`) and the tool's `footer` (facts about it: the exit line first when there is one), in
    `form`. A preview has a header of its own, so it gets none; its last sentence, how to read the rest
    (context/offload.py writes it in form 0), is said in the form."""
    offloaded = offloaded_to is not None
    if offloaded_to is not None and body.endswith(read_back(offloaded_to)):
        body = body[: -len(read_back(offloaded_to))] + read_back(offloaded_to, form)
    if form == 0:
        return "\n".join(part for part in (body.rstrip("\n"), footer) if part)
    first, _, rest = footer.partition("\n")
    found = _EXIT_LINE.match(first)
    code, seconds = (found.group(1), found.group(2)) if found else (None, None)
    if found is None:
        rest = footer
    if form == 1:  # the exit line becomes the header
        header = f"[{tool}: exit code {code}, {seconds} s]" if found else f"[{tool} result]"
        trailer = ""
    elif form == 2:
        header = f"--- {tool} output ---"
        trailer = f"--- exit {code} after {seconds} s ---" if found else "--- end of output ---"
    else:
        header = f"{tool} returned:"
        trailer = f"(exit status {code}; {seconds} seconds)" if found else ""
    parts = [] if offloaded else [header]
    if offloaded and form == 1 and found:
        trailer = header  # after the preview, whose own first line is its header
    return _join([*parts, body, trailer, rest])


def _join(parts: list[str]) -> str:
    """The parts on lines of their own; a part that ends with a newline keeps it (the output stays whole)."""
    text = ""
    for part in (p for p in parts if p):
        text += part if not text or text.endswith("\n") else "\n" + part
    return text
