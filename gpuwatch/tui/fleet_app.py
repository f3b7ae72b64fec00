"""``gpuwatch --prometheus URL``: the fleet through Prometheus, one table, drill-down, and one
change for many gates.

Its own app beside the node dashboard (``app.py``): one poll loop reads the whole fleet once
per interval (one query per signal, whatever the number of engines) into ``FleetState``; the
screens only read it. ``--at TIME`` shows a past instant: one reading, evaluated then.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from textual.app import App
from textual.binding import Binding
from textual.css.query import NoMatches

from gpuwatch.config import DEFAULT_THEME, GateTarget
from gpuwatch.control.fleet import FleetChange
from gpuwatch.control.guard import Guard
from gpuwatch.monitor.fleet import FleetState
from gpuwatch.sources.prometheus import PrometheusSource
from gpuwatch.sources.promql import FleetRow
from gpuwatch.tui.screens.fleet import FleetScreen
from gpuwatch.tui.screens.help import HelpScreen
from gpuwatch.tui.screens.node import NodeScreen
from gpuwatch.tui.themes import SEMANTIC_DEFAULTS, load_themes


@dataclass
class FleetOptions:
    prometheus: str
    source: PrometheusSource
    interval_s: float = 1.0
    slo: dict[str, float | None] = field(default_factory=dict)
    read_only: bool = False
    gates: dict[str, GateTarget] = field(default_factory=dict)
    direct: bool = False  # drill-down also scrapes the node's /metrics itself
    at: float | None = None  # a past instant (Unix time): one reading, evaluated then
    theme: str = DEFAULT_THEME


class FleetApp(App[None]):
    TITLE = "gpuwatch fleet"
    BINDINGS = [
        Binding("q", "quit", "quit"),
        Binding("question_mark", "help", "help", key_display="?"),
        Binding("t", "next_theme", "theme", show=False),
    ]
    HELP_NOTES = [
        "[b]fleet[/]: one row per engine (instance, model, dialect) read from Prometheus, one "
        "query per signal for the whole fleet, every query at the same instant. Health: the "
        "node badge's SLO rules on the row's values (p99s from histogram_quantile over "
        "rate(...[1m])). A gate's in-flight / queued / refused show on the rows of its node "
        "(the target label 'node', else the instance's host).",
        "",
        "[b]many gates[/]: mark rows with space (none marked: the row under the cursor), then "
        "+ - ] [ or e change the selected lane (tab) on every marked node's gate: one "
        "confirmation lists each node's old -> new, then one PATCH per gate with its own "
        "If-Match; a gate changed in between answers 409 and is shown so. Admin URLs and "
        'tokens come from [gates."instance-glob"] in the config. --read-only refuses all.',
    ]

    def __init__(self, options: FleetOptions, state: FleetState | None = None) -> None:
        super().__init__()
        self.options = options
        self.source = options.source
        # A prebuilt state (the screenshots' scene) is shown as it is: nothing polls.
        self.polling = state is None
        self.state = state or FleetState(options.slo)
        # The one guard: a fleet change asks it before reading, and GateClient before PATCH.
        self.guard = Guard(read_only=options.read_only)
        self.change = FleetChange(self.guard)
        self._themes: list[str] = []

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(SEMANTIC_DEFAULTS)

    def on_mount(self) -> None:
        themes, warnings = load_themes()
        for theme in themes:
            self.register_theme(theme)
        self._themes = [t.name for t in themes]
        for warning in warnings:
            self.state.event("warn", warning)
        self.theme = self.options.theme if self.options.theme in self._themes else DEFAULT_THEME
        self.push_screen(FleetScreen())
        # Painted when a reading arrives (and on keys): nothing moves in between.
        if self.polling:
            self.run_worker(self._poll(), group="poll", name="prometheus")

    async def on_unmount(self) -> None:
        await self.source.close()

    def now(self) -> float:
        return self.options.at if self.options.at is not None else time.time()

    def at_label(self) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.now()))

    async def _poll(self) -> None:
        """One reading per interval, scheduled when the last ends (never overlapping)."""
        while True:
            started = time.monotonic()
            try:
                self.state.apply(await self.source.read_fleet(self.options.at))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a bug must not take the screen down: one line
                self.state.event("bad", f"fleet poll: {type(exc).__name__}: {exc}")
            self.paint()
            if self.options.at is not None and self.state.reading and not self.state.reading.error:
                return  # a past instant: read once
            await asyncio.sleep(max(0.05, self.options.interval_s - (time.monotonic() - started)))

    def paint(self) -> None:
        screen = self.screen
        if isinstance(screen, FleetScreen) and screen.is_mounted:
            try:
                screen.paint()
            except NoMatches:
                return  # the screen is being composed, or taken down as the app exits

    def open_node(self, row: FleetRow) -> None:
        self.push_screen(NodeScreen(row))

    def action_help(self) -> None:
        keys = [b for b in [*self.BINDINGS, *FleetScreen.BINDINGS] if isinstance(b, Binding)]
        self.push_screen(HelpScreen(keys, self.HELP_NOTES))

    def action_next_theme(self) -> None:
        if self._themes:
            i = self._themes.index(self.theme) if self.theme in self._themes else -1
            self.theme = self._themes[(i + 1) % len(self._themes)]

    async def action_quit(self) -> None:
        self.exit()


def run(options: FleetOptions, **kwargs: Any) -> None:
    FleetApp(options).run(**kwargs)
