"""What a frame costs: numbers that change in place repaint their panel without a layout pass,
and a chart that scrolls frame by frame draws exactly what a chart drawn from scratch does."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable

from textual.app import App, ComposeResult
from textual.content import Content
from textual.geometry import Offset
from textual.pilot import Pilot
from textual.selection import Selection
from textual.widget import Widget
from textual.widgets import Static

from gpuwatch.series import Point
from gpuwatch.session.node import DashboardOptions, live_session
from gpuwatch.sim.server import start_sim
from gpuwatch.tui.app import GpuwatchApp
from gpuwatch.tui.widgets.chart import PAGE, Chart, Line
from gpuwatch.tui.widgets.panel import HOLD_S, Panel
from tests.functional.test_tui import PROFILE, Load, text
from tests.helpers import eventually


async def test_values_that_change_in_place_repaint_without_a_layout_pass() -> None:
    node, sim = await start_sim(PROFILE, time_scale=2.0, seed=4)
    load = Load(sim.url, 4)
    app = GpuwatchApp(live_session(DashboardOptions(urls=[f"{sim.url}/metrics"], interval_s=0.2)))
    try:
        async with app.run_test(size=(160, 48)) as pilot:
            await eventually(pause=pilot.pause, condition=lambda: "run 4" in text(app, "#engines"))
            # Panels parse their markup a line at a time: no style may run on past a line's end.
            panels = list(app.screen.query(Panel))
            assert len(panels) >= 5
            for each in panels:
                whole = Content.from_markup(each.markup).split("\n")
                by_line = [Content.from_markup(row) for row in each.markup.split("\n")]
                assert [(c.plain, c.spans) for c in whole] == [(c.plain, c.spans) for c in by_line]
            # Every new text from now on: did it ask for a layout, and at what size was the text?
            updates: dict[str, list[tuple[bool, object]]] = {"engines": [], "header": []}
            for name, calls in updates.items():
                panel = app.screen.query_one(f"#{name}", Panel)

                def show(
                    markup: str,
                    *,
                    panel: Panel = panel,
                    calls: list[tuple[bool, object]] = calls,
                    real: Callable[[str], None] = panel.show,
                ) -> None:
                    if markup != panel.markup:
                        layouts = panel.layouts
                        real(markup)
                        calls.append((panel.layouts > layouts, panel._lines))

                # Wrapping the instance's method to watch it: mypy forbids assigning to a method.
                panel.show = show  # type: ignore[method-assign]
            # Token rates and the clock move every second.
            await eventually(
                pause=pilot.pause,
                condition=lambda: all(len(calls) >= 4 for calls in updates.values()),
                timeout=20,
            )
            # The header has one line: its clock never lays the screen out.
            assert [layout for layout, _ in updates["header"]] == [False] * len(updates["header"])
            # The engines' panel: a layout exactly when its text took another number of lines.
            engines = updates["engines"]
            for (_, before), (layout, after) in itertools.pairwise(engines):
                assert layout == (after != before)
            assert any(not layout for layout, _ in engines[1:])
            # Lines more grow the panel at once; lines less wait HOLD_S, then shrink it.
            panel = app.screen.query_one("#engines", Panel)
            del panel.show  # the panel's own again
            now = [0.0]
            panel.clock = lambda: now[0]
            base, layouts = panel.markup, panel.layouts
            panel.show(base + "\nthree\nmore\nlines")
            assert panel.layouts == layouts + 1
            height = panel._lines
            assert height is not None
            panel.show(base)
            now[0] += HOLD_S - 1
            panel.show(base + " ")
            assert panel.layouts == layouts + 1 and panel._lines == height
            now[0] += 2
            panel.show(base)
            assert panel.layouts == layouts + 2 and panel._lines[1] <= height[1] - 3
    finally:
        await load.close()
        await sim.close()


class Panels(App[None]):
    CSS = "Panel, Static { height: auto; width: 40; }"

    def compose(self) -> ComposeResult:
        yield Panel(id="panel")
        yield Static(id="static")


def _lines(widget: Widget) -> list[str]:
    return [strip.text for strip in widget.render_lines(widget.size.region)]


async def test_a_changed_line_repaints_that_line_alone_and_shows_what_a_static_shows() -> None:
    app = Panels()
    rows = ["[b]engine[/] vllm", "run [b]4[/] wait [$queue]0[/]", "TTFT p99 [$ok]1.2s[/]"]
    async with app.run_test(size=(80, 24)) as pilot:
        panel, static = app.query_one(Panel), app.query_one(Static)
        for markup in (
            "\n".join(rows),
            "\n".join([rows[0], "run [b]5[/] wait [$queue]2[/]", rows[2]]),
            "\n".join([rows[0], "run [b]5[/] wait [$queue]2[/]", "TTFT p99 [$bad]9.9s[/]"]),
            # a line too long for the width wraps, as it does in a Static
            "\n".join([rows[0], "x" * 30 + " " + "y" * 30, rows[2]]),
        ):
            layouts, repainted = panel.layouts, panel.repainted
            before = list(panel._strips)
            panel.show(markup)
            # the lines Textual will draw again (a whole-widget refresh marks them all)
            dirty = set(panel._styles_cache._dirty_lines)
            static.update(Content.from_markup(markup))
            await pilot.pause()
            assert _lines(panel) == _lines(static)
            changed = {
                y for y, (a, b) in enumerate(zip(before, panel._strips, strict=False)) if a != b
            }
            if panel.layouts == layouts:  # same height: exactly the lines that changed
                assert dirty == changed and len(changed) == panel.repainted - repainted >= 1
        # the same text again repaints nothing
        repainted = panel.repainted
        panel.show(panel.markup + "")
        assert panel.repainted == repainted


def _styled(widget: Widget) -> list[list[tuple[str, str]]]:
    return [
        [(seg.text, str(seg.style and (seg.style.color, seg.style.bgcolor))) for seg in strip]
        for strip in widget.render_lines(widget.size.region)
    ]


async def _both_showing(app: App[None], pilot: Pilot[None], markup: str) -> tuple[Panel, Static]:
    """The app's Panel and Static, both showing ``markup``, drawn."""
    panel, static = app.query_one(Panel), app.query_one(Static)
    panel.show(markup)
    static.update(Content.from_markup(markup))
    await pilot.pause()
    return panel, static


