"""The chart's incremental parts: bins fixed in time, added to frame by frame, equal the bins of
all points at once; a cell column drawn from cache equals one drawn dot by dot."""

from __future__ import annotations

import math
import random

from gpuwatch.series import Point
from gpuwatch.tui.widgets.chart import _DOTS, ColumnCache, TimeBins, dot_heights


def one_shot(points: list[Point], width: float) -> dict[int, float]:
    out: dict[int, float] = {}
    for p in points:
        k = math.floor(p.t / width)
        out[k] = max(out.get(k, p.v), p.v)
    return out


def test_bins_added_frame_by_frame_equal_all_at_once() -> None:
    rng = random.Random(3)
    for _ in range(50):
        width = rng.choice([0.4, 1.0, 2.5])
        points = [Point(1000 + i * rng.uniform(0.2, 1.5), rng.uniform(0, 100)) for i in range(200)]
        points.sort(key=lambda p: p.t)
        bins = TimeBins(width)
        seen = 0
        while seen < len(points):
            seen += rng.randint(1, 9)
            # What the dashboard passes: the points of the window, oldest first.
            window_start = points[min(seen, len(points)) - 1].t - 60
            shown = [p for p in points[:seen] if p.t >= window_start]
            bins.add(shown)
            # Every bin wholly inside the window; the one the window's start cuts may also hold
            # points from before the start that were binned earlier: it is drawn for its time.
            first = math.floor(window_start / width) + 1
            assert {k: v for k, v in bins.bins.items() if k >= first} == {
                k: v for k, v in one_shot(shown, width).items() if k >= first
            }


def test_bins_start_over_for_points_that_do_not_continue_them() -> None:
    bins = TimeBins(1.0)
    bins.add([Point(10.0, 5.0), Point(11.0, 7.0)])
    # Another engine's series (or a rebuilt history): not the points binned so far.
    other = [Point(10.5, 1.0), Point(11.5, 2.0)]
    bins.add(other)
    assert bins.bins == one_shot(other, 1.0)
    bins.add([])
    assert bins.bins == {}
    assert bins.values(9, 4) == [None, None, None, None]


def reference_column(
    heights: list[tuple[int | None, int | None, int | None]],
    colors: list[str],
    rows: int,
    dotted: int | None,
    threshold_y: int | None,
) -> list[tuple[int, str]]:
    """The cell drawn dot by dot, as the chart drew every cell before it cached them."""
    dots_h = rows * 4
    bits, owner = [0] * rows, [""] * rows

    def plot(x: int, lo: int, hi: int, color: str) -> None:
        for y in range(lo, hi + 1):
            flipped = dots_h - 1 - y
            bits[flipped // 4] |= _DOTS[x][flipped % 4]
            owner[flipped // 4] = color

    if dotted is not None and threshold_y is not None:
        plot(dotted, threshold_y, threshold_y, "bad")
    for (before, y0, y1), color in zip(heights, colors, strict=True):
        for x, (prev, y) in enumerate(((before, y0), (y0, y1))):
            if y is not None:
                lo, hi = (y, y) if prev is None else (min(prev, y), max(prev, y))
                plot(x, lo, hi, color)
    return list(zip(bits, owner, strict=True))


def test_cached_columns_equal_columns_drawn_dot_by_dot() -> None:
    rng = random.Random(5)
    rows = 6
    colors = ["ok", "queue"]
    cache = ColumnCache(rows, threshold_y=9)
    for _ in range(2000):
        values = [[rng.choice([None, rng.uniform(0, 12)]) for _ in range(3)] for _ in colors]
        drawn = [dot_heights(v, 10.0, rows * 4) for v in values]
        heights = [(h[0], h[1], h[2]) for h in drawn]
        dotted = rng.choice([None, 0, 1])
        key = (dotted, tuple(heights))
        assert list(cache.column(key, colors)) == reference_column(heights, colors, rows, dotted, 9)
