"""One tokenizer for every count cairn makes on its own (the context engine, the scripted model).

tiktoken downloads its encodings on first use, and there may be no network; litellm ships
cl100k_base in its package, so point tiktoken's cache there. litellm itself is not imported.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path

import tiktoken


@functools.cache
def encoding() -> tiktoken.Encoding:
    spec = importlib.util.find_spec("litellm")
    if spec is not None and spec.origin is not None:
        bundled = Path(spec.origin).parent / "litellm_core_utils" / "tokenizers"
        # litellm sets the same variable when it is imported, so this agrees with it.
        os.environ["TIKTOKEN_CACHE_DIR"] = str(bundled)
    return tiktoken.get_encoding("cl100k_base")


def count_tokens(text: str) -> int:
    return len(encoding().encode(text, disallowed_special=()))
