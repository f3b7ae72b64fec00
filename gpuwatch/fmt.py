"""Number formatting shared by the CLI tables and (later) the TUI: one spelling of N/A."""

from __future__ import annotations

import math
from typing import TypeGuard

NA = "N/A"


def _known(v: float | None) -> TypeGuard[float]:
    # NaN and infinities are as unknown as None: "inf%" or "nanG" in a table helps nobody.
    return v is not None and math.isfinite(v)


def gib(n: float | None) -> str:
    return f"{n / 2**30:.1f}G" if _known(n) else NA


def pct(ratio: float | None) -> str:
    return f"{ratio * 100:.0f}%" if _known(ratio) else NA


def num(v: float | None, digits: int = 0) -> str:
    if not _known(v):
        return NA
    if abs(v) >= 1e6:
        return f"{v / 1e6:.1f}M"
    if abs(v) >= 1e4:
        return f"{v / 1e3:.1f}k"
    return f"{v:.{digits}f}"


def seconds(v: float | None) -> str:
    if not _known(v):
        return NA
    return f"{v * 1000:.0f}ms" if v < 1 else f"{v:.2f}s"


def accuracy(rel_error: float | None) -> str:
    """How a percentile is known: ``exact`` (None), or its stated relative error (``±0.5%``)."""
    return "exact" if rel_error is None else f"±{rel_error * 100:.2g}%"


def duration(v: float | None) -> str:
    """``2.4s``, ``23s``, ``4m05s``, ``2h10m``: how long something has lasted, at a glance
    (tenths under 10 s, where a second is a large part of it)."""
    if not _known(v):
        return NA
    if v < 10:
        return f"{v:.1f}s"
    whole = int(v)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def unit(v: float | None, suffix: str, digits: int = 0) -> str:
    return f"{v:.{digits}f}{suffix}" if _known(v) else NA


# A line that quotes foreign text (a metric name, a label value, an exception message, an HTTP
# body) is at most this long: an 8 MB metric name must not become an 8 MB error line.
LINE_LIMIT = 200
_ELLIPSIS = "..."  # ASCII: a terminal in a non-UTF-8 locale must still print it


def clip(text: object, limit: int = LINE_LIMIT) -> str:
    """``text`` as one printable line of at most ``limit`` characters, cut with an ellipsis.

    Whitespace runs (newlines included) become one space and other control characters are
    escaped, so nothing foreign can break the one-line-per-problem rule or drive the terminal.
    """
    raw = str(text)
    # Only a bounded head is ever looked at: the cost is the same for 200 bytes and 8 MB.
    head = raw[: 4 * limit + 1]
    line = " ".join(head.split())
    if not line.isprintable():
        line = "".join(c if c.isprintable() else repr(c)[1:-1] for c in line)
    if len(line) > limit or len(head) < len(raw):
        return line[: max(0, limit - len(_ELLIPSIS))] + _ELLIPSIS
    return line
