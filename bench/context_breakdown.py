"""Where a policy's input tokens and money go, request by request (`context_bench.py` prints it).

Each agent request is cut at the message seams and compared with the request before it: the
messages both share (by their bytes), then the history messages that changed (a compaction's
rewrite: pointers, a digest, a summary), then the messages new since the last request (the model's
answer and its observations), then the tail. The provider's cache serves a prefix in whole blocks
(`PrefixCache`), so every uncached token falls in one of:

- `rounding`: shared with the last request, but past the last whole cached block;
- `rewrite`: a history message a compaction changed, and all that follows it up to the new ones;
- `new`: the messages appended since the last request;
- `tail`: the status block, rebuilt and sent uncached every step;
- `prefix`: the system prompt, tools and task, when not cached (the first request).

Cached tokens are split into the fixed prefix and the history, and the summarize requests and the
answers are priced apart, so the categories add up to the ledger's cost.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
UNCACHED = ("prefix", "rounding", "rewrite", "new", "tail")
CACHED = ("cached prefix", "cached history")
OTHER = ("summaries", "answers")
CATEGORIES = UNCACHED + CACHED + OTHER


@dataclass
class Breakdown:
    """Tokens and cost by category, over one policy's requests."""

    price_input: float
    price_cached: float
    price_output: float
    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0))
    cost: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0.0))
    requests: int = 0
    compacting: int = 0  # requests with a rewrite
    _last: list[str] = field(default_factory=list)

    def add(self, serialized: Sequence[str], spans: Sequence[tuple[int, int]], total: int, cached: int,
            output: int, new: int, tail: bool = True) -> None:
        """One agent request: `serialized[i]` is message i's bytes, `spans[i]` its tokens' [start, end) in
        the request, `total` its length, `cached` the cache hit, `new` how many history messages were
        appended since the last request; `tail`: its last message is a tail. The first two messages are
        the system prompt and the task."""
        self.requests += 1
        last = self._last
        end = len(serialized) - tail  # the history ends here
        shared = 0
        while shared < min(len(last) - tail, end) and last[shared] == serialized[shared]:
            shared += 1
        first_new = 2 if not last else max(shared, end - new)  # the first request's history is all new
        category = ["rounding"] * shared + ["rewrite"] * (first_new - shared) + ["new"] * (end - first_new)
        category += ["tail"] * tail
        category[:2] = ["prefix" if not last or shared < 2 else "rounding"] * 2
        prefix_end = spans[1][1]
        if "rewrite" in category:
            self.compacting += 1
        self._last = list(serialized)
        # Tokens before the first message (the tools, the list's bracket) go with the prefix; the seams,
        # with the message after them; the closing bracket, with the tail.
        bounds = [0] + [start for start, _ in spans[1:]] + [total]
        for i, kind in enumerate(category):
            start, end = bounds[i], bounds[i + 1]
            uncached = max(0, end - max(start, cached))
            self._put(kind, uncached, self.price_input)
            cached_part = (end - start) - uncached
            self._put("cached prefix" if end <= prefix_end or i < 2 else "cached history", cached_part,
                      self.price_cached)
        self._put("answers", output, self.price_output)

    def add_summary(self, prompt: int, cached: int, output: int) -> None:
        self.tokens["summaries"] += prompt + output
        self.cost["summaries"] += ((prompt - cached) * self.price_input + cached * self.price_cached
                                   + output * self.price_output)

    def merge(self, other: Breakdown) -> None:
        for kind in CATEGORIES:
            self.tokens[kind] += other.tokens[kind]
            self.cost[kind] += other.cost[kind]
        self.requests += other.requests
        self.compacting += other.compacting

    @property
    def total_cost(self) -> float:
        return sum(self.cost.values())

    def _put(self, kind: str, tokens: int, price: float) -> None:
        self.tokens[kind] += tokens
        self.cost[kind] += tokens * price


def table(columns: Sequence[tuple[str, Breakdown]], width: int = 28) -> list[str]:
    """Rows of tokens per request and share of the cost, one column a policy; a last row, the cost over
    the first column's."""
    lines = ["".ljust(width) + "".join(f"{name[:19]:>20}" for name, _ in columns)]
    lines.append("(per request: tokens, share of cost)")
    for kind in CATEGORIES:
        cells = []
        for _, b in columns:
            per = b.tokens[kind] / max(1, b.requests)
            share = b.cost[kind] / b.total_cost if b.total_cost else 0.0
            cells.append(f"{per:,.0f} {share:6.1%}".rjust(20))
        label = ("uncached: " if kind in UNCACHED else "") + kind
        lines.append(label.ljust(width) + "".join(cells))
    base = columns[0][1].total_cost
    lines.append("requests / with a rewrite".ljust(width)
                 + "".join(f"{b.requests} / {b.compacting}".rjust(20) for _, b in columns))
    lines.append("cost (USD) / of the first".ljust(width)
                 + "".join(f"{b.total_cost:.2f} / {b.total_cost / base:.3f}".rjust(20) if base else "-".rjust(20)
                           for _, b in columns))
    return lines