async def test_a_selection_across_lines_is_drawn_as_a_static_draws_it() -> None:
    app = Panels()
    markup = "aaaa [b]bbbb[/]\ncccc dddd\neeee [$success]ffff[/]"
    async with app.run_test(size=(80, 24)) as pilot:
        panel, static = await _both_showing(app, pilot, markup)
        unselected = _styled(panel)
        for start in (Offset(2, 1), Offset(2, 0)):  # from the middle, and from the first line
            for widget in (panel, static):
                app.screen.selections = {widget: Selection(start, Offset(4, 2))}
                await pilot.pause()
            assert _styled(panel) == _styled(static) != unselected
        app.screen.selections = {}
        await pilot.pause()
        assert _styled(panel) == unselected  # the selection gone, the lines drawn plain again


class Restyled(Panels):
    # A class that changes the colour alone: the size, and so the layout, stay.
    CSS = "Panel, Static { height: auto; } .hot { color: red; }"


async def test_a_restyled_panel_draws_its_lines_again_without_new_text() -> None:
    app = Restyled()
    markup = "plain one\nplain two"
    async with app.run_test(size=(100, 24)) as pilot:
        panel, static = await _both_showing(app, pilot, markup)
        before = _styled(panel)
        panel.add_class("hot")
        static.add_class("hot")
        await pilot.pause()
        await pilot.pause()
        assert _styled(panel) == _styled(static) != before


class Charts(App[None]):
    def compose(self) -> ComposeResult:
        yield Chart("scrolled", id="scrolled")
        yield Chart("fresh", id="fresh")


async def test_a_chart_scrolled_frame_by_frame_equals_one_drawn_from_scratch() -> None:
    rng = random.Random(11)
    points: dict[str, list[Point]] = {name: [] for name in ("running", "waiting")}
    app = Charts()
    async with app.run_test(size=(80, 24)) as pilot:
        scrolled = app.query_one("#scrolled", Chart)
        fresh = app.query_one("#fresh", Chart)
        t = 5000.0
        for frame in range(25):
            for _ in range(3):  # three scrapes a frame, as the dashboard's charts get them
                t += 1.0
                for values in points.values():
                    values.append(
                        Point(t, rng.uniform(0, 40) if frame < 12 else rng.uniform(0, 90))
                    )
            start = t - 60
            lines = [
                Line(name, [p for p in values if p.t >= start], color)
                for (name, values), color in zip(points.items(), ("ok", "queue"), strict=True)
            ]
            scrolled.set_data(lines, start, t, threshold=30.0)
            fresh._bins_key, fresh._columns = None, None  # forget all it drew before
            fresh.set_data(lines, start, t, threshold=30.0)
            await pilot.pause()
            height = scrolled.content_size.height
            assert height > 4
            # What Textual shows (its line cache, kept for the rows the chart did not mark
            # dirty), against what a chart drawn from scratch draws.
            shown = _lines(scrolled)
            assert shown[1:] == [fresh.render_line(y).text for y in range(height)][1:]
            assert any(ch not in " \u2800" for row in shown[1:-1] for ch in row.strip())


class PagedChart(App[None]):
    def compose(self) -> ComposeResult:
        yield Chart("paged", id="paged", paged=True)


async def test_a_paged_chart_keeps_its_cells_in_place_until_it_turns_a_page() -> None:
    """--slow-link: new data fills the cells right of the old ones, which do not move; at the
    right edge the plot jumps half its width; it always shows the whole window."""
    rng = random.Random(5)
    points: list[Point] = []
    app = PagedChart()
    async with app.run_test(size=(80, 12)) as pilot:
        chart = app.query_one("#paged", Chart)
        t, span = 6000.0, 60.0
        frames: list[list[str]] = []
        for _ in range(40):
            t += 2.0
            # 0 and 10 always in the window: the axis top stays, as a scroll is what is tested
            points.append(Point(t, 10.0 if len(points) % 20 == 0 else rng.uniform(0, 9)))
            shown = [p for p in points if p.t >= t - span]
            chart.set_data([Line("v", shown, "ok")], t - span, t)
            await pilot.pause()
            frames.append(_lines(chart))
        plot = slice(1, -1)  # the legend's and the axis' rows left out
        moved = 0
        for before, after in itertools.pairwise(frames):
            cols = len(before[1])
            # the first column that differs, in the plot rows
            first = min(
                (next((x for x in range(cols) if b[x] != a[x]), cols))
                for b, a in zip(before[plot], after[plot], strict=True)
            )
            if first < cols // 2:  # a page turned: everything moved
                moved += 1
            else:  # only the newest cells changed
                assert first >= 7  # never the axis labels
            # "now" ends at the newest cell drawn; the window's start is a window's width
            # (the plot's but a page) before it
            axis, newest = after[-1], max(len(row.rstrip()) for row in after[plot])
            assert axis.rstrip().endswith("now") and len(axis.rstrip()) == newest
            plot_cols = cols - 7  # the axis labels' 7 cells left out
            assert axis.index("-1m") == newest - (plot_cols - int(plot_cols * PAGE))
        # 80 s of data on a 60 s window whose page is 30 s: pages turned, but not every frame
        assert 1 <= moved <= 3
