"""``gpuwatch --prometheus URL``: the fleet through Prometheus, one table, drill-down, and one
change for many gates.

The shell of ``app.py`` with the fleet table as its first screen, over a ``FleetSession``
(``session/fleet.py``): one poll loop reads the whole fleet once per interval (one query per
signal, whatever the number of engines) into its ``FleetState``; the screens only read it.
``enter`` pushes the node ``Dashboard`` for a ``NodeSession`` the fleet session builds for that
row (its pollers are the screen's workers); ``esc`` pops it, which stops them. ``--at TIME``
shows a past instant, read-only, with the replay's cursor keys (``timecursor.py``,
``screens/fleet_history.py``): each move reads the fleet there.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from textual.app import ScreenStackError
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.worker import WorkerCancelled, WorkerError, WorkerFailed

from gpuwatch.monitor.fleet import FleetState
from gpuwatch.monitor.state import EventLevel
from gpuwatch.session.fleet import FleetOptions, FleetSession
from gpuwatch.tui.app import Shell
from gpuwatch.tui.screens.dashboard import Dashboard
from gpuwatch.tui.screens.fleet import FleetScreen
from gpuwatch.tui.screens.fleet_history import FleetHistoryScreen
from gpuwatch.tui.screens.help import HelpScreen
from gpuwatch.tui.timecursor import TimeCursor

HISTORY_NOTE = (
    "[b]the past[/] (--at TIME): the fleet as Prometheus answers at the cursor (REPLAY in the "
    "title), read-only. space plays / pauses at 1x..60x (< >), left / right step one interval, "
    "\\[ ] a minute, : goes to a time (03:12:40 within the last day, 2026-11-30 03:12, or "
    "+90s / -5m from the cursor), { } the previous / next badge change (read 15 s apart, then "
    "to the second; up to half an hour away); each move reads every signal at that instant. "
    "Badges are the SLO rules on that instant's values (no 10 s hold across a move)."
)


class FleetApp(Shell):
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
        super().__init__(options.theme)
        self.fleet = FleetSession(options, state)
        # In the past (--at) a time cursor says where; each move reads the fleet there.
        self.time_cursor = (
            TimeCursor(options.at, options.interval_s) if options.at is not None else None
        )

    def home_screen(self) -> Screen[None]:
        if self.time_cursor is not None:
            return FleetHistoryScreen(self.fleet, self.time_cursor)
        return FleetScreen(self.fleet)

    def record_event(self, level: EventLevel, text: str) -> None:
        self.fleet.state.event(level, text)

    def on_mount(self) -> None:
        # Shell.on_mount runs after this one: themes, then the fleet table.
        if self.fleet.polls:
            self.run_worker(self._poll(), group="fleet", name="prometheus")

    async def on_unmount(self) -> None:
        # A drill-down's pollers and backfill read through the source: stopped and waited for
        # first, so none reads from a closed client.
        for worker in [w for w in self.workers if w.group == "poll"]:
            worker.cancel()
            # cancelled (the usual end here), failed, or never started: all are stopped
            with contextlib.suppress(WorkerCancelled, WorkerFailed, WorkerError):
                await worker.wait()
        await self.fleet.source.close()

    def _at(self) -> float | None:
        return self.time_cursor.at if self.time_cursor is not None else None

    async def _poll(self) -> None:
        """One reading per interval, scheduled when the last ends (never overlapping)."""
        while True:
            started = time.monotonic()
            at = self._at()
            try:
                await self.fleet.read(at)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a bug must not take the screen down: one line
                self.fleet.state.event("bad", f"fleet poll: {type(exc).__name__}: {exc}")
            self.paint_fleet()
            reading = self.fleet.state.reading
            if at is not None and reading and not reading.error:
                return  # a past instant: read once, again when the cursor moves
            interval = self.fleet.options.interval_s
            await asyncio.sleep(max(0.05, interval - (time.monotonic() - started)))

    def on_fleet_screen_moved(self, _message: FleetScreen.Moved) -> None:
        """The time cursor moved: read the fleet there (a reading under way is dropped)."""
        self.paint_fleet()
        if self.fleet.polls:
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

    def on_fleet_screen_drill(self, message: FleetScreen.Drill) -> None:
        self.push_screen(Dashboard(self.fleet.node_session(message.row, self._at())))

    def action_to_fleet(self) -> None:
        # Popping the dashboard closes its session and stops its workers (the node's pollers):
        # those now, not when the screen is taken down after the switch.
        dash = self.screen
        if isinstance(dash, Dashboard):
            self.workers.cancel_node(dash)
            self.pop_screen()
            self.paint_fleet()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in self.NODE_ACTIONS and not isinstance(self.screen, Dashboard):
            return False
        return super().check_action(action, parameters)

    def all_bindings(self) -> list[Binding]:
        """The node dashboard's keys (its app's and the screen's) and esc back to the fleet."""
        own = [b for b in Shell.BINDINGS if isinstance(b, Binding)]
        return [*own, *super().all_bindings()]

    def action_help(self) -> None:
        if self.dashboard() is not None:
            keys, notes = self.all_bindings(), [*self.HELP_NOTES, "", *self.FLEET_NOTES[-1:]]
        else:
            app_keys = [b for b in Shell.BINDINGS if isinstance(b, Binding)]
            screen = FleetHistoryScreen if self.time_cursor is not None else FleetScreen
            keys = [
                *(b for b in screen.BINDINGS if isinstance(b, Binding)),
                *(b for b in app_keys if b.action not in self.NODE_ACTIONS),
            ]
            notes = self.FLEET_NOTES
            if self.time_cursor is not None:
                notes = [*notes, "", HISTORY_NOTE]
        self.push_screen(HelpScreen(keys, notes))


def run(options: FleetOptions, **kwargs: Any) -> None:
    FleetApp(options).run(**kwargs)
