"""A Static that only repaints when its markup changed."""

from __future__ import annotations

from functools import lru_cache

from textual.content import Content
from textual.widgets import Static


class Panel(Static):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._shown: str | None = None

    @property
    def markup(self) -> str:
        """What the panel shows now, as markup."""
        return self._shown or ""

    def show(self, markup: str) -> None:
        if markup != self._shown:
            self._shown = markup
            self.update(markup)


def usable_width(widget: Static) -> int:
    """Cells a panel's lines may take: its content width, less a scrollbar's the column may
    grow, so a flowed line never wraps a second time."""
    return max(40, (widget.content_region.width or 80) - 2)


@lru_cache(maxsize=1024)
def cells(markup: str) -> int:
    """Cells a markup string takes on screen (cached: panels repeat their segments)."""
    return Content.from_markup(markup).cell_length


def flow(segments: list[str], width: int, indent: str = "  ", gap: str = "  ") -> list[str]:
    """Pack markup segments into lines of at most ``width`` cells, never splitting one."""
    lines: list[str] = []
    current, used = "", 0
    for seg in segments:
        size = cells(seg)
        if current and used + len(gap) + size > width:
            lines.append(current)
            current, used = "", 0
        if current:
            current += gap + seg
            used += len(gap) + size
        else:
            current = indent + seg
            used = len(indent) + size
    if current:
        lines.append(current)
    return lines
