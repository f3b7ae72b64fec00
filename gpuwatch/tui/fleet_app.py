"""``gpuwatch --prometheus URL``: the fleet through Prometheus, one table, drill-down, and one
change for many gates.

The node dashboard's app (``app.py``) with the fleet table as its first screen: one poll loop
reads the whole fleet once per interval (one query per signal, whatever the number of engines)
into ``FleetState``; the screens only read it. ``enter`` points the dashboard's inputs (its
``Monitor``, options and ``Steering``) at one node and opens the ``Dashboard`` itself; ``esc``
stops that node's workers and comes back. ``--at TIME`` shows a past instant, read-only, with
the replay's cursor keys (``timecursor.py``, ``screens/fleet_history.py``): each move reads the
fleet there.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from textual.app import ScreenStackError
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.worker import WorkerCancelled, WorkerError, WorkerFailed

from gpuwatch import polling
from gpuwatch.admintoken import read_token
from gpuwatch.config import DEFAULT_THEME, GateTarget
from gpuwatch.control.fleet import FleetChange, address_of
from gpuwatch.control.steering import Steering
from gpuwatch.monitor.fleet import FleetState
from gpuwatch.monitor.state import Monitor
from gpuwatch.sources.prometheus import PrometheusError, PrometheusSource
from gpuwatch.sources.promnode import NodeSamples, read_history
from gpuwatch.sources.promql import FleetRow, dialects_named
from gpuwatch.tui.app import Dashboard, DashboardOptions, EnginePoll, GpuwatchApp
from gpuwatch.tui.control import DashboardControl
from gpuwatch.tui.screens.fleet import FleetScreen
from gpuwatch.tui.screens.fleet_history import FleetHistoryScreen
from gpuwatch.tui.screens.help import HelpScreen
from gpuwatch.tui.timecursor import TimeCursor

HISTORY_READ_ONLY = "the fleet in the past is read-only"
HISTORY_NOTE = (
    "[b]the past[/] (--at TIME): the fleet as Prometheus answers at the cursor (REPLAY in the "
    "title), read-only. space plays / pauses at 1x..60x (< >), left / right step one interval, "
    "\\[ ] a minute, : goes to a time (03:12:40 within the last day, 2026-11-30 03:12, or "
    "+90s / -5m from the cursor), { } the previous / next badge change (read 15 s apart, then "
    "to the second; up to half an hour away); each move reads every signal at that instant. "
    "Badges are the SLO rules on that instant's values (no 10 s hold across a move)."
)


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


class FleetApp(GpuwatchApp):
    """The fleet table first; ``enter`` opens the node dashboard itself (``Dashboard``, its
    panels, badge, charts and steering keys) for that row's node, ``esc`` comes back."""

    TITLE = "gpuwatch fleet"
    BINDINGS = [Binding("escape", "to_fleet", "back to the fleet")]
    FLEET_NOTES = [
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
        "",
        "[b]enter[/]: the node's own dashboard, fed by Prometheus' samples of that instance "
        "(with --direct: its /metrics scraped), charts' hour from query_range, GPUs from "
        "DCGM_FI_DEV_* if Prometheus has them; its keys steer that node's gate. esc: back.",
    ]
    # Keys of the node dashboard that mean nothing on the fleet table.
    NODE_ACTIONS = frozenset({"gpus", "cycle_window", "freeze", "to_fleet"})

    def __init__(self, options: FleetOptions, state: FleetState | None = None) -> None:
        # No node until one is opened: an empty monitor that nothing polls.
        placeholder = DashboardOptions(
            [], options.interval_s, theme=options.theme, slo=options.slo, local=False
        )
        super().__init__(placeholder, monitor=Monitor([]))
        placeholder.read_only = options.read_only
        self.fleet_options = options
        self.source = options.source
        # A prebuilt state (the screenshots' scene) is shown as it is: nothing polls.
        self.fleet_polling = state is None
        self.state = state or FleetState(options.slo)
        # In the past (--at) a time cursor says where; each move reads the fleet there.
        self.cursor = TimeCursor(options.at, options.interval_s) if options.at is not None else None
        # The one guard (GpuwatchApp's): a fleet change, a node's steering and GateClient
        # all ask it. The past is read-only.
        self.guard.read_only = options.read_only or self.cursor is not None
        if self.cursor is not None:
            self.guard.reason = HISTORY_READ_ONLY
        self.change = FleetChange(self.guard)
        self.node: FleetRow | None = None

    def home_screen(self) -> Screen[None]:
        return FleetHistoryScreen() if self.cursor is not None else FleetScreen()

    def on_mount(self) -> None:
        # GpuwatchApp.on_mount runs after this one: themes, then the fleet table.
        if self.fleet_polling:
            self.run_worker(self._poll(), group="fleet", name="prometheus")

    async def on_unmount(self) -> None:
        # A drill-down's pollers and backfill read through the source: stopped and waited for
        # first, so none reads from a closed client.
        for worker in self.workers.cancel_group(self, "node"):
            # cancelled (the usual end here), failed, or never started: all are stopped
            with contextlib.suppress(WorkerCancelled, WorkerFailed, WorkerError):
                await worker.wait()
        await self.source.close()

    def now(self) -> float:
        return self.cursor.at if self.cursor is not None else time.time()

    def at_label(self) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.now()))

    async def _poll(self) -> None:
        """One reading per interval, scheduled when the last ends (never overlapping)."""
        while True:
            started = time.monotonic()
            at = self.cursor.at if self.cursor is not None else None
            try:
                reading = await self.source.read_fleet(at)
                if self.cursor is not None:
                    # Each instant judged on its own values: no hold carried over a jump.
                    self.state.badges.clear()
                self.state.apply(reading)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a bug must not take the screen down: one line
                self.state.event("bad", f"fleet poll: {type(exc).__name__}: {exc}")
            self.paint_fleet()
            if at is not None and self.state.reading and not self.state.reading.error:
                return  # a past instant: read once, again when the cursor moves
            interval = self.fleet_options.interval_s
            await asyncio.sleep(max(0.05, interval - (time.monotonic() - started)))

    def moved(self) -> None:
        """The time cursor moved: read the fleet there (a reading under way is dropped)."""
        self.paint_fleet()
        if self.fleet_polling:
            self.run_worker(self._poll(), group="fleet", name="prometheus", exclusive=True)

    def paint_fleet(self) -> None:
        try:
            screen = self.screen
        except ScreenStackError:
            return  # the app is exiting, its screens gone, while a reading was under way
        if isinstance(screen, FleetScreen) and screen.is_mounted:
            try:
                screen.paint()
            except NoMatches:
                return  # the screen is being composed, or taken down as the app exits

    # -- the node dashboard -----------------------------------------------------------------

    def node_options(self, row: FleetRow) -> DashboardOptions:
        """What the node dashboard reads for ``row``: Prometheus' samples of its instance (or
        its /metrics with --direct), and its gate's admin API when one is configured."""
        fo = self.fleet_options
        admin, token = None, None
        if row.gate:
            gate = address_of(row.gate, row.node, fo.gates)
            admin = gate.admin
            if admin and gate.token_file:
                try:
                    token = read_token(Path(gate.token_file).expanduser())
                except ValueError as exc:
                    self.notify(f"gate {row.gate}: {exc}", severity="warning")
        direct = fo.direct and self.cursor is None
        at = self.cursor.at if self.cursor is not None else None  # the past: at the cursor
        url = f"http://{row.instance}/metrics"
        engine_poll: EnginePoll | None = None
        if not direct:
            reader = NodeSamples(self.source, url, row.instance, dialects_named(row.dialect))

            def engine_poll(monitor: Monitor, _url: str) -> Coroutine[Any, Any, None]:
                return polling.poll_prometheus_engine(monitor, reader, fo.interval_s, at)

        return DashboardOptions(
            [url] if row.dialect != "gate" else [],
            fo.interval_s,
            admin_url=admin,
            admin_token=token,
            theme=self.theme,
            slo=fo.slo,
            read_only=fo.read_only or self.cursor is not None,
            title_endpoint=f"{row.instance} ({'its /metrics' if direct else 'via Prometheus'})",
            hostname=row.node,
            engine_poll=engine_poll,
            local=False,
        )

    def open_node(self, row: FleetRow) -> None:
        options = self.node_options(row)
        fo = self.fleet_options
        # Unix time, as Prometheus stamps its samples. At a past instant the clock runs from
        # that instant (the charts end there) and nothing goes stale.
        clock: Callable[[], float] = time.time
        interval = options.interval_s
        if self.cursor is not None:
            at, opened = self.cursor.at, time.monotonic()
            clock, interval = (lambda: at + time.monotonic() - opened), math.inf
        monitor = Monitor(options.urls, interval, fo.slo, options.admin_url, clock=clock)
        self.steering.close()
        self.options, self.monitor, self.node = options, monitor, row
        self.steering = Steering(self.guard, DashboardControl(self), options.admin_url or "")
        self.polling = True
        self._painted_version, self._charts_at = -1, -1e9
        self.poll_sources(group="node")
        self.run_worker(
            polling.poll_dcgm(
                monitor,
                self.source,
                row.node,
                fo.interval_s,
                self.cursor.at if self.cursor is not None else None,
            ),
            group="node",
            name="dcgm",
        )
        if options.urls:
            # A backfill still reading when the app closes meets a closed client: that must
            # not fail the app's exit (nothing is left to draw it on).
            self.run_worker(
                self._backfill(monitor, row), group="node", name="backfill", exit_on_error=False
            )
        self.push_screen(self.DASHBOARD())

    async def _backfill(self, monitor: Monitor, row: FleetRow) -> None:
        """The charts' hour from query_range, once the first reading made the engines (the
        hour goes before what they hold)."""
        while not monitor.serving_engines():
            await asyncio.sleep(0.2)
        try:
            history = await read_history(
                self.source, row.instance, dialects_named(row.dialect), self.now(), monitor.window_s
            )
        except PrometheusError as exc:
            monitor.event("warn", f"the charts' hour from Prometheus: {exc}")
            return
        if polling.apply_history(monitor, history):
            self.paint(force_charts=True)

    def action_to_fleet(self) -> None:
        if not isinstance(self.screen, Dashboard):
            return
        self.workers.cancel_group(self, "node")
        self.steering.close()
        self.polling, self.node = False, None
        self.monitor = Monitor([])
        self.pop_screen()
        self.paint_fleet()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in self.NODE_ACTIONS and not isinstance(self.screen, Dashboard):
            return False
        return super().check_action(action, parameters)

    def all_bindings(self) -> list[Binding]:
        """The node dashboard's keys (its app's and the screen's) and esc back to the fleet."""
        own = [b for b in GpuwatchApp.BINDINGS if isinstance(b, Binding)]
        return [*own, *super().all_bindings()]

    def action_help(self) -> None:
        if self.node is not None:
            keys, notes = self.all_bindings(), [*self.HELP_NOTES, "", *self.FLEET_NOTES[-1:]]
        else:
            app_keys = [b for b in GpuwatchApp.BINDINGS if isinstance(b, Binding)]
            screen = FleetHistoryScreen if self.cursor is not None else FleetScreen
            keys = [
                *(b for b in screen.BINDINGS if isinstance(b, Binding)),
                *(b for b in app_keys if b.action not in self.NODE_ACTIONS),
            ]
            notes = self.FLEET_NOTES
            if self.cursor is not None:
                notes = [*notes, "", HISTORY_NOTE]
        self.push_screen(HelpScreen(keys, notes))


def run(options: FleetOptions, **kwargs: Any) -> None:
    FleetApp(options).run(**kwargs)
