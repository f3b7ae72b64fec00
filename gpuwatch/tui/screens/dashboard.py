"""The node dashboard: one screen that says whether the node is in its boring zone.

It shows one ``NodeSession`` (live, a replay, or a node of the fleet), given to its
constructor: while shown it runs the session's pollers as its workers (stopped when the screen
goes), repaints once a second from the session's monitor, and takes the steering's questions.
Charts rebuild only when their data moved and only while shown.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from typing import Any

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Container, Horizontal
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import Footer
from textual.worker import Worker, WorkerState

from gpuwatch.adminapi import AuditEntry
from gpuwatch.control.gate import GateError
from gpuwatch.control.knobs.steer import Step
from gpuwatch.control.steering import QUEUE_STEP
from gpuwatch.fmt import pct, seconds
from gpuwatch.gate.audit import AuditError
from gpuwatch.monitor.figures import ttft_breakdown, users_now
from gpuwatch.monitor.state import Monitor, short_url
from gpuwatch.series import RECENT_RATE_WINDOW_S, window_label
from gpuwatch.session.knobs import read_audit
from gpuwatch.session.node import NodeSession
from gpuwatch.tui.control import CONTROL_ACTIONS, KNOB_ACTIONS, DashboardControl
from gpuwatch.tui.screens.audit import AuditScreen
from gpuwatch.tui.widgets.adaptive import AdaptivePanel
from gpuwatch.tui.widgets.admission import AdmissionPanel
from gpuwatch.tui.widgets.chart import Chart, Line
from gpuwatch.tui.widgets.column import KeepInView
from gpuwatch.tui.widgets.engines import EnginePanel
from gpuwatch.tui.widgets.events import EventsPanel
from gpuwatch.tui.widgets.gpus import GpuPanel
from gpuwatch.tui.widgets.header import HeaderBar
from gpuwatch.tui.widgets.users import UsersPanel

WINDOWS = ((60, "1m"), (300, "5m"), (900, "15m"), (3600, "1h"))
# Charts move less per second than numbers do: a dot column of a 1-minute chart is about a
# second wide, so redrawing them every third second moves them three columns at a time and
# cuts their cost by two thirds (bench/tui.py: 2.1% of a core at 1 s, 1.8% at 3 s).
CHART_EVERY_S = 3.0
# With --slow-link: a chart's scroll rewrites most of its cells, the bulk of the bytes; the
# panels' numbers, most of which move every second under load, every 2 s (the header's badge
# and clock still every second).
SLOW_LINK_CHART_EVERY_S = 10.0
SLOW_LINK_PANELS_EVERY_S = 2.0


def ttft_lines(m: Monitor, pts: Callable[[str], list[Any]], start: float) -> list[Line]:
    """The TTFT chart's lines. With a gate (the chart titled ``TTFT p99``): what the badge
    judges, the users' exact p99 at the gate (the worst lane, queue wait included), and the
    engine's p99 beside it, so a queue at the gate shows as the gap between the two. Without
    one: the engine's p50 and p99."""
    if m.gate is not None:
        return [
            Line("users", m.gate.ttft_p99.points(since=start), "accent", on_top=True),
            Line("engine", pts("ttft_p99"), "ttft"),
        ]
    return [Line("p50", pts("ttft_p50"), "ttft"), Line("p99", pts("ttft_p99"), "accent")]


