"""Sizes as people write them (`500m`, `3g`, `20GiB`) and as cairn prints them (`3.2 GiB`): units of 1024,
like Docker's --memory. Used by settings (`--max-disk`), the disk limit and archives' bounds."""

from __future__ import annotations

import re

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def parse_size(text: str) -> int:
    """Bytes of a size such as `500m`, `3g`, `1.5G`, `20GiB` or `1048576` (units of 1024, like Docker's
    --memory). Raises ValueError with a message that says what a size looks like."""
    match = _SIZE.match(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"{text!r} is not a size; give a number with an optional unit k, m, g or t (e.g. 20g)")
    value = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    if value <= 0:
        raise ValueError(f"{text!r}: a size must be more than 0")
    return value


def format_size(n: float) -> str:
    """`3.2 GiB`-style, in units of 1024 (as `parse_size` reads them)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
