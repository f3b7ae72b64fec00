"""Number formatting shared by the CLI tables and (later) the TUI: one spelling of N/A."""

from __future__ import annotations

NA = "N/A"


def gib(n: float | None) -> str:
    return NA if n is None else f"{n / 2**30:.1f}G"


def pct(ratio: float | None) -> str:
    return NA if ratio is None else f"{ratio * 100:.0f}%"


def num(v: float | None, digits: int = 0) -> str:
    if v is None:
        return NA
    if abs(v) >= 1e6:
        return f"{v / 1e6:.1f}M"
    if abs(v) >= 1e4:
        return f"{v / 1e3:.1f}k"
    return f"{v:.{digits}f}"


def seconds(v: float | None) -> str:
    if v is None:
        return NA
    if v < 1:
        return f"{v * 1000:.0f}ms"
    return f"{v:.2f}s"


def unit(v: float | None, suffix: str, digits: int = 0) -> str:
    return NA if v is None else f"{v:.{digits}f}{suffix}"
