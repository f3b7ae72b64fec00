"""Bars as markup: a stacked bar (a VRAM bar shows the serving process apart from the rest)."""

from __future__ import annotations


def stacked(parts: list[tuple[float, str]], width: int, empty: str = "$panel-lighten-2") -> str:
    """``parts`` are (fraction 0..1, theme colour); what remains is drawn as free space."""
    cells: list[str] = []
    used = 0
    for fraction, color in parts:
        n = max(0, min(width - used, round(fraction * width)))
        if n:
            cells.append(f"[{color}]{'█' * n}[/]")
            used += n
    if used < width:
        cells.append(f"[{empty}]{'░' * (width - used)}[/]")
    return "".join(cells)


def gauge(fraction: float | None, width: int, color: str) -> str:
    if fraction is None:
        return f"[$panel-lighten-2]{'·' * width}[/]"
    return stacked([(max(0.0, min(1.0, fraction)), color)], width)


def level_color(fraction: float | None, warn: float = 0.8, bad: float = 0.95) -> str:
    if fraction is None:
        return "$foreground"
    return "$bad" if fraction >= bad else "$warn" if fraction >= warn else "$ok"
