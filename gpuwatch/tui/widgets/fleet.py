"""The fleet table: one row per engine, the health badge first, marked rows flagged.

A line-API widget rather than a ``DataTable``: every refresh moves most values, and a
DataTable re-renders each visible cell through Rich's padding on any change (bench/fleet.py:
~11% of a core at 64 engines). Here a row is one precomputed line, rebuilt only when its text
changed; only the visible lines are drawn.
"""

from __future__ import annotations

from collections.abc import Collection

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.color import Color as TextualColor
from textual.events import Click
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from gpuwatch.fmt import clip
from gpuwatch.monitor.fleet import COLUMNS, FleetState
from gpuwatch.monitor.health import badge_text
from gpuwatch.sources.promql import FleetRow

RowKey = tuple[str, str, str]
BADGE_VAR = {"OK": "ok", "TIGHT": "warn", "OVERLOADED": "bad", "NO DATA": "foreground-muted"}
HEADERS = ("", "health", "node", "instance", "model", "dialect", *(c.header for c in COLUMNS))
# Columns left-aligned (names); the rest are numbers, right-aligned.
TEXT_COLUMNS = 6
GAP = "  "
NARROW_BELOW = 120


class FleetTable(ScrollView, can_focus=True):
    BINDINGS = [
        Binding("up,k", "cursor(-1)", "up", show=False),
        Binding("down,j", "cursor(1)", "down", show=False),
        Binding("pageup", "page(-1)", "page up", show=False),
        Binding("pagedown", "page(1)", "page down", show=False),
        Binding("home", "cursor(-1000000)", "first", show=False),
        Binding("end", "cursor(1000000)", "last", show=False),
    ]
    DEFAULT_CSS = """
    FleetTable { height: 1fr; }
    """

    def __init__(
        self, *, name: str | None = None, id: str | None = None, classes: str | None = None
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.keys: list[RowKey] = []
        self.cells: list[tuple[str, ...]] = []
        self.levels: list[str] = []
        self.cursor_row = 0
        self.sort_column = -1
        self.shown_columns: list[int] = list(range(len(HEADERS)))
        self._widths: list[int] = [len(h) for h in HEADERS]
        self._cache: dict[tuple[object, ...], Strip] = {}

    # -- the rows -------------------------------------------------------------------------

    @property
    def row_count(self) -> int:
        return len(self.keys)

    def cursor_key(self) -> RowKey | None:
        return self.keys[self.cursor_row] if 0 <= self.cursor_row < len(self.keys) else None

    def render_rows(
        self, state: FleetState, rows: list[FleetRow], marked: Collection[RowKey], sort: str
    ) -> None:
        """Take the rows to show; the cursor stays on its row (by key) where it still is."""
        keep = self.cursor_key()
        self.keys = [r.key for r in rows]
        verdicts = [state.verdict(r) for r in rows]
        self.levels = [v.level for v in verdicts]
        self.cells = [
            _cells(r, badge_text(v), r.key in marked) for r, v in zip(rows, verdicts, strict=True)
        ]
        keys = [c.key for c in COLUMNS]
        # Narrow: the node names a row; instance and dialect make room for the numbers.
        narrow = 0 < self.size.width < NARROW_BELOW
        self.shown_columns = [i for i in range(len(HEADERS)) if not (narrow and i in (3, 5))]
        self.sort_column = TEXT_COLUMNS + keys.index(sort) if sort in keys else -1
        widths = [len(h) for h in HEADERS]
        for cells in self.cells:
            for i, text in enumerate(cells):
                widths[i] = max(widths[i], len(text))
        widths = [w if i in self.shown_columns else -1 for i, w in enumerate(widths)]
        if widths != self._widths:
            self._widths = widths
            self._cache.clear()
        if keep in self.keys:
            self.cursor_row = self.keys.index(keep)
        self.cursor_row = max(0, min(self.cursor_row, len(self.keys) - 1))
        width = sum(w + len(GAP) for w in widths if w >= 0) - len(GAP)
        size = Size(width, len(self.keys) + 1)
        if size != self.virtual_size:
            self.virtual_size = size  # lays the widget out again: only when it changed
        if len(self._cache) > 4 * max(64, len(self.keys)):
            self._cache.clear()  # rows come and go: keep the cache to what is shown
        self.refresh()

    def move_cursor(self, row: int) -> None:
        if not self.keys:
            return
        self.cursor_row = max(0, min(row, len(self.keys) - 1))
        # Line 0 is the header: row i is line i + 1.
        top = self.scroll_offset.y
        visible = max(1, self.size.height - 1)
        if self.cursor_row < top:
            self.scroll_to(y=self.cursor_row, animate=False)
        elif self.cursor_row >= top + visible:
            self.scroll_to(y=self.cursor_row - visible + 1, animate=False)
        self.refresh()

    def action_cursor(self, delta: int) -> None:
        self.move_cursor(self.cursor_row + delta)

    def action_page(self, pages: int) -> None:
        self.move_cursor(self.cursor_row + pages * max(1, self.size.height - 2))

    # -- drawing --------------------------------------------------------------------------

    def _style(self, var: str, bold: bool = False) -> Style:
        color = self.app.theme_variables.get(var)
        if not color:
            return Style(bold=bold)
        # Theme variables may carry an alpha (foreground-muted: #D8DEE999), which rich cannot
        # parse; Textual's Color reads it, laid over the background as Textual would draw it.
        background = TextualColor.parse(self.app.theme_variables.get("background", "#000000"))
        return Style(color=(background + TextualColor.parse(color)).rich_color, bold=bold)

    def _line(self, cells: tuple[str, ...], styles: list[Style], base: Style) -> Strip:
        segments: list[Segment] = []
        for i, (text, width) in enumerate(zip(cells, self._widths, strict=True)):
            if width < 0:
                continue  # a column hidden at this width
            padded = text.ljust(width) if i < TEXT_COLUMNS else text.rjust(width)
            if segments:
                segments.append(Segment(GAP, base))
            segments.append(Segment(padded, base + styles[i]))
        return Strip(segments)

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.size.width
        if y == 0:
            key: tuple[object, ...] = ("header", self.sort_column)
            strip = self._cache.get(key)
            if strip is None:
                bold = Style(bold=True)
                styles = [
                    Style(bold=True, underline=i == self.sort_column) for i in range(len(HEADERS))
                ]
                strip = self._cache[key] = self._line(HEADERS, styles, bold)
            return strip.crop_extend(scroll_x, scroll_x + width, None)
        index = scroll_y + y - 1
        if index >= len(self.keys):
            return Strip.blank(width)
        cells, level = self.cells[index], self.levels[index]
        selected = index == self.cursor_row and self.has_focus
        key = ("row", cells, level, selected, self.sort_column, index % 2)
        strip = self._cache.get(key)
        if strip is None:
            plain = Style()
            styles = [plain] * len(cells)
            styles[0] = Style(bold=True)
            styles[1] = self._style(BADGE_VAR[level], bold=level == "OVERLOADED")
            if self.sort_column >= 0:
                styles[self.sort_column] = Style(bold=True)
            for i in range(TEXT_COLUMNS, len(cells)):
                if cells[i] == "-":
                    styles[i] = Style(dim=True)
            base = Style(reverse=True) if selected else Style()
            strip = self._cache[key] = self._line(cells, styles, base)
        return strip.crop_extend(scroll_x, scroll_x + width, None)

    def on_resize(self) -> None:
        self._cache.clear()  # the columns shown depend on the width

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()

    def on_click(self, event: Click) -> None:
        if event.y >= 1:  # line 0 is the header
            self.move_cursor(self.scroll_offset.y + event.y - 1)


def _cells(r: FleetRow, level: str, marked: bool) -> tuple[str, ...]:
    values = tuple(
        "-" if c.key.startswith("gate_") and r.gate is None else c.fmt(r.values.get(c.key))
        for c in COLUMNS
    )
    # Every one a Prometheus label: cleaned of control characters like the rest.
    names = (clip(r.node, 24), clip(r.instance, 40), clip(r.model or "-", 40), clip(r.dialect, 24))
    return ("*" if marked else " ", level, *names, *values)
