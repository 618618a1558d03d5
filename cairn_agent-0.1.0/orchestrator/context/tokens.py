"""Token accounting that costs the same at step 1,000 as at step 1.

Every message is tokenized once, as its canonical JSON, when it enters the history; the history keeps
that count next to the message. A request's estimate is then a sum of stored counts plus the few
things that change every step (the tail), multiplied by a ratio learnt from the provider: our
tokenizer (cl100k_base) is not the provider's, and the provider adds its own framing around each
message, so the last reported prompt size tells us how far off a raw count is.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.context.request import Request

Count = Callable[[str], int]
"""Tokens of one string. Injectable, so tests can count how often tokenizing really happens."""

# A ratio outside this range means the last report was odd (a provider that counts nothing, or a
# half-empty usage block), not that the tokenizer is that far off; trusting it would either starve
# or overflow the window.
MIN_RATIO = 0.5
MAX_RATIO = 2.0

# Room for the strings that recur from step to step without a history id: the system prompt, the
# task, the tool list. Small on purpose: the tail is new every step and must not pile up here.
_RECENT_TEXTS = 64


def canonical_json(value: Any) -> str:
    """The one serialization cairn counts and compares: sorted keys, no spaces, unicode as is."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


class TokenCounter:
    """Counts messages once and scales the sum by what the provider last reported."""

    def __init__(self, count: Count | None = None, *, ratio: float = 1.0) -> None:
        self._count = count
        self._ratio = _clamp(ratio)
        self._recent: OrderedDict[str, int] = OrderedDict()

    @property
    def ratio(self) -> float:
        """Reported prompt tokens per raw token, from the last calibration (1.0 before any)."""
        return self._ratio

    def count_text(self, text: str) -> int:
        """Raw tokens of a string. Tokenizes every time: callers count a given text once."""
        if self._count is None:
            # cl100k_base from the shared tokenizer module, loaded on first use (it finds its files lazily).
            from orchestrator.llm.tokenizer import count_tokens

            self._count = count_tokens
        return self._count(text)

    def message(self, message: dict[str, Any]) -> int:
        """Raw tokens of one message's canonical JSON.

        Recently seen messages are remembered by their serialization, so the stable prefix and a
        compaction's look-ahead do not tokenize the same text twice.
        """
        return self._remembered(canonical_json(message))

    def tools(self, tools: list[dict[str, Any]]) -> int:
        """Raw tokens of the tool list, which is fixed for a run and so counted once."""
        return self._remembered(canonical_json(tools))

    def raw(self, request: Request) -> int:
        """Raw tokens of a whole request; the history part is the history's stored sum."""
        outside = request.messages[:2] + request.messages[request.history_end :]
        return request.history_tokens + sum(self.message(m) for m in outside) + self.tools(request.tools)

    def estimate(self, request: Request) -> int:
        """Prompt tokens the provider will likely report for this request."""
        return round(self.raw(request) * self._ratio)

    def overhead(self, request: Request) -> int:
        """Estimated tokens of everything in the request but the history (prefix, task, tail)."""
        return round((self.raw(request) - request.history_tokens) * self._ratio)

    def calibrate(self, reported: int, estimated: int) -> float:
        """Learn the ratio from one answered request.

        `reported` is the provider's prompt tokens; `estimated` is what `estimate()` said for that
        request, with the ratio still in force (so the raw count is `estimated / ratio`). Returns the
        new ratio. A report or estimate of zero carries no information and is ignored.
        """
        if reported > 0 and estimated > 0:
            self._ratio = _clamp(reported * self._ratio / estimated)
        return self._ratio

    def _remembered(self, serialized: str) -> int:
        if serialized in self._recent:
            self._recent.move_to_end(serialized)
            return self._recent[serialized]
        tokens = self.count_text(serialized)
        self._recent[serialized] = tokens
        if len(self._recent) > _RECENT_TEXTS:
            self._recent.popitem(last=False)
        return tokens


def _clamp(ratio: float) -> float:
    return min(MAX_RATIO, max(MIN_RATIO, ratio))
