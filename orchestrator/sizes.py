"""Sizes as people write them (`500m`, `3g`, `20GiB`) and as cairn prints them (`3.2 GiB`): units of 1024,
like Docker's --memory. Used by settings (`--max-disk`), the disk limit and archives' bounds. Durations too
(`90m`, `1h30m`, `45s`, `3600`; printed `1h 30m`): `--max-time`, `cairn gc --older-than`, the time budget
the model is told."""

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


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])", re.IGNORECASE)
_DURATION = re.compile(r"^\s*(?:\d+(?:\.\d+)?\s*[smhdw]\s*)+$", re.IGNORECASE)
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> float:
    """Seconds of a duration such as `90m`, `1h30m`, `1h 30m`, `45s`, `1.5h`, `2d` or a bare number of
    seconds (`5400`). Raises ValueError with a message that says what a duration looks like."""
    text = text.strip() if isinstance(text, str) else ""
    if re.fullmatch(r"\d+(?:\.\d+)?", text):
        seconds = float(text)
    elif _DURATION.match(text):
        seconds = sum(float(n) * _SECONDS[unit.lower()] for n, unit in _DURATION_PART.findall(text))
    else:
        raise ValueError(f"{text!r} is not a duration; give a number of seconds or one with units s, m, h, d "
                         "(e.g. 90m, 1h30m, 45s)")
    if seconds <= 0:
        raise ValueError(f"{text!r}: a duration must be more than 0")
    return seconds


def format_duration(seconds: float) -> str:
    """`45s`, `12m 5s`, `1h 30m`, `2d 3h`: the two largest units, as `parse_duration` reads them back."""
    total = max(0, round(seconds))
    for big, small in (("d", "h"), ("h", "m"), ("m", "s")):
        if total >= _SECONDS[big]:
            first, rest = divmod(total, _SECONDS[big])
            second = rest // _SECONDS[small]
            return f"{first}{big}" + (f" {second}{small}" if second else "")
    return f"{total}s"
