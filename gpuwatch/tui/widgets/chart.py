"""A lean braille line chart, drawn with Textual's line API.

Why not plotext: rebuilding a plotext canvas costs milliseconds per chart, and the dashboard's
whole budget is 1% of one core at one frame a second (bench/tui.py prints what this costs).
Each series is binned to the chart's width (2 dots a cell, the max of each bin so a spike never
vanishes). The bins are fixed in time, not to the window's edge, so a new frame bins only the
points that arrived since the last one (``TimeBins``), and the plot scrolls by whole cells; a
cell column is drawn from its dots' heights, and a column already drawn with the same heights
is reused (``ColumnCache``), so a frame draws only the columns that are new at the right edge.
The finished rows are kept as Strips until the data, the size or the theme changes.

A ``paged`` chart (``--slow-link``) does not scroll at all between pages: its plot is fixed in
time, the newest cell somewhere in its last ``PAGE`` of cells, and new data fills cells to the
right of the old ones, which stay where they are; when the data reaches the right edge the
plot jumps a page left. A scroll rewrites every cell of the plot, the bulk of what a slow link
carries; a page jump does it once a page (half the plot) instead of at every redraw. The plot
holds the window and one page more, so it always shows at least the window.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from rich.segment import Segment
from rich.style import Style
from textual.color import Color
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

from gpuwatch.series import Point

# Braille dot bits by (x in 0..1, y in 0..3 from the top).
_DOTS = ((0x01, 0x02, 0x04, 0x40), (0x08, 0x10, 0x20, 0x80))
_LABEL_W = 7
# A paged chart's page: this share of its plot's cells (see the module's docstring).
PAGE = 0.5


@dataclass(frozen=True)
class Line:
    label: str
    points: Sequence[Point]
    color: str  # a theme variable: "ttft", "queue", "kv", ...
    # Drawn over the others where they cross (lines are drawn in order, the last on top), so
    # the line that matters can come first in the title and still be seen.
    on_top: bool = False


def nice_max(value: float) -> float:
    """A round axis top at or above ``value`` (1, 2, 2.5, 5 x 10^n)."""
    if value <= 0:
        return 1.0
    exp: float = 10 ** int(f"{value:e}".split("e")[1])
    for m in (1, 2, 2.5, 5, 10):
        if value <= m * exp:
            return m * exp
    return 10 * exp


def _time(p: Point) -> float:
    return p.t


class TimeBins:
    """One series' maximum per time bin, bin ``k`` holding ``[k * width_s, (k + 1) * width_s)``.

    ``add`` is given the series' points in the window, oldest first, every frame; it bins only
    those newer than the last one it binned. Points that do not continue what it binned (another
    engine's series, a history rebuilt) make it start over from the points given.
    """

    def __init__(self, width_s: float) -> None:
        self.width_s = width_s
        self.bins: dict[int, float] = {}
        self._last: Point | None = None

    def add(self, points: Sequence[Point]) -> None:
        if not points:
            self.bins.clear()
            self._last = None
            return
        first = 0
        if self._last is not None:
            i = bisect.bisect_right(points, self._last.t, key=_time)
            if i and points[i - 1] == self._last:
                first = i
            else:
                self.bins.clear()
        bins, width = self.bins, self.width_s
        for j in range(first, len(points)):
            p = points[j]
            k = math.floor(p.t / width)
            old = bins.get(k)
            if old is None or p.v > old:
                bins[k] = p.v
        self._last = points[-1]

    def values(self, first: int, n: int) -> list[float | None]:
        """Bins ``first`` .. ``first + n - 1`` (None where no point fell); older ones dropped."""
        for k in [k for k in self.bins if k < first]:
            del self.bins[k]
        get = self.bins.get
        return [get(k) for k in range(first, first + n)]


def dot_heights(values: list[float | None], top: float, dots_h: int) -> list[int | None]:
    return [
        None if v is None else min(dots_h - 1, max(0, round(v / top * (dots_h - 1))))
        for v in values
    ]


Column = tuple[tuple[int, str], ...]  # (braille bits, colour name) per row, top row first
# (threshold dot's x or None, each series' (before, y0, y1) dot heights): what draws a column
ColumnKey = tuple[int | None, tuple[tuple[int | None, int | None, int | None], ...]]


class ColumnCache:
    """Cell columns by what decides them: each series' dot heights (the dot before the cell
    and its two dots) and whether the cell holds a threshold dot. Valid for one (rows, top,
    threshold); a new one is made when those change."""

    def __init__(self, rows: int, threshold_y: int | None) -> None:
        self.rows = rows
        self.threshold_y = threshold_y
        self._columns: dict[ColumnKey, Column] = {}

    def column(self, key: ColumnKey, colors: Sequence[str]) -> Column:
        found = self._columns.get(key)
        if found is None:
            if len(self._columns) > 4096:  # bounded: heights that scrolled away are dropped
                self._columns.clear()
            found = self._columns[key] = self._draw(key, colors)
        return found

    def _draw(self, key: ColumnKey, colors: Sequence[str]) -> Column:
        dotted, heights = key
        rows = self.rows
        dots_h = rows * 4
        bits = [0] * rows
        owner = [""] * rows

        def plot(x: int, lo: int, hi: int, color: str) -> None:
            dots = _DOTS[x]
            for y in range(lo, hi + 1):
                flipped = dots_h - 1 - y
                row = flipped // 4
                bits[row] |= dots[flipped % 4]
                owner[row] = color

        if dotted is not None and self.threshold_y is not None:
            plot(dotted, self.threshold_y, self.threshold_y, "bad")
        for (before, y0, y1), color in zip(heights, colors, strict=True):
            for x, (prev, y) in enumerate(((before, y0), (y0, y1))):
                if y is None:
                    continue
                if prev is None:
                    plot(x, y, y, color)
                else:
                    plot(x, min(prev, y), max(prev, y), color)
        return tuple(zip(bits, owner, strict=True))


# Shorter names for a chart's lines, taken when the full ones do not fit on the legend's line.
SHORT_LABELS = {"running": "run", "waiting": "wait", "gate queue": "at gate"}
# A legend takes a second line only where the plot keeps this many rows (a tall chart).
WRAP_MIN_ROWS = 6

Legend = list[list[tuple[str, str | None]]]  # lines of (text, colour name; None: the title's)


def legend(title: str, lines: Sequence[Line], values: Sequence[str], width: int,
           height: int) -> Legend:  # fmt: skip
    """The chart's title and each line's label and latest value, in ``width`` cells, never a
    word cut: on one line if it fits (two spaces apart, else one); else over more lines where
    the chart is tall; else with shorter labels (``SHORT_LABELS``), on one line or, when the
    plot still keeps a row, more; else the entries that fit whole on one line."""
    full = [(line.label, line.color, value) for line, value in zip(lines, values, strict=True)]
    short = [(SHORT_LABELS.get(label, label), color, value) for label, color, value in full]
    for entries, min_rows in ((full, WRAP_MIN_ROWS), (short, 1)):
        for gap in ("  ", " "):
            one = _packed(title, entries, width, gap, wrap=False)
            if one is not None:
                return one
        wrapped = _packed(title, entries, width, "  ", wrap=True)
        if wrapped is not None and height - len(wrapped) >= min_rows:
            return wrapped
    # At the least: the first entries that fit whole on one line (with none, the title alone).
    for count in range(len(short), -1, -1):
        one = _packed(title, short[:count], width, " ", wrap=False)
        if one is not None:
            return one
    return [[(title, None)]]


def _packed(title: str, entries: list[tuple[str, str, str]], width: int, gap: str,
            wrap: bool) -> Legend | None:  # fmt: skip
    """The title and entries on one line (None if they do not fit), or wrapped over lines
    (None if an entry is wider than a line)."""
    out: Legend = [[(title, None)]]
    used = len(title)
    for label, color, value in entries:
        size = len(label) + 1 + len(value)
        if used + len(gap) + size > width:
            if not wrap or size > width:
                return None
            out.append([])
            used = 0
        lead = [(gap, "")] if out[-1] else []
        out[-1] += [*lead, (label, color), (f" {value}", "")]
        used += len(gap) * len(lead) + size
    return out


class Chart(Widget):
    DEFAULT_CSS = """
    Chart { height: 1fr; min-height: 4; }
    """

    def __init__(
        self,
        title: str,
        fmt: Callable[[float], str] = lambda v: f"{v:.0f}",
        *,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
        paged: bool = False,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.paged = paged
        self.auto_links = False  # no links: Textual need not look for them in every row
        self.title = title
        self.fmt = fmt
        self.lines: list[Line] = []
        self.window = (0.0, 60.0)
        self.threshold: float | None = None
        self.floor_max: float = 0.0
        self._version = 0
        self._key: tuple[int, int, int, str] | None = None
        self._strips: list[Strip] = []
        self.rebuilds = 0
        self._style_key: tuple[str, tuple[str, ...]] | None = None
        self._style_map: dict[str, Style] = {}
        self._bins_key: tuple[float, tuple[str, ...]] | None = None
        self._bins: list[TimeBins] = []
        self._columns: ColumnCache | None = None
        self._top = 0.0

    def set_data(
        self,
        lines: list[Line],
        start: float,
        end: float,
        threshold: float | None = None,
        floor_max: float = 0.0,
    ) -> None:
        """New data. A chart on screen draws it now and repaints only the rows that changed
        (between two scrolls only the newest cells move: the title and a few rows, not all
        of them); one not shown draws when it is."""
        self.lines, self.window, self.threshold, self.floor_max = (
            lines,
            (start, end),
            threshold,
            floor_max,
        )
        self._version += 1
        size = self.content_size
        if not self.region or not size.width:
            self.refresh()
            return
        old, drawn_for = self._strips, self._key
        self._strips = self._draw_now()
        drawn = (drawn_for or ())[1:] == (self._key or ())[1:]  # at this size, in this theme
        if drawn_for is None or not drawn or len(old) != len(self._strips):
            self.refresh()
            return
        dirty = [
            Region(0, y, size.width, 1)
            for y, (was, now) in enumerate(zip(old, self._strips, strict=True))
            if was != now
        ]
        if dirty:
            self.refresh(*dirty)

    def _styles(self) -> dict[str, Style]:
        """Each colour name's style over the widget's own background and text colour ("" is
        that alone), worked out once per theme: asking Textual for its CSS variables costs more
        than drawing a chart."""
        key = (self.app.theme, tuple(line.color for line in self.lines))
        if key != self._style_key:
            variables = self.app.get_css_variables()
            base = self.rich_style
            styles = {"": base, "dim": base + Style(dim=True), "bold": base + Style(bold=True)}
            for name in {line.color for line in self.lines} | {"bad"}:
                color = Color.parse(variables.get(name, "white")).rich_color
                styles[name] = base + Style(color=color)
            self._style_key, self._style_map = key, styles
        return self._style_map

    def _draw_now(self) -> list[Strip]:
        """The strips for the data, size and theme now (drawn again only if one changed)."""
        size = self.content_size
        key = (self._version, size.width, size.height, self.app.theme)
        if key != self._key:
            self._key = key
            self._strips = self._build(size.width, size.height)
            self.rebuilds += 1
        return self._strips

    def render_line(self, y: int) -> Strip:
        strips = self._draw_now()
        return strips[y] if y < len(strips) else Strip.blank(self.content_size.width)

    def _build(self, width: int, height: int) -> list[Strip]:
        styles = self._styles()
        base = styles[""]
        values = [self.fmt(line.points[-1].v) if line.points else "-" for line in self.lines]
        rows_of_legend = legend(self.title, self.lines, values, width, height)
        strips = []
        for row in rows_of_legend:
            segments = [
                Segment(text, styles["bold"] if color is None else styles[color])
                for text, color in row
            ]
            strips.append(Strip(segments).crop(0, width).extend_cell_length(width, base))
        # Legend, plot rows, then the time axis while the plot keeps two rows beside it.
        below = height - len(strips)
        with_axis = below >= 3
        rows, cols = below - with_axis, width - _LABEL_W
        start, end = self.window
        # Rounded: ``end - start`` of a window slid by a float clock wobbles in its last bits.
        span = round(end - start, 6)
        if rows < 1 or cols < 4 or span <= 0:
            return strips
        # Paged: the window spans the cells but a page, the newest cell is in the last page.
        page = max(1, int(cols * PAGE)) if self.paged else 0
        dots = cols * 2
        bin_s = span / (dots - 2 * page)
        # Cells (2 dots) are fixed in time, so the plot moves by whole cells and a cell keeps
        # its look as it moves left. Not paged, the last cell holds the newest bin.
        newest = math.floor(end / bin_s) // 2
        last = (newest // page + 1) * page - 1 if page else newest
        first = (last - cols + 1) * 2
        binned = [bins.values(first - 1, dots + 1) for bins in self._time_bins(bin_s)]
        peak = max(
            [v for b in binned for v in b[1:] if v is not None]
            + [self.threshold or 0, self.floor_max]
        )
        top = nice_max(peak)
        dots_h = rows * 4
        threshold_y = None
        if self.threshold is not None and self.threshold <= top:
            threshold_y = min(dots_h - 1, int(self.threshold / top * (dots_h - 1)))
        if self._columns is None or (self._columns.rows, self._columns.threshold_y, self._top) != (
            rows,
            threshold_y,
            top,
        ):
            self._columns, self._top = ColumnCache(rows, threshold_y), top
        cache = self._columns
        order = sorted(range(len(self.lines)), key=lambda i: self.lines[i].on_top)  # stable
        # [0] of each: the dot before the first
        heights = [dot_heights(binned[i], top, dots_h) for i in order]
        colors = [self.lines[i].color for i in order]
        columns = []
        for c in range(cols):
            # The threshold is dotted every third dot, counted in time so it moves with the plot.
            phase = (first + 2 * c) % 3
            dotted = 0 if phase == 0 else 1 if phase == 2 else None
            key = (dotted, tuple((h[2 * c], h[2 * c + 1], h[2 * c + 2]) for h in heights))
            columns.append(cache.column(key, colors))
        for r in range(rows):
            label = self.fmt(top) if r == 0 else ("0" if r == rows - 1 else "")
            segments = [Segment(f"{label:>{_LABEL_W - 1}} ", styles["dim"])]
            # One segment per colour change, not per cell.
            run_color, run = "", list[str]()
            for column in columns:
                bits, owner = column[r]
                color = owner if bits else ""
                if color != run_color and run:
                    segments.append(Segment("".join(run), styles[run_color]))
                    run = []
                run_color = color
                run.append(_CELLS[bits])
            if run:
                segments.append(Segment("".join(run), styles[run_color]))
            strips.append(Strip(segments).crop(0, width))
        if with_axis:
            axis = time_axis(span, cols, cols - (last - newest), cols - page)
            strips.append(Strip([Segment(" " * _LABEL_W + axis, styles["dim"])]).crop(0, width))
        return strips

    def _time_bins(self, bin_s: float) -> list[TimeBins]:
        """Each line's bins, its new points added; made anew when the bin width or the lines
        (their labels) change."""
        key = (bin_s, tuple(line.label for line in self.lines))
        if key != self._bins_key:
            self._bins_key = key
            self._bins = [TimeBins(bin_s) for _ in self.lines]
        for bins, line in zip(self._bins, self.lines, strict=True):
            bins.add(line.points)
        return self._bins


_CELLS = [" "] + [chr(0x2800 + bits) for bits in range(1, 256)]


def ago(seconds: float) -> str:
    return f"-{seconds / 60:g}m" if seconds >= 60 else f"-{seconds:g}s"


@lru_cache(maxsize=64)
def time_axis(span_s: float, cols: int, right: int | None = None, width: int | None = None) -> str:
    """``-5m      -2.5m      now``: where the window's start, middle and end are on a plot of
    ``cols`` cells; the window ``width`` cells wide, ending ``right`` cells from the plot's
    left edge (by default the whole plot; a paged chart's window is narrower, and ends where
    its newest cell is)."""
    cells = [" "] * cols
    right = cols if right is None else right
    width = cols if width is None else width
    left = right - width
    marks = [(left, ago(span_s)), (left + width // 2, ago(span_s / 2)), (right, "now")]
    for i, (at, text) in enumerate(marks):
        # left-aligned at the left edge, centred in the middle, right-aligned at the right
        first = at if i == 0 else at - len(text) if i == 2 else at - len(text) // 2
        for j, ch in enumerate(text):
            if 0 <= first + j < cols:
                cells[first + j] = ch
    return "".join(cells)
