"""The fleet table: one row per engine, the health badge first, marked rows flagged."""

from __future__ import annotations

import contextlib
from collections.abc import Collection
from typing import Any

from rich.text import Text
from textual.widgets import DataTable

from gpuwatch.fmt import clip
from gpuwatch.monitor.fleet import COLUMNS, FleetState
from gpuwatch.sources.promql import FleetRow

BADGE_STYLE = {"OK": "green", "TIGHT": "yellow", "OVERLOADED": "bold red", "NO DATA": "dim"}
RowKey = tuple[str, str, str]


def row_id(key: RowKey) -> str:
    return "\x1f".join(key)


class FleetTable(DataTable[Text]):
    DEFAULT_CSS = """
    FleetTable { height: 1fr; }
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)  # type: ignore[arg-type]
        self._shown: list[Any] = []

    def on_mount(self) -> None:
        self.add_column(Text(" "), key="mark")
        self.add_column(Text("health"), key="health")
        self.add_column(Text("node"), key="node")
        self.add_column(Text("instance"), key="instance")
        self.add_column(Text("model"), key="model")
        self.add_column(Text("dialect"), key="dialect")
        for c in COLUMNS:
            self.add_column(Text(c.header, justify="right"), key=c.key)

    def cursor_key(self) -> RowKey | None:
        if not self.row_count:
            return None
        try:
            key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        except Exception:  # an empty table after a filter: no row under the cursor
            return None
        if key is None:
            return None
        a, b, c = key.split("\x1f")
        return (a, b, c)

    def render_rows(
        self, state: FleetState, rows: list[FleetRow], marked: Collection[RowKey], sort: str
    ) -> None:
        """Rebuild only when what is shown changed; the cursor stays on its row."""
        shown: list[Any] = [
            (r.key, state.verdict(r).level, r.key in marked, tuple(sorted(r.values.items())))
            for r in rows
        ]
        if shown == self._shown:
            return
        self._shown = shown
        keep = self.cursor_key()
        self.clear()
        for r in rows:
            level = state.verdict(r).level
            cells = [
                Text("*" if r.key in marked else " ", style="bold"),
                Text(level, style=BADGE_STYLE[level]),
                Text(clip(r.node, 24)),
                Text(clip(r.instance, 40)),
                Text(clip(r.model or "-", 40)),
                Text(r.dialect),
            ]
            for c in COLUMNS:
                if c.key.startswith("gate_") and r.gate is None:
                    cells.append(Text("-", style="dim", justify="right"))
                else:
                    value = r.values.get(c.key)
                    style = "bold" if c.key == sort else ""
                    cells.append(Text(c.fmt(value), style=style, justify="right"))
            self.add_row(*cells, key=row_id(r.key))
        if keep is not None:
            # The row may have gone (filtered out, target removed): the cursor stays put.
            with contextlib.suppress(Exception):
                self.move_cursor(row=self.get_row_index(row_id(keep)))
