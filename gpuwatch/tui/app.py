"""The apps: thin shells around one screen. ``GpuwatchApp`` shows one node's ``Dashboard``
for a ``NodeSession`` it is given (``session.node.live_session``); the replay
(``replay.py``) and the fleet (``fleet_app.py``) are the same shell with another first screen.

Every source polls in its own worker (HTTP in async workers, NVML in a thread), scheduling its
next poll when the last one ends; a slow or dead source never delays another or the UI. What
the shell holds: the themes, the keys that work on every screen (quit, help, GPUs, the charts'
window, freeze, theme), and the background jobs it was given (a demo's load, a recorder).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterable
from typing import Any

from textual import events
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.driver import Driver
from textual.screen import Screen
from textual.widgets import Input

from gpuwatch.config import DEFAULT_THEME
from gpuwatch.monitor.state import EventLevel
from gpuwatch.session.node import NodeSession
from gpuwatch.tui.screens.dashboard import Dashboard
from gpuwatch.tui.screens.gpu_detail import GpuScreen
from gpuwatch.tui.screens.help import HelpScreen
from gpuwatch.tui.termdiff import diff_driver
from gpuwatch.tui.themes import SEMANTIC_DEFAULTS, load_themes


class Shell(App[None]):
    """What every gpuwatch app has; its first screen is ``home_screen``'s."""

    CSS_PATH = "styles/app.tcss"
    TITLE = "gpuwatch"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (36, "-tall")]
    BINDINGS = [
        Binding("q", "quit", "quit"),
        Binding("question_mark", "help", "help", key_display="?"),
        Binding("g", "gpus", "GPUs"),
        Binding("w", "cycle_window", "window"),
        Binding("space", "freeze", "freeze"),
        Binding("t", "next_theme", "theme"),
        Binding("ctrl+p", "command_palette", "commands", show=False),
    ]
    # One string a paragraph: the help screen wraps them to its width.
    HELP_NOTES = [
        "[b]health[/]: OK under 80% of every SLO, TIGHT above 80%, OVERLOADED over, NO DATA "
        "when nothing can be judged; a new level shows after it held for 10 s. With a gate it "
        "judges what users get: goodput (served in time / arrived) and their p99 TTFT, exact "
        "(within ±0.5% where a lane runs past 256 requests a second, as it then says). "
        "Engine percentiles come from histogram buckets as PromQL's "
        "histogram_quantile(rate(...[1m])); each number says its window. STALE: no good answer "
        "for 3 intervals.",
        "",
        "[b]control[/] (with --admin): keys pressed together become one change; pausing or "
        "cutting a lane by more than half asks first; o / O step the output cap to the next of "
        "128 256 512 1024 2048 4096 and none. P: the last plan. --read-only refuses all.",
        "",
        "[b]adaptive[/]: A switches the selected lane to adaptive admission and back (asks "
        "first): the gate moves its in-flight limit between min_inflight and max_inflight to "
        "hold a p99 TTFT target (the lane's, else the dashboard's SLO). On an adaptive lane "
        "+ / - move the upper bound, e sets both bounds and the target, u undoes; a pause "
        "always wins over the controller.",
        "",
        "[b]tenants[/]: n selects the next of the lane's busiest tenants (shown as "
        "in-flight·queued); x pauses or resumes it, c / C step its in-flight cap over 32 16 8 4 "
        "2 1 0 and none. Each is one change to the gate's limits (If-Match, audited, undo).",
        "",
        "[b]knobs[/]: a stack's own admission knobs (Ray Serve, Dynamo, LiteLLM, SGLang, vLLM) "
        "are rows below the lanes; tab or the number keys move onto them. There + / - step the "
        "knob (a fraction by 0.05, a switch on / off), * / / double / halve it, e edits its "
        "target's knobs, p pauses its stack (vLLM), u undoes the last knob change. Same guard, "
        "same confirmation; a knob moved elsewhere since it was shown is refused; every change "
        "is in the local knob audit, shown by a.",
    ]

    def __init__(
        self, theme: str = DEFAULT_THEME, background: list[Callable[[], Any]] | None = None
    ) -> None:
        super().__init__()
        self._wanted_theme = theme
        self._background = background or []
        self._themes: list[str] = []

    def home_screen(self) -> Screen[None]:
        raise NotImplementedError

    def get_driver_class(self) -> type[Driver]:
        """A terminal's driver writes only the cells that changed (termdiff.py): a slow SSH
        link carries a fraction of what Textual repaints. ``GPUWATCH_TERM_DIFF=0`` turns it
        off (to tell a drawing fault of the diff from one of the app)."""
        base = super().get_driver_class()
        try:
            from textual.drivers.linux_driver import LinuxDriver
        except ImportError:  # no termios (Windows): Textual's own driver
            return base
        if os.environ.get("GPUWATCH_TERM_DIFF", "1") == "0" or not issubclass(base, LinuxDriver):
            return base
        return diff_driver(base)

    def record_event(self, level: EventLevel, text: str) -> None:
        """A line for the events panel of what this app shows."""
        raise NotImplementedError

    # -- set-up ---------------------------------------------------------------------------

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(SEMANTIC_DEFAULTS)

    def on_mount(self) -> None:
        themes, warnings = load_themes()
        for theme in themes:
            self.register_theme(theme)
        self._themes = [t.name for t in themes]
        for warning in warnings:
            self.record_event("warn", warning)
        wanted = self._wanted_theme
        if wanted not in self._themes:
            self.record_event("warn", f"theme {wanted!r} not found; using {DEFAULT_THEME}")
            wanted = DEFAULT_THEME
        self.theme = wanted
        self.push_screen(self.home_screen())
        for job in self._background:
            self.run_worker(self._contained(job), group="background", name="background")

    async def _contained(self, job: Callable[[], Any]) -> None:
        try:
            await job()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.record_event("bad", f"background job stopped: {type(exc).__name__}: {exc}")

    def dashboard(self) -> Dashboard | None:
        """The node dashboard on the screen stack, if one is."""
        for screen in reversed(self.screen_stack):
            if isinstance(screen, Dashboard):
                return screen
        return None

    # -- keys -----------------------------------------------------------------------------

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.all_bindings(), self.HELP_NOTES))

    def all_bindings(self) -> list[Binding]:
        return [b for b in [*self.BINDINGS, *Dashboard.BINDINGS] if isinstance(b, Binding)]

    def action_gpus(self) -> None:
        dash = self.dashboard()
        if dash is not None and not isinstance(self.screen, GpuScreen):
            self.push_screen(GpuScreen(dash.session.monitor.gpus))

    def action_cycle_window(self) -> None:
        dash = self.dashboard()
        if dash is not None:
            dash.cycle_window()

    def action_freeze(self) -> None:
        dash = self.dashboard()
        if dash is not None:
            dash.freeze()

    def action_next_theme(self) -> None:
        if not self._themes:
            return
        i = self._themes.index(self.theme) if self.theme in self._themes else -1
        self.theme = self._themes[(i + 1) % len(self._themes)]
        dash = self.dashboard()
        if dash is not None:
            dash.repaint()
        self.notify(f"theme {self.theme}", timeout=2)

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for b in self.all_bindings():
            if b.action in ("command_palette",):
                continue
            yield SystemCommand(
                b.description.capitalize(),
                f"{b.description} ({b.key_display or b.key})",
                lambda a=b.action: self.run_action(a, self._namespace_of(a)),
            )

    def _namespace_of(self, action: str) -> Any:
        """Where a key's action runs: the dashboard's own (the control keys), else here."""
        dash = self.dashboard()
        name = action.split("(", 1)[0]
        return dash if dash is not None and hasattr(dash, f"action_{name}") else self

    async def action_quit(self) -> None:
        self.exit()


class GpuwatchApp(Shell):
    """One node's dashboard for ``session`` (built by ``session.node.live_session``)."""

    def __init__(
        self, session: NodeSession, background: list[Callable[[], Any]] | None = None
    ) -> None:
        super().__init__(session.options.theme, background)
        self.session = session
        if session.options.slow_link:
            # Nothing moves on its own: every frame of an animation or a blink is bytes.
            self.animation_level = "none"

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        if self.session.options.slow_link and isinstance(event.widget, Input):
            event.widget.cursor_blink = False  # a steady cursor: no frame twice a second

    def home_screen(self) -> Screen[None]:
        return Dashboard(self.session)

    def record_event(self, level: EventLevel, text: str) -> None:
        self.session.monitor.event(level, text)
