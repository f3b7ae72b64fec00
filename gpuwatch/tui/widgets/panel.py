"""A Static that only repaints when its markup changed, and only lays the screen out again when
its height changed; a height that shrinks waits ``HOLD_S`` first."""

from __future__ import annotations

import time
from functools import lru_cache
from typing import TYPE_CHECKING, cast

from textual.content import Content
from textual.widgets import Static

if TYPE_CHECKING:
    from textual.css.styles import RulesMap


# How long a panel keeps the height of its tallest text once the text is shorter.
HOLD_S = 30.0


class Panel(Static):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._shown: str | None = None
        self._lines: tuple[int, int] | None = None  # (width, height) it was laid out for
        self.layouts = 0  # updates that asked for a layout pass (tests and bench/tui.py)
        self._tallest = (0, 0, 0.0)  # (width, lines, when it last took that many)
        self.clock = time.monotonic

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
        # times a repaint (bench/tui.py: ~3 ms against ~0.3 ms); a value that changed in place
        # needs only the repaint. So: a layout only when the panel's own size changes, i.e. its
        # height follows its text and the text now takes another number of lines at this width.
        lines = self._lines_for(content)
        if lines is not None and lines[1] >= 0:
            content, lines = self._hold(content, lines)
        layout = lines is None or lines != self._lines
        self._lines = lines
        if layout:
            self.layouts += 1
        self.update(content, layout=layout)

    def _hold(self, content: Content, lines: tuple[int, int]) -> tuple[Content, tuple[int, int]]:
        """Keep the panel at its tallest for ``HOLD_S``: a line that comes and goes with the
        load (an engine's ``fits ~N more sessions`` when it idles between requests) would
        otherwise move every panel below it, and lay the screen out, every few seconds."""
        now = self.clock()
        width, height = lines
        held_width, held_height, since = self._tallest
        if width == held_width and height < held_height and now - since < HOLD_S:
            return content + "\n" * (held_height - height), (width, held_height)
        self._tallest = (width, height, now)
        return content, lines

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
