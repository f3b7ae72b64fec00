"""A lean braille line chart, drawn with Textual's line API.

Why not plotext: rebuilding a plotext canvas costs milliseconds per chart, and the dashboard's
whole budget is 2% of one core at one frame a second (bench/tui.py prints what this costs).
This widget bins each series to its width (2 dots a cell, the max of each bin so a spike never
vanishes), draws dots and vertical joins into a braille grid, and keeps the finished rows as
Strips until the data, the size or the theme changes; a frame then costs one lookup a row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.segment import Segment
from rich.style import Style
from textual.color import Color
from textual.strip import Strip
from textual.widget import Widget

from gpuwatch.series import Point

# Braille dot bits by (x in 0..1, y in 0..3 from the top).
_DOTS = ((0x01, 0x02, 0x04, 0x40), (0x08, 0x10, 0x20, 0x80))
_LABEL_W = 7


@dataclass(frozen=True)
class Line:
    label: str
    points: Sequence[Point]
    color: str  # a theme variable: "ttft", "queue", "kv", ...


def nice_max(value: float) -> float:
    """A round axis top at or above ``value`` (1, 2, 2.5, 5 x 10^n)."""
    if value <= 0:
        return 1.0
    exp = 10 ** int(f"{value:e}".split("e")[1])
    for m in (1, 2, 2.5, 5, 10):
        if value <= m * exp:
            return m * exp
    return 10 * exp


def bin_points(points: Sequence[Point], start: float, end: float, bins: int) -> list[float | None]:
    """The max of each time bin (a spike must not vanish when downsampled)."""
    out: list[float | None] = [None] * bins
    span = end - start
    if span <= 0 or bins <= 0:
        return out
    for p in points:
        if p.t < start or p.t > end:
            continue
        i = min(bins - 1, int((p.t - start) / span * bins))
        if out[i] is None or p.v > out[i]:  # type: ignore[operator]
            out[i] = p.v
    return out


def braille_rows(
    binned: list[list[float | None]],
    colors: list[str],
    rows: int,
    cols: int,
    top: float,
    threshold: float | None,
) -> list[list[tuple[int, str]]]:
    """(braille bits, colour name) per cell, top row first."""
    dots_h = rows * 4
    grid = [[0] * cols for _ in range(rows)]
    owner = [[""] * cols for _ in range(rows)]

    def plot(x: int, lo: int, hi: int, color: str) -> None:
        """Dots from height ``lo`` to ``hi`` in dot column ``x``."""
        col, bits = x // 2, _DOTS[x % 2]
        for y in range(lo, hi + 1):
            flipped = dots_h - 1 - y
            row = flipped // 4
            grid[row][col] |= bits[flipped % 4]
            owner[row][col] = color

    if threshold is not None and threshold <= top:
        y = min(dots_h - 1, int(threshold / top * (dots_h - 1)))
        for x in range(0, cols * 2, 3):
            plot(x, y, y, "bad")
    for values, color in zip(binned, colors, strict=True):
        prev: int | None = None
        for x, v in enumerate(values):
            if v is None:
                prev = None
                continue
            y = min(dots_h - 1, max(0, round(v / top * (dots_h - 1))))
            if prev is None:
                plot(x, y, y, color)
            else:
                plot(x, min(prev, y), max(prev, y), color)
            prev = y
    return [list(zip(grid[r], owner[r], strict=True)) for r in range(rows)]


class Chart(Widget):
    DEFAULT_CSS = """
    Chart { height: 1fr; min-height: 4; }
    """

    def __init__(
        self, title: str, fmt: Callable[[float], str] = lambda v: f"{v:.0f}", **kwargs
    ) -> None:
        super().__init__(**kwargs)
        self.title = title
        self.fmt = fmt
        self.lines: list[Line] = []
        self.window = (0.0, 60.0)
        self.threshold: float | None = None
        self.floor_max: float = 0.0
        self._version = 0
        self._key: tuple | None = None
        self._strips: list[Strip] = []
        self.rebuilds = 0

    def set_data(
        self,
        lines: list[Line],
        start: float,
        end: float,
        threshold: float | None = None,
        floor_max: float = 0.0,
    ) -> None:
        """New data; the chart redraws once, on the next frame, only if it is shown."""
        self.lines, self.window, self.threshold, self.floor_max = (
            lines,
            (start, end),
            threshold,
            floor_max,
        )
        self._version += 1
        self.refresh()

    def _styles(self) -> dict[str, Style]:
        variables = self.app.get_css_variables()
        out = {}
        for name in {line.color for line in self.lines} | {"bad"}:
            out[name] = Style(color=Color.parse(variables.get(name, "white")).rich_color)
        return out

    def render_line(self, y: int) -> Strip:
        size = self.content_size
        key = (self._version, size.width, size.height, self.app.theme)
        if key != self._key:
            self._key = key
            self._strips = self._build(size.width, size.height)
            self.rebuilds += 1
        return self._strips[y] if y < len(self._strips) else Strip.blank(size.width)

    def _build(self, width: int, height: int) -> list[Strip]:
        strips = self._plot(width, height)
        base = self.rich_style  # the widget's own background and text colour, under every cell
        return [strip.apply_style(base) for strip in strips]

    def _plot(self, width: int, height: int) -> list[Strip]:
        styles = self._styles()
        dim, bold = Style(dim=True), Style(bold=True)
        head = [Segment(self.title, bold)]
        for line in self.lines:
            last = line.points[-1].v if line.points else None
            head += [
                Segment("  "),
                Segment(line.label, styles[line.color]),
                Segment(" " + (self.fmt(last) if last is not None else "-")),
            ]
        strips = [Strip(head).crop(0, width).extend_cell_length(width)]
        # Title, plot rows, then the time axis when there is room for a plot of two rows.
        with_axis = height >= 4
        rows, cols = height - 1 - with_axis, width - _LABEL_W
        if rows < 1 or cols < 4:
            return strips
        start, end = self.window
        binned = [bin_points(line.points, start, end, cols * 2) for line in self.lines]
        peak = max(
            [v for b in binned for v in b if v is not None] + [self.threshold or 0, self.floor_max]
        )
        top = nice_max(peak)
        cells = braille_rows(
            binned, [line.color for line in self.lines], rows, cols, top, self.threshold
        )
        for r, row in enumerate(cells):
            label = self.fmt(top) if r == 0 else ("0" if r == rows - 1 else "")
            segments = [Segment(f"{label:>{_LABEL_W - 1}} ", dim)]
            # One segment per colour change, not per cell.
            run_color, run = "", list[str]()
            for bits, owner in row:
                color = owner if bits else ""
                if color != run_color and run:
                    segments.append(Segment("".join(run), styles.get(run_color)))
                    run = []
                run_color = color
                run.append(chr(0x2800 + bits) if bits else " ")
            if run:
                segments.append(Segment("".join(run), styles.get(run_color)))
            strips.append(Strip(segments).crop(0, width))
        if with_axis:
            axis = time_axis(end - start, cols)
            strips.append(Strip([Segment(" " * _LABEL_W + axis, dim)]).crop(0, width))
        return strips


def ago(seconds: float) -> str:
    return f"-{seconds / 60:g}m" if seconds >= 60 else f"-{seconds:g}s"


def time_axis(span_s: float, cols: int) -> str:
    """``-5m      -2.5m      now``: where the plot's left edge, middle and right edge are."""
    cells = [" "] * cols
    marks = [(0, ago(span_s)), (cols // 2, ago(span_s / 2)), (cols, "now")]
    for i, (at, text) in enumerate(marks):
        # left-aligned at the left edge, centred in the middle, right-aligned at the right
        first = at if i == 0 else at - len(text) if i == 2 else at - len(text) // 2
        for j, ch in enumerate(text):
            if 0 <= first + j < cols:
                cells[first + j] = ch
    return "".join(cells)
