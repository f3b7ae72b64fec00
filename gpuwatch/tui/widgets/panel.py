"""A Static that only repaints when its markup changed, and only lays the screen out again when
its height changed."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, cast

from textual.content import Content
from textual.widgets import Static

if TYPE_CHECKING:
    from textual.css.styles import RulesMap


class Panel(Static):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._shown: str | None = None
        self._lines: tuple[int, int] | None = None  # (width, height) it was laid out for
        self.layouts = 0  # updates that asked for a layout pass (tests and bench/tui.py)

    @property
    def markup(self) -> str:
        """What the panel shows now, as markup."""
        return self._shown or ""

    def show(self, markup: str) -> None:
        if markup == self._shown:
            return
        self._shown = markup
        content = Content.from_markup(markup)
        # A layout pass (every widget on the screen measured and placed again) costs several
        # times a repaint; a value that changed in place needs only the repaint. So: a layout
        # only when the panel's own size can change, i.e. its height follows its text and the
        # text now takes another number of lines at this width.
        lines = self._lines_for(content)
        layout = lines is None or lines != self._lines
        self._lines = lines
        if layout:
            self.layouts += 1
        self.update(content, layout=layout)

    def _lines_for(self, content: Content) -> tuple[int, int] | None:
        """(width, height) the content takes here; None when that is unknown (not laid out
        yet, or a width that follows the content)."""
        styles = self.styles
        width = self.content_region.width
        if not width or (styles.width is not None and styles.width.is_auto):
            return None
        if styles.height is not None and not styles.height.is_auto:
            return (width, -1)  # a fixed height: the text never moves the layout
        # What Textual itself measures the height with (Widget.get_content_height).
        return (width, content.get_height(cast("RulesMap", styles), width))


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
