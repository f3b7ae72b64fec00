"""The dashboard on a recording: the same screen for a session built by
``session.node.replay_session``, fed by its ``Player`` instead of pollers.

Read-only through the session's one guard (the control keys ask it and are refused, with its
reason). The cursor keys take over ``space`` and ``[`` / ``]``: play / pause, step, a minute
back or on, the previous / next event, a time to go to, the speed.
"""

from __future__ import annotations

import time
from typing import cast

from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Footer

from gpuwatch.record.player import Player, parse_when
from gpuwatch.session.node import NodeSession
from gpuwatch.tui.app import GpuwatchApp
from gpuwatch.tui.control import CONTROL_ACTIONS
from gpuwatch.tui.screens.dashboard import Dashboard
from gpuwatch.tui.screens.goto import GoToTime
from gpuwatch.tui.timecursor import next_speed
from gpuwatch.tui.widgets.replaybar import ReplayBar

PLAY_TICK_S = 0.25
# The live keys a replay takes over: its own cursor keys use them.
_TAKEN = ("left_square_bracket", "right_square_bracket")


class ReplayDashboard(Dashboard):
    """The dashboard with the cursor keys, for a session with a replay."""

    inherit_bindings = False
    BINDINGS = [
        *[b for b in Dashboard.BINDINGS if isinstance(b, Binding) and b.key not in _TAKEN],
        Binding("space", "play", "play/pause", priority=True),
        Binding("left", "step(-1)", "step back", key_display="<-"),
        Binding("right", "step(1)", "step", key_display="->"),
        Binding("left_square_bracket", "jump(-60)", "-1 min", key_display="["),
        Binding("right_square_bracket", "jump(60)", "+1 min", key_display="]"),
        Binding("left_curly_bracket", "mark(-1)", "previous event", key_display="{"),
        Binding("right_curly_bracket", "mark(1)", "next event", key_display="}"),
        Binding("colon", "goto", "go to time", key_display=":"),
        Binding("less_than_sign", "speed(-1)", "slower", key_display="<"),
        Binding("greater_than_sign", "speed(1)", "faster", key_display=">"),
    ]

    def __init__(self, session: NodeSession) -> None:
        super().__init__(session)
        assert session.replay is not None, "a replay's dashboard needs a session with a replay"
        self.player: Player = session.replay
        self.playing = False
        self.speed = 10
        self._played_at = time.monotonic()

    def compose(self) -> ComposeResult:
        # The bar takes the footer's line (the keys are on the bar's end and under ?), so the
        # panels keep the live layout, row for row: a replayed screen is the live one.
        for widget in super().compose():
            yield ReplayBar(id="replaybar") if isinstance(widget, Footer) else widget

    def on_mount(self) -> None:
        # Textual calls Dashboard.on_mount too (handlers run down the class hierarchy).
        self.set_interval(PLAY_TICK_S, self._advance)
        self.app.call_after_refresh(self._moved)  # laid out by then (see Dashboard)

    # -- the cursor -----------------------------------------------------------------------

    def _advance(self) -> None:
        now = time.monotonic()
        elapsed, self._played_at = now - self._played_at, now
        if not self.playing:
            return
        if self.player.now >= self.player.end:
            self.playing = False
            self._moved()
            return
        self.go(self.player.now + elapsed * self.speed)

    def go(self, wall: float) -> None:
        self.player.seek(wall)
        self._moved()

    def _moved(self) -> None:
        # A step back rebuilds the monitor from a checkpoint: the session reads the new one.
        self.repaint(force_charts=True)
        self._paint_bar()

    def _paint_bar(self) -> None:
        p = self.player
        upcoming = p.next_mark(p.now)
        label = None
        if upcoming is not None:
            label = f"{time.strftime('%H:%M:%S', time.localtime(upcoming.wall))} {upcoming.text}"
        for bar in self.query(ReplayBar):
            bar.render_bar(p.now, p.start, p.end, self.playing, self.speed, label, self.size.width)

    # -- keys -----------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in CONTROL_ACTIONS and self.session.options.admin_url:
            return True  # offered, so that the guard can say why it refuses
        return super().check_action(action, parameters)

    def action_play(self) -> None:
        self.playing = not self.playing
        self._played_at = time.monotonic()
        if self.playing and self.player.now >= self.player.end:
            self.player.seek(self.player.start)
        self._moved()

    def action_step(self, direction: int) -> None:
        self.playing = False
        self.go(self.player.now + direction * self.session.options.interval_s)

    def action_jump(self, seconds: float) -> None:
        self.go(self.player.now + seconds)

    def action_mark(self, direction: int) -> None:
        p = self.player
        mark = p.next_mark(p.now) if direction > 0 else p.previous_mark(p.now)
        if mark is None:
            self.notify("no event that way", timeout=2)
            return
        self.playing = False
        self.go(mark.wall)
        self.notify(mark.text, timeout=3)

    def action_speed(self, direction: int) -> None:
        self.speed = next_speed(self.speed, direction)
        self._paint_bar()

    def action_audit(self) -> None:
        """The gate's audit trail as it was recorded, up to the cursor."""
        from gpuwatch.record.store import audit_entries
        from gpuwatch.tui.screens.audit import AuditScreen

        entries = audit_entries(self.player.db, end=self.player.now)
        self.app.push_screen(AuditScreen(entries[::-1][:50]))

    def action_goto(self) -> None:
        def chosen(text: str | None) -> None:
            if not text:
                return
            try:
                when = parse_when(text, self.player.start, self.player.end)
            except ValueError as exc:
                self.notify(str(exc), severity="warning")
                return
            self.playing = False
            # Moved once the dialog is gone: panels updated under a modal screen keep the
            # heights they had (the dashboard is laid out again only when it is on top).
            self.call_after_refresh(self._go_to_tick, when)

        self.app.push_screen(GoToTime(), chosen)

    def _go_to_tick(self, when: float) -> None:
        # The screen the live dashboard drew with that clock: its tick in that second.
        tick = self.player.tick_in(when)
        if tick is None:
            self.go(when)
        else:
            self.player.seek_mono(tick)
            self._moved()


class ReplayApp(GpuwatchApp):
    """The shell for a session built by ``replay_session``: its dashboard has the cursor."""

    HELP_NOTES = [
        *GpuwatchApp.HELP_NOTES,
        "",
        "[b]replay[/]: the dashboard fed from a recording by the same code, read-only. space "
        "plays / pauses at 1x..60x (< >), left / right step one poll interval, \\[ ] a minute, "
        "{ } jump to the previous / next event (badge changes are events), : goes to a time "
        "(03:12:40, 2026-11-30 03:12, +5m from the start; a time to the second lands on the "
        "tick the live screen was drawn at, its header showing that clock). The header's "
        "clock is the recording's (REPLAY), the bar under the events says where in it you are.",
    ]

    def home_screen(self) -> ReplayDashboard:
        return ReplayDashboard(self.session)

    def all_bindings(self) -> list[Binding]:
        # space plays and pauses here: the live freeze is not offered.
        live = [b for b in self.BINDINGS if isinstance(b, Binding) and b.key != "space"]
        return [*live, *cast(list[Binding], ReplayDashboard.BINDINGS)]