class Dashboard(Screen[None]):
    # The controls live on the dashboard (not the app), so a form's inputs keep their keys.
    BINDINGS = [
        Binding("tab", "next_lane", "lane", priority=True),
        # The number keys pick the panel's rows: the gate's lanes first, then the knobs.
        *[Binding(str(i + 1), f"select_lane({i})", f"row {i + 1}", show=False) for i in range(9)],
        Binding("plus", "inflight(1)", "+in-flight", key_display="+"),
        Binding("minus", "inflight(-1)", "-in-flight", key_display="-"),
        Binding("asterisk", "scale_inflight(2.0)", "double in-flight", key_display="*", show=False),
        Binding("slash", "scale_inflight(0.5)", "halve in-flight", key_display="/", show=False),
        Binding(
            "right_square_bracket",
            f"queue({QUEUE_STEP})",
            f"queue +{QUEUE_STEP}",
            key_display="]",
            show=False,
        ),
        Binding(
            "left_square_bracket",
            f"queue(-{QUEUE_STEP})",
            f"queue -{QUEUE_STEP}",
            key_display="[",
            show=False,
        ),
        Binding("o", "output(True)", "lower output cap", show=False),
        Binding("O", "output(False)", "raise output cap", show=False),
        Binding("b", "budget(True)", "lower token budget", show=False),
        Binding("B", "budget(False)", "raise token budget", show=False),
        Binding("p", "pause", "pause"),
        Binding("e", "edit", "edit lane"),
        Binding("u", "undo", "undo"),
        Binding("a", "audit", "audit", show=False),
        Binding("P", "plan", "plan for this gate", show=False),
        Binding("A", "adaptive", "adaptive on/off", show=False),
        Binding("n", "next_tenant", "next tenant", show=False),
        Binding("x", "tenant_pause", "pause/resume tenant", show=False),
        Binding("c", "tenant_cap(True)", "lower tenant cap", show=False),
        Binding("C", "tenant_cap(False)", "raise tenant cap", show=False),
        # The same keys on a knob row (check_action offers each kind on its own rows only):
        # the footer names what they do to the selected knob.
        Binding("tab", "knob_next", "next row", priority=True),
        Binding("plus", "knob_step('up')", "+knob", key_display="+"),
        Binding("minus", "knob_step('down')", "-knob", key_display="-"),
        Binding("asterisk", "knob_step('double')", "double knob", key_display="*", show=False),
        Binding("slash", "knob_step('halve')", "halve knob", key_display="/", show=False),
        Binding("p", "knob_pause", "pause stack"),
        Binding("e", "knob_edit", "edit knob"),
        Binding("u", "knob_undo", "undo knob"),
    ]

    def __init__(self, session: NodeSession) -> None:
        super().__init__()
        self.session = session
        self.frozen = False
        self.window_index = 0
        self.first_frame_at: float | None = None
        self._painted_version = -1
        self._charts_at = self._panels_at = -1e9
        # The row selected when last painted (a lane or a knob): a key that moves it scrolls
        # it into view. The first lane is selected from the start, and moves nothing.
        self._selected: object = session.steering.selected_lane

    def compose(self) -> ComposeResult:
        m = self.session.monitor
        yield HeaderBar(id="header")
        with Horizontal(id="body"):
            with KeepInView(id="left"):
                yield GpuPanel(id="gpus", classes="box")
                yield EnginePanel(id="engines", classes="box")
                yield AdmissionPanel(id="admission", classes="box keep")  # stays in view
                yield AdaptivePanel(id="adaptive", classes="box")
                yield UsersPanel(id="users", classes="box")
            with Container(id="charts"):
                # Titles name the windows the plotted values were computed over.
                window = window_label(m.window_s)
                rates = window_label(RECENT_RATE_WINDOW_S)
                # On a slow link the charts page rather than scroll (see chart.py).
                paged = self.session.options.slow_link
                yield Chart("requests", id="chart-requests", classes="chart", paged=paged)
                # With a gate it draws p99s only (users' and engine's): the title says so.
                ttft = "TTFT p99" if m.gate else "TTFT"
                yield Chart(
                    f"{ttft} {window}", fmt=seconds, id="chart-ttft", classes="chart", paged=paged
                )
                yield Chart(
                    f"KV · goodput {window}", fmt=pct, id="chart-kv", classes="chart", paged=paged
                )
                yield Chart(f"tokens/s {rates}", id="chart-tokens", classes="chart", paged=paged)
        yield EventsPanel(id="events", classes="box")
        yield Footer()

    # -- set-up: the session's loops run as this screen's workers -------------------------

    def on_resize(self, event: events.Resize) -> None:
        # Under 120 columns the footer drops its padding and the palette's ^p (still bound):
        # at 80 the keys up to "? help" fit, where the padded footer cut off undo, quit and help.
        # (A replay has its own bar where the footer was.)
        narrow = event.size.width < 120
        for footer in self.query(Footer):
            footer.compact, footer.show_command_palette = narrow, not narrow

    def on_mount(self) -> None:
        self.session.show_on(DashboardControl(self, self.repaint))
        self.session.bell = self.app.bell
        for poller in self.session.pollers:
            self.run_worker(
                poller.run(), group="poll", name=poller.name, exit_on_error=not poller.quiet
            )
        self.set_interval(1.0, self._tick)
        # After the app's next refresh: by then this screen is laid out at the terminal's
        # size, which the panels' line breaks are chosen for.
        self.app.call_after_refresh(self._first_frame)

    def on_unmount(self) -> None:
        self.session.show_on(None)
        self.session.bell = None
        self.session.close()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        # A loop that ends with points added (the fleet's backfill of the charts' hour) is
        # drawn at once, not at the charts' next turn.
        if event.state == WorkerState.SUCCESS and event.worker.result:
            self.paint(force_charts=True)

    def _first_frame(self) -> None:
        self.first_frame_at = time.monotonic()
        self.paint(force_charts=True)

    # -- painting -------------------------------------------------------------------------

    def _tick(self) -> None:
        if self.session.polls:
            self.session.monitor.check_stale()
            if self.session.alerts is not None:
                self.session.alerts.tick()  # before the badge: the tick's screen shows its budget
            self.session.monitor.evaluate()
        if not self.frozen:
            self.paint()

    @property
    def chart_window(self) -> tuple[int, str]:
        return WINDOWS[self.window_index]

    def paint(self, force_charts: bool = False) -> None:
        try:
            self._paint(force_charts)
        except NoMatches:
            # The panels are still being composed, or already being removed as the app
            # exits: the next tick paints (or nothing needs painting).
            return

    def repaint(self, force_charts: bool = False) -> None:
        """Paint now, even if no source moved (a key changed what is pending or selected)."""
        self._painted_version = -1
        self.refresh_bindings()  # a knob row selected (or gone) changes which keys apply
        self.paint(force_charts)
        s = self.session
        selected = s.on_knob or s.steering.selected_lane
        if selected != self._selected:
            self._selected = selected
            self.call_after_refresh(self._selected_in_view)  # once laid out with its lines

    def _selected_in_view(self) -> None:
        """The row the keys act on stays in view: where it is below the left column's fold (a
        knob row at 80x24) the column scrolls down to it, and all the way back up whenever the
        row selected is in view from the top (a lane again)."""
        try:
            column = self.query_one("#left", KeepInView)
            panel = self.query_one(AdmissionPanel)
        except NoMatches:
            return
        line = panel.selected_line
        if line is None or not panel.display:
            return
        row = panel.virtual_region.y + panel.styles.gutter.top + line  # in the column
        height = column.scrollable_content_region.height
        top = round(column.scroll_y)
        if not height:
            return
        if row < height:
            y = 0  # all the way up: the panels above come back with it
        elif row >= top + height:
            y = row - height + 1  # down to it, no further
        else:
            y = min(top, row)
        if y != top:
            column.scroll_to(y=y, animate=False)

    def _paint(self, force_charts: bool) -> None:
        s = self.session
        m, options = s.monitor, s.options
        at, wall = s.drawn_at()
        narrow = self.has_class("-narrow") or self.size.width < 120
        short = self.size.height < 36
        title = (
            options.title_endpoint or ", ".join(short_url(u) for u in options.urls) or "no endpoint"
        )
        main = m.serving_engines()
        if main:
            title += f"  {main[0].snap.dialect}/{main[0].snap.model or '-'}"
        self.query_one(HeaderBar).render_header(
            options.hostname,
            title,
            m.verdict,
            m.health.pending(at),
            s.read_only,
            self.frozen,
            self.chart_window[1],
            wall,
            options.clock_label,
        )
        if m.version == self._painted_version:
            return
        now = time.monotonic()
        # A key pressed (repaint) or new chart data paints at once; -0.1: a tick's jitter.
        held = now - self._panels_at < SLOW_LINK_PANELS_EVERY_S - 0.1
        if options.slow_link and held and self._painted_version >= 0 and not force_charts:
            return
        self._panels_at = now
        self._painted_version = m.version
        self.query_one(GpuPanel).render_gpus(m.gpus, compact=narrow or short)
        users = users_now(m)
        self.query_one(EnginePanel).render_engines(
            list(m.endpoints.values()), m.health.slo.get("ttft_p99_s"), options.hint, users, at
        )
        steering, knob = s.steering, s.on_knob
        self.query_one(AdmissionPanel).render_gate(
            m.gate,
            steering.selected_lane if knob is None else None,
            steering.pending_lines() + s.knobs.pending_lines(),
            steering.selected_tenant,
            compact=narrow or short,
            knobs=s.knobs.view.sources(),
            selected_knob=knob,
        )
        self.query_one(AdaptivePanel).render_gate(m.gate, steering.selected_lane, wall)
        self.query_one(UsersPanel).render_users(
            ttft_breakdown(m), users, m.health.slo, compact=narrow or short, budget=m.slo_budget
        )
        self.query_one(EventsPanel).render_events(m.events)
        every = SLOW_LINK_CHART_EVERY_S if options.slow_link else CHART_EVERY_S
        if now - self._charts_at >= every or force_charts:
            self._charts_at = now
            self._paint_charts()

    def _paint_charts(self) -> None:
        m = self.session.monitor
        engines = m.serving_engines()
        now = self.session.drawn_at()[0]
        span, _ = self.chart_window
        start = now - span
        series = engines[0].history.series if engines else {}

        def pts(name: str) -> list[Any]:
            ring = series.get(name)
            return ring.points(since=start) if ring is not None else []

        charts: Iterable[tuple[str, list[Line], float | None, float]] = (
            (
                "#chart-requests",
                [Line("running", pts("running"), "ok"), Line("waiting", pts("waiting"), "queue")]
                + (
                    [Line("gate queue", m.gate.queued.points(since=start), "secondary")]
                    if m.gate
                    else []
                ),
                None,
                1.0,
            ),
            ("#chart-ttft", ttft_lines(m, pts, start), m.health.slo.get("ttft_p99_s"), 0.0),
            (
                "#chart-kv",
                [Line("KV", pts("kv_cache_usage"), "kv")]
                + ([Line("goodput", m.gate.goodput.points(since=start), "ok")] if m.gate else []),
                None,
                1.0,
            ),
            (
                "#chart-tokens",
                [Line("gen", pts("gen_tps"), "ok"), Line("prompt", pts("prompt_tps"), "ttft")],
                None,
                1.0,
            ),
        )
        for selector, lines, threshold, floor in charts:
            chart = self.query_one(selector, Chart)
            if chart.display and chart.region.area:  # hidden charts are not rebuilt
                chart.set_data(lines, start, now, threshold, floor)

    # -- the view keys (bound on the app: w, space) ---------------------------------------

    def cycle_window(self) -> None:
        self.window_index = (self.window_index + 1) % len(WINDOWS)
        self.repaint(force_charts=True)
        self.notify(f"chart window {self.chart_window[1]}", timeout=2)

    def freeze(self) -> None:
        self.frozen = not self.frozen
        self.repaint(force_charts=True)

    # -- the control keys: what they do is decided in ``Steering`` ------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        s = self.session
        if action in KNOB_ACTIONS:
            # A knob row's keys, offered there alone; they always run there, so that read-only
            # is refused by the guard, which says why. `p` only where the stack can pause.
            if s.on_knob is None:
                return False
            return action != "knob_pause" or s.knobs.pause_knob() is not None
        if action in CONTROL_ACTIONS:
            if s.on_knob is not None:
                # The gate's meanings of the keys: none on a knob row (the number keys still
                # pick a row).
                return action == "select_lane"
            if not s.options.admin_url:
                # No gate: only the moves into the knob rows, if any (else nothing offered).
                return action in ("select_lane", "next_lane") and bool(s.knobs.rows())
            if not s.steering.can_steer:
                if action in ("select_lane", "next_lane") and s.knobs.rows():
                    return True  # the knob rows can still be reached
                return None  # read-only, or the gate not answering: shown greyed
        return True

    def action_select_lane(self, index: int) -> None:
        self.session.select_row(index)

    def action_next_lane(self) -> None:
        self.session.next_row()

    def action_next_tenant(self) -> None:
        self.session.steering.next_tenant()

    def action_tenant_pause(self) -> None:
        self.session.steering.tenant_pause()

    def action_tenant_cap(self, down: bool) -> None:
        self.session.steering.tenant_cap(down)

    def action_inflight(self, delta: int) -> None:
        self.session.steering.inflight(delta)

    def action_scale_inflight(self, factor: float) -> None:
        self.session.steering.scale_inflight(factor)

    def action_queue(self, delta: int) -> None:
        self.session.steering.queue(delta)

    def action_output(self, down: bool) -> None:
        self.session.steering.output(down)

    def action_budget(self, down: bool) -> None:
        self.session.steering.budget(down)

    def action_pause(self) -> None:
        self.session.steering.pause()

    def action_adaptive(self) -> None:
        # A lane switched on without a target of its own gets the dashboard's TTFT SLO.
        slo = self.session.monitor.health.slo.get("ttft_p99_s")
        self.session.steering.toggle_adaptive(slo or 2.0)

    def action_undo(self) -> None:
        self.session.steering.undo()

    def action_edit(self) -> None:
        self.session.steering.edit()

    # -- the keys on a knob row: ``KnobSteering`` ------------------------------------------

    def action_knob_next(self) -> None:
        self.session.next_row()

    def action_knob_step(self, step: Step) -> None:
        self.session.knobs.step(step)

    def action_knob_pause(self) -> None:
        self.session.knobs.pause()

    def action_knob_undo(self) -> None:
        # This operator's last knob change (on a lane row, `u` undoes the gate's).
        self.session.knobs.undo()

    def action_knob_edit(self) -> None:
        self.session.knobs.edit()

    def action_audit(self) -> None:
        """The gate's audit trail and, where this node steers a stack's own knobs, the local
        knob audit beside it (read again: ``gpuwatch limits set`` appends to it too)."""
        s = self.session
        client = s.steering.client
        knob_audit = s.knobs.audit.path if s.options.knobs or s.knobs.rows() else None
        if client is None and knob_audit is None:
            self.notify("no gate: start gpuwatch with --admin URL", severity="warning")
            return

        async def show() -> None:
            entries: list[AuditEntry] | None = None
            errors: list[str] = []
            if client is not None:
                try:
                    entries = await client.audit(50)
                except GateError as exc:
                    errors.append(str(exc))
            knobs: list[AuditEntry] | None = None
            if knob_audit is not None:
                try:
                    knobs = await asyncio.to_thread(read_audit, knob_audit)
                except AuditError as exc:
                    errors.append(str(exc))
            await self.app.push_screen(AuditScreen(entries, "; ".join(errors) or None, knobs))

        self.run_worker(show(), group="control")

    def action_plan(self) -> None:
        """The last plan saved for this gate (``gpuwatch plan sweep --gate URL``)."""
        from gpuwatch.plan.planner import load_for, plan_key, plans_dir
        from gpuwatch.tui.screens.plan import PlanScreen

        url = self.session.options.admin_url
        if not url:
            self.notify("no gate: start gpuwatch with --admin URL", severity="warning")
            return
        plan = load_for(url)
        hint = None
        if plan is None:
            path = plans_dir() / f"{plan_key(url, '')}.json"
            hint = (
                f"no plan saved for this gate ({path}): run gpuwatch plan sweep --gate {url} "
                "(or --apply)"
            )
        steering = self.session.steering

        def chosen(apply: bool | None) -> None:
            if apply and plan is not None and plan.recommended is not None:
                rec = plan.recommended
                steering.apply_lane(rec.lane, rec.limits(), f"the plan of {plan.created}")

        self.app.push_screen(PlanScreen(plan, steering.view.limits(), url, hint), chosen)
