"""A panel keeps the height of its tallest text for ``HOLD_S`` only in rows its column has free:
a held blank line never makes the column scroll, which would push another panel's last line out
of view for the whole hold (an operator saw a blank GPU row where the SLO panel's line was)."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.pilot import Pilot

from gpuwatch.tui.widgets.column import KeepInView
from gpuwatch.tui.widgets.panel import Panel


class Column(App[None]):
    """Two panels in a column of ``rows`` rows that scrolls."""

    def __init__(self, rows: int) -> None:
        super().__init__()
        self.rows = rows

    def compose(self) -> ComposeResult:
        with KeepInView(id="column"):
            yield Panel(id="top")
            yield Panel(id="bottom")

    def on_mount(self) -> None:
        column = self.query_one(KeepInView)
        column.styles.height = self.rows
        column.styles.overflow_y = "auto"
        column.styles.scrollbar_gutter = "stable"  # as the dashboard's: no width that flips
        for panel in self.query(Panel):
            panel.styles.height = "auto"


def lines(n: int, name: str) -> str:
    return "\n".join(f"{name} {i}" for i in range(n))


async def shown(app: Column, pilot: Pilot[None]) -> tuple[int, int, int]:
    """(top's held blank lines, the rows its panels take, rows the column shows) once settled."""
    await pilot.pause()
    await pilot.pause()
    column = app.query_one(KeepInView)
    return (
        app.query_one("#top", Panel).held,
        sum(panel.outer_size.height for panel in app.query(Panel)),
        column.scrollable_content_region.height,
    )


async def test_a_held_line_takes_a_free_row_and_never_pushes_a_line_out_of_view() -> None:
    # A column with a row to spare: the top panel's shorter text keeps its tallest height.
    app = Column(rows=8)
    async with app.run_test(size=(40, 12)) as pilot:
        top, bottom = app.query_one("#top", Panel), app.query_one("#bottom", Panel)
        top.show(lines(3, "top"))
        bottom.show(lines(3, "bottom"))
        await shown(app, pilot)
        top.show(lines(4, "top"))
        await shown(app, pilot)
        top.show(lines(3, "top"))
        assert await shown(app, pilot) == (1, 7, 8)
        bottom.show(lines(4, "bottom"))  # into the free row: the held one still fits
        assert await shown(app, pilot) == (1, 8, 8)
        # The bottom panel grows past it: the held line is let go, nothing scrolls.
        bottom.show(lines(5, "bottom"))
        assert await shown(app, pilot) == (0, 8, 8)


async def test_no_line_held_where_the_column_has_no_row_for_it() -> None:
    # The column full to its last row: a held line would make it scroll.
    app = Column(rows=6)
    async with app.run_test(size=(40, 12)) as pilot:
        top, bottom = app.query_one("#top", Panel), app.query_one("#bottom", Panel)
        top.show(lines(3, "top"))
        bottom.show(lines(3, "bottom"))
        await shown(app, pilot)
        top.show(lines(4, "top"))  # real text: the column scrolls for it
        assert (await shown(app, pilot))[1:] == (7, 6)
        top.show(lines(3, "top"))
        assert await shown(app, pilot) == (0, 6, 6)
