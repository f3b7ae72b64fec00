"""The fleet screen at a past instant (``gpuwatch --prometheus URL --at TIME``), with the
replay's cursor keys: each move reads the whole fleet from Prometheus at the cursor (instant
queries, ``time=`` the cursor), read-only through the one guard.

The keys a replay takes over here: ``space`` plays / pauses (no marking: nothing can be
changed), ``[`` / ``]`` move a minute (not the queue); the limit keys stay bound and are
refused by the guard, with its reason. The replay bar takes the footer's line.
"""

from __future__ import annotations

import time

from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Footer

from gpuwatch.monitor.badgechanges import MAX_STEPS, STEP_S, Badges, badges_of, find_change
from gpuwatch.session.fleet import FleetSession
from gpuwatch.tui.screens.fleet import FleetScreen
from gpuwatch.tui.screens.goto import GoToTime
from gpuwatch.tui.timecursor import GOTO_HINT, TimeCursor
from gpuwatch.tui.widgets.replaybar import ReplayBar

PLAY_TICK_S = 0.25
_TAKEN = ("space", "left_square_bracket", "right_square_bracket")


class FleetHistoryScreen(FleetScreen):
    inherit_bindings = False
    BINDINGS = [
        *[b for b in FleetScreen.BINDINGS if isinstance(b, Binding) and b.key not in _TAKEN],
        # Priority: the table has the focus and would scroll with left / right.
        Binding("space", "play", "play/pause", priority=True),
        Binding("left", "step(-1)", "step back", key_display="<-", priority=True),
        Binding("right", "step(1)", "step", key_display="->", priority=True),
        Binding("left_square_bracket", "jump(-60)", "-1 min", key_display="[", priority=True),
        Binding("right_square_bracket", "jump(60)", "+1 min", key_display="]", priority=True),
        Binding("left_curly_bracket", "change(-1)", "previous badge change", key_display="{"),
        Binding("right_curly_bracket", "change(1)", "next badge change", key_display="}"),
        Binding("colon", "goto", "go to time", key_display=":"),
        Binding("less_than_sign", "speed(-1)", "slower", key_display="<"),
        Binding("greater_than_sign", "speed(1)", "faster", key_display=">"),
    ]

    def __init__(self, fleet: FleetSession, time_cursor: TimeCursor) -> None:
        super().__init__(fleet, time_cursor)
        self._played_at = time.monotonic()

    def compose(self) -> ComposeResult:
        for widget in super().compose():
            yield ReplayBar(id="replaybar") if isinstance(widget, Footer) else widget

    def on_mount(self) -> None:
        self.set_interval(PLAY_TICK_S, self._advance)

    def paint(self) -> None:
        super().paint()
        cursor = self.time_cursor
        if cursor is None:
            return
        for bar in self.query(ReplayBar):
            bar.render_bar(
                cursor.at,
                cursor.earliest,
                cursor.now(),
                cursor.playing,
                cursor.speed,
                None,
                self.size.width,
            )

    # -- the cursor -----------------------------------------------------------------------

    def _advance(self) -> None:
        now = time.monotonic()
        elapsed, self._played_at = now - self._played_at, now
        cursor = self.time_cursor
        if cursor is not None and cursor.advance(elapsed):
            self.post_message(self.Moved())

    def action_play(self) -> None:
        if self.time_cursor is not None:
            self.time_cursor.toggle()
            self._played_at = time.monotonic()
            self.paint()

    def action_step(self, direction: int) -> None:
        if self.time_cursor is not None:
            self.time_cursor.step(direction)
            self.post_message(self.Moved())

    def action_jump(self, seconds: float) -> None:
        if self.time_cursor is not None:
            self.time_cursor.jump(seconds)
            self.post_message(self.Moved())

    def action_change(self, direction: int) -> None:
        if self.time_cursor is not None:
            self.notify("looking for a badge change (15 s steps, then to the second)", timeout=2)
            self.run_worker(self._seek_change(direction), group="seek", exclusive=True)

    async def _seek_change(self, direction: int) -> None:
        fleet, cursor = self.fleet, self.time_cursor
        assert cursor is not None

        async def read(at: float) -> Badges:
            reading = await fleet.source.read_fleet(at)
            if reading.error:
                raise LookupError(reading.error)
            return badges_of(reading, fleet.state.slo)

        try:
            # Back as far as the steps go (Prometheus' retention answers); forward up to now.
            found = await find_change(read, cursor.at, direction, 0.0, cursor.now())
        except LookupError as exc:
            self.notify(f"cannot look for a badge change: {exc}", severity="warning")
            return
        if found is None:
            where = "after" if direction > 0 else "before"
            span = f"{MAX_STEPS * STEP_S / 60:g} min"
            self.notify(f"no badge change within {span} {where} the cursor")
            return
        cursor.move(found)
        self.post_message(self.Moved())

    def action_speed(self, direction: int) -> None:
        if self.time_cursor is not None:
            self.time_cursor.faster(direction)
            self.paint()

    def action_goto(self) -> None:
        def chosen(text: str | None) -> None:
            cursor = self.time_cursor
            if not text or cursor is None:
                return
            try:
                cursor.goto(text)
            except ValueError as exc:
                self.notify(str(exc), severity="warning")
                return
            self.post_message(self.Moved())

        self.app.push_screen(GoToTime(GOTO_HINT), chosen)
