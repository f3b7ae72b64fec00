"""One node from the fleet: its numbers, and charts whose hour is full at once (backfilled
with ``query_range`` from Prometheus). With ``--direct``, its own ``/metrics`` is scraped too
and shown as the dashboard's engine panel. ``esc`` goes back to the fleet."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, cast

from rich.markup import escape
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Container
from textual.screen import Screen
from textual.widgets import Footer, Static

from gpuwatch import polling
from gpuwatch.fmt import pct, seconds
from gpuwatch.monitor.fleet import COLUMNS
from gpuwatch.monitor.state import Monitor
from gpuwatch.series import Point
from gpuwatch.sources.prometheus import PrometheusError
from gpuwatch.sources.promql import (
    CHART_SIGNALS,
    SIGNALS,
    WINDOW,
    FleetRow,
    dialects_named,
    signal_query,
)
from gpuwatch.tui.widgets.chart import Chart, Line
from gpuwatch.tui.widgets.engines import EnginePanel

if TYPE_CHECKING:
    from gpuwatch.tui.fleet_app import FleetApp

HOUR_S = 3600.0
STEP_S = 15.0  # 240 points an hour: more than a chart has columns
REFRESH_S = 15.0
# (chart id, title, [(signal key, label, colour)], format)
REQUESTS = [("running", "running", "ok"), ("waiting", "waiting", "queue")]
TTFT = [("ttft_p50", "p50", "ttft"), ("ttft_p99", "p99", "accent")]
TOKENS = [("gen_tps", "gen", "ok"), ("prompt_tps", "prompt", "ttft")]
CHARTS = (
    ("node-requests", "requests", REQUESTS, None),
    ("node-ttft", f"TTFT {WINDOW}", TTFT, seconds),
    ("node-kv", "KV", [("kv", "KV", "kv")], pct),
    ("node-tokens", f"tokens/s {WINDOW}", TOKENS, None),
)


class NodeScreen(Screen[None]):
    BINDINGS = [Binding("escape,backspace", "app.pop_screen", "back to the fleet")]
    DEFAULT_CSS = """
    NodeScreen { layout: vertical; }
    NodeScreen #node-title { height: 1; background: $panel; padding: 0 1; }
    NodeScreen #node-figures { height: auto; padding: 0 1; }
    NodeScreen #node-direct { height: auto; border: round $panel-lighten-2; padding: 0 1; }
    NodeScreen #node-charts { layout: grid; grid-size: 2 2; grid-gutter: 0 1; height: 1fr; }
    NodeScreen Chart { border: round $panel-lighten-2; }
    """

    def __init__(self, row: FleetRow) -> None:
        super().__init__()
        self.row = row
        self.key = row.key
        self.direct: Monitor | None = None
        self.history: dict[str, list[Point]] = {}
        self.range_error: str | None = None

    @property
    def fleet(self) -> FleetApp:
        return cast("FleetApp", self.app)

    def compose(self) -> ComposeResult:
        yield Static(id="node-title")
        yield Static(id="node-figures")
        if self.fleet.options.direct:
            yield EnginePanel(id="node-direct")
        with Container(id="node-charts"):
            for chart_id, title, _lines, fmt in CHARTS:
                yield Chart(title, **({"fmt": fmt} if fmt else {}), id=chart_id)
        yield Footer()

    def on_mount(self) -> None:
        self.run_worker(self._backfill(), group="node", name="backfill")
        if self.fleet.options.direct and self.row.dialect != "gate":
            url = f"http://{self.row.instance}/metrics"
            self.direct = Monitor([url], self.fleet.options.interval_s, self.fleet.state.slo)
            self.run_worker(
                polling.poll_endpoint(self.direct, url, self.fleet.options.interval_s),
                group="node",
                name=f"direct {url}",
            )
        self.set_interval(1.0, self.paint)
        self.paint()

    async def _backfill(self) -> None:
        """The hour of every chart's signals for this instance, one range query each; again
        every 15 s, so the newest points arrive without a second way of reading them."""
        source = self.fleet.source
        dialects = dialects_named(self.row.dialect)
        wanted = {s.key: s for s in (*SIGNALS, *CHART_SIGNALS)}
        while True:
            end = self.fleet.now()
            for key, signal in wanted.items():
                query = signal_query(signal, dialects, source.node_label, self.row.instance)
                if query is None:
                    continue
                try:
                    series = await source.query_range(query, end - HOUR_S, end, STEP_S)
                except PrometheusError as exc:
                    self.range_error = str(exc)
                    break
                self.range_error = None
                model = self.row.model or ""
                for labels, points in series:
                    if (labels.get("model_name") or labels.get("model") or "") == model:
                        self.history[key] = [Point(t, v) for t, v in points]
            self._paint_charts(end)
            if self.fleet.options.at is not None:
                return  # a past instant does not move
            await asyncio.sleep(REFRESH_S)

    def _paint_charts(self, end: float) -> None:
        for chart_id, _title, lines, _fmt in CHARTS:
            chart = self.query_one(f"#{chart_id}", Chart)
            threshold = self.fleet.state.slo.get("ttft_p99_s") if chart_id == "node-ttft" else None
            data = [Line(label, self.history.get(key, []), color) for key, label, color in lines]
            chart.set_data(
                data, end - HOUR_S, end, threshold, 1.0 if chart_id == "node-kv" else 0.0
            )

    def current(self) -> FleetRow:
        return next((r for r in self.fleet.state.rows if r.key == self.key), self.row)

    def paint(self) -> None:
        row = self.current()
        verdict = self.fleet.state.verdict(row)
        gate = f"  gate {escape(row.gate)}" if row.gate else "  no gate"
        self.query_one("#node-title", Static).update(
            f"[b]{escape(row.node)}[/] {escape(row.instance)}  {escape(row.model or '-')} "
            f"({row.dialect}){gate}  [b]{verdict.level}[/] {escape(verdict.reason)}  "
            "[dim]charts: the last hour from Prometheus, esc back[/]"
        )
        figures = "  ".join(
            f"{c.header} [b]{c.fmt(row.values.get(c.key))}[/]"
            for c in COLUMNS
            if c.key in row.values
        )
        if self.range_error:
            figures += f"\n[$bad]{escape(self.range_error)}[/]"
        self.query_one("#node-figures", Static).update(figures)
        if self.direct is not None:
            self.direct.check_stale()
            self.query_one(EnginePanel).render_engines(
                list(self.direct.endpoints.values()), self.fleet.state.slo.get("ttft_p99_s"), None
            )
