"""The live dashboard: one screen that says whether the node is in its boring zone.

Every source polls in its own worker (HTTP in async workers, NVML in a thread), scheduling its
next poll when the last one ends; a slow or dead source never delays another or the UI. The
screen repaints once a second from ``Monitor``; charts rebuild only when their data moved and
only while shown. ``space`` freezes the display while the sources keep polling.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Container, Horizontal, Vertical
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import Footer

from gpuwatch import polling
from gpuwatch.alerts.node import node_alerts
from gpuwatch.config import DEFAULT_THEME, AlertSettings, ScrapeSettings
from gpuwatch.control.gate import GateClient, GateError
from gpuwatch.control.guard import Guard
from gpuwatch.control.steering import QUEUE_STEP, Steering
from gpuwatch.fmt import pct, seconds
from gpuwatch.monitor.figures import ttft_breakdown, users_now
from gpuwatch.monitor.state import Monitor, short_url
from gpuwatch.series import RECENT_RATE_WINDOW_S, window_label
from gpuwatch.sources.nvml import NvmlReader
from gpuwatch.tui.control import CONTROL_ACTIONS, DashboardControl
from gpuwatch.tui.screens.audit import AuditScreen
from gpuwatch.tui.screens.gpu_detail import GpuScreen
from gpuwatch.tui.screens.help import HelpScreen
from gpuwatch.tui.themes import SEMANTIC_DEFAULTS, load_themes
from gpuwatch.tui.widgets.adaptive import AdaptivePanel
from gpuwatch.tui.widgets.admission import AdmissionPanel
from gpuwatch.tui.widgets.chart import Chart, Line
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

# How one of ``urls`` is polled into the monitor: ``(monitor, url) -> a poll loop``.
EnginePoll = Callable[[Monitor, str], Coroutine[Any, Any, None]]


@dataclass
class DashboardOptions:
    urls: list[str]
    interval_s: float = 1.0
    admin_url: str | None = None
    admin_token: str | None = None
    theme: str = DEFAULT_THEME
    slo: dict[str, float | None] = field(default_factory=dict)
    nvml: NvmlReader | None = None
    hint: str | None = None
    read_only: bool = False
    title_endpoint: str | None = None
    hostname: str = field(default_factory=socket.gethostname)
    scrape: ScrapeSettings = field(default_factory=ScrapeSettings)
    alerts: AlertSettings = field(default_factory=AlertSettings)
    # A node seen from elsewhere (the fleet's drill-down) brings its own engine source (None:
    # each URL's /metrics is scraped) and is not this machine (no host figures read here).
    engine_poll: EnginePoll | None = None
    local: bool = True
    clock_label: str = ""  # the header's clock is not now: REPLAY


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
        Binding("tab", "app.next_lane", "lane", priority=True),
        *[
            Binding(str(i + 1), f"app.select_lane({i})", f"lane {i + 1}", show=False)
            for i in range(4)
        ],
        Binding("plus", "app.inflight(1)", "+in-flight", key_display="+"),
        Binding("minus", "app.inflight(-1)", "-in-flight", key_display="-"),
        Binding(
            "asterisk", "app.scale_inflight(2.0)", "double in-flight", key_display="*", show=False
        ),
        Binding("slash", "app.scale_inflight(0.5)", "halve in-flight", key_display="/", show=False),
        Binding(
            "right_square_bracket",
            f"app.queue({QUEUE_STEP})",
            f"queue +{QUEUE_STEP}",
            key_display="]",
            show=False,
        ),
        Binding(
            "left_square_bracket",
            f"app.queue(-{QUEUE_STEP})",
            f"queue -{QUEUE_STEP}",
            key_display="[",
            show=False,
        ),
        Binding("o", "app.output(True)", "lower output cap", show=False),
        Binding("O", "app.output(False)", "raise output cap", show=False),
        Binding("b", "app.budget(True)", "lower token budget", show=False),
        Binding("B", "app.budget(False)", "raise token budget", show=False),
        Binding("p", "app.pause", "pause/resume"),
        Binding("e", "app.edit", "edit lane"),
        Binding("u", "app.undo", "undo"),
        Binding("a", "app.audit", "audit", show=False),
        Binding("P", "app.plan", "plan for this gate", show=False),
        Binding("A", "app.adaptive", "adaptive on/off", show=False),
        Binding("n", "app.next_tenant", "next tenant", show=False),
        Binding("x", "app.tenant_pause", "pause/resume tenant", show=False),
        Binding("c", "app.tenant_cap(True)", "lower tenant cap", show=False),
        Binding("C", "app.tenant_cap(False)", "raise tenant cap", show=False),
    ]

    def compose(self) -> ComposeResult:
        yield HeaderBar(id="header")
        with Horizontal(id="body"):
            with Vertical(id="left"):
                yield GpuPanel(id="gpus", classes="box")
                yield EnginePanel(id="engines", classes="box")
                yield AdmissionPanel(id="admission", classes="box")
                yield AdaptivePanel(id="adaptive", classes="box")
                yield UsersPanel(id="users", classes="box")
            with Container(id="charts"):
                # Titles name the windows the plotted values were computed over.
                window = window_label(cast("GpuwatchApp", self.app).monitor.window_s)
                rates = window_label(RECENT_RATE_WINDOW_S)
                yield Chart("requests", id="chart-requests", classes="chart")
                # With a gate it draws p99s only (users' and engine's): the title says so.
                ttft = "TTFT p99" if cast("GpuwatchApp", self.app).monitor.gate else "TTFT"
                yield Chart(f"{ttft} {window}", fmt=seconds, id="chart-ttft", classes="chart")
                yield Chart(f"KV · goodput {window}", fmt=pct, id="chart-kv", classes="chart")
                yield Chart(f"tokens/s {rates}", id="chart-tokens", classes="chart")
        yield EventsPanel(id="events", classes="box")
        yield Footer()


class GpuwatchApp(App[None]):
    DASHBOARD: type[Dashboard] = Dashboard  # a replay brings its own, with the cursor keys
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
        "judges what users get: goodput (served in time / arrived) and their exact p99 TTFT. "
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
    ]

    def __init__(
        self,
        options: DashboardOptions,
        background: list[Callable[[], Any]] | None = None,
        monitor: Monitor | None = None,
    ) -> None:
        super().__init__()
        self._background = background or []
        self.options = options
        # A prebuilt monitor (recorded or simulated data) is shown as it is: nothing polls.
        self.polling = monitor is None
        self.monitor = monitor or Monitor(
            options.urls, options.interval_s, options.slo, options.admin_url
        )
        self.frozen = False
        self.window_index = 0
        self._painted_version = -1
        self._charts_at = -1e9
        self._themes: list[str] = []
        # The one guard: the keys, the steering and the gate client all ask this one.
        self.guard = Guard(read_only=options.read_only)
        self.steering = Steering(self.guard, DashboardControl(self), options.admin_url or "")
        self.first_frame_at: float | None = None
        # The SLO's burn rates on what is polled (a recording shows its recorded events).
        self.alerts = None
        if self.polling:
            self.alerts = node_alerts(self.monitor, options.alerts, bell=self.bell)

    # -- set-up ---------------------------------------------------------------------------

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(SEMANTIC_DEFAULTS)

    def on_mount(self) -> None:
        themes, warnings = load_themes()
        for theme in themes:
            self.register_theme(theme)
        self._themes = [t.name for t in themes]
        for warning in warnings:
            self.monitor.event("warn", warning)
        wanted = self.options.theme
        if wanted not in self._themes:
            self.monitor.event("warn", f"theme {wanted!r} not found; using {DEFAULT_THEME}")
            wanted = DEFAULT_THEME
        self.theme = wanted
        self.push_screen(self.home_screen())
        if self.polling:
            self.poll_sources()
        for job in self._background:
            self.run_worker(self._contained(job), group="background", name="background")
        if self.alerts is not None:
            self.run_worker(self.alerts.run(), group="background", name="alerts")
        self.set_interval(1.0, self._tick)
        self.call_after_refresh(self._first_frame)

    def home_screen(self) -> Screen[None]:
        """The first screen: the dashboard (the fleet app starts on its table instead)."""
        return self.DASHBOARD()

    def poll_sources(self, group: str = "poll") -> None:
        """A worker per source of ``options`` into ``monitor``, all in ``group``."""
        m, interval, options = self.monitor, self.options.interval_s, self.options
        for url in options.urls:
            loop = (
                options.engine_poll(m, url)
                if options.engine_poll is not None
                else polling.poll_endpoint(m, url, interval, options.scrape)
            )
            self.run_worker(loop, group=group, name=f"engine {url}")
        if options.nvml is not None:
            self.run_worker(polling.poll_gpus(m, options.nvml, interval), group=group, name="nvml")
        if options.local:
            self.run_worker(polling.poll_host(m), group=group, name="host")
        if options.admin_url:
            self.run_worker(self._poll_gate(), group=group, name="gate")

    def _first_frame(self) -> None:
        self.first_frame_at = time.monotonic()
        self.paint(force_charts=True)

    async def on_unmount(self) -> None:
        self.steering.close()
        if self.options.nvml is not None:
            self.options.nvml.close()

    # -- polling (no overlap: the next poll is scheduled when the last ends) --------------

    async def _contained(self, job: Callable[[], Any]) -> None:
        try:
            await job()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.monitor.event("bad", f"background job stopped: {type(exc).__name__}: {exc}")

    async def _poll_gate(self) -> None:
        assert self.options.admin_url
        async with GateClient(
            self.options.admin_url, self.options.admin_token, self.guard
        ) as client:
            self.steering.client = client
            await polling.poll_gate(self.monitor, client, self.options.interval_s)

    # -- painting -------------------------------------------------------------------------

    def _tick(self) -> None:
        if self.polling:
            self.monitor.check_stale()
            if self.alerts is not None:
                self.alerts.tick()  # before the badge: the tick's screen shows its budget
            self.monitor.evaluate()
        if not self.frozen:
            self.paint()

    @property
    def window(self) -> tuple[int, str]:
        return WINDOWS[self.window_index]

    def _dashboard(self) -> Dashboard | None:
        for screen in self.screen_stack:
            if isinstance(screen, Dashboard):
                return screen
        return None

    def paint(self, force_charts: bool = False) -> None:
        dash = self._dashboard()
        if dash is None:
            return
        try:
            self._paint(dash, force_charts)
        except NoMatches:
            # The dashboard's panels are still being composed, or already being removed as
            # the app exits: the next tick paints (or nothing needs painting).
            return

    def drawn_at(self) -> tuple[float, float]:
        """The instant the screen shows, as (clock, wall): the monitor's last tick, which the
        header's clock names, so that a replay moved to that recorded tick draws the same
        screen (the charts' window, the badge's countdown); before the first tick, now."""
        m = self.monitor
        return m.ticked or (m.clock(), m.wall())

    def _paint(self, dash: Dashboard, force_charts: bool) -> None:
        m = self.monitor
        at, wall = self.drawn_at()
        narrow = self.screen.has_class("-narrow") or self.size.width < 120
        short = self.size.height < 36
        title = (
            self.options.title_endpoint
            or ", ".join(short_url(u) for u in self.options.urls)
            or "no endpoint"
        )
        main = m.serving_engines()
        if main:
            title += f"  {main[0].snap.dialect}/{main[0].snap.model or '-'}"
        dash.query_one(HeaderBar).render_header(
            self.options.hostname,
            title,
            m.verdict,
            m.health.pending(at),
            self.options.read_only,
            self.frozen,
            self.window[1],
            wall,
            self.options.clock_label,
        )
        if m.version == self._painted_version:
            return
        self._painted_version = m.version
        dash.query_one(GpuPanel).render_gpus(m.gpus, compact=narrow or short)
        users = users_now(m)
        dash.query_one(EnginePanel).render_engines(
            list(m.endpoints.values()),
            m.health.slo.get("ttft_p99_s"),
            self.options.hint,
            users,
            at,
        )
        dash.query_one(AdmissionPanel).render_gate(
            m.gate,
            self.steering.selected_lane,
            self.steering.pending_lines(),
            self.steering.selected_tenant,
            compact=narrow or short,
        )
        dash.query_one(AdaptivePanel).render_gate(m.gate, self.steering.selected_lane, wall)
        dash.query_one(UsersPanel).render_users(
            ttft_breakdown(m),
            users,
            m.health.slo,
            compact=narrow or short,
            budget=m.slo_budget,
        )
        dash.query_one(EventsPanel).render_events(m.events)
        now = time.monotonic()
        if now - self._charts_at >= CHART_EVERY_S or force_charts:
            self._charts_at = now
            self._paint_charts(dash)

    def _paint_charts(self, dash: Dashboard) -> None:
        m = self.monitor
        engines = m.serving_engines()
        now = self.drawn_at()[0]
        span, _ = self.window
        start = now - span
        series = engines[0].history.series if engines else {}

        def pts(name: str) -> list:
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
            chart = dash.query_one(selector, Chart)
            if chart.display and chart.region.area:  # hidden charts are not rebuilt
                chart.set_data(lines, start, now, threshold, floor)

    # -- actions --------------------------------------------------------------------------

    def repaint(self) -> None:
        """Paint now, even if no source moved (a key changed what is pending or selected)."""
        self._painted_version = -1
        self.paint()

    # The control keys: what they do is decided in ``Steering``.
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in CONTROL_ACTIONS:
            if not self.options.admin_url:
                return False  # no gate to steer: the keys are not offered at all
            if not self.steering.can_steer:
                return None  # read-only, or the gate not answering: shown greyed
        return True

    def action_select_lane(self, index: int) -> None:
        self.steering.select_lane(index)

    def action_next_lane(self) -> None:
        self.steering.next_lane()

    def action_next_tenant(self) -> None:
        self.steering.next_tenant()

    def action_tenant_pause(self) -> None:
        self.steering.tenant_pause()

    def action_tenant_cap(self, down: bool) -> None:
        self.steering.tenant_cap(down)

    def action_inflight(self, delta: int) -> None:
        self.steering.inflight(delta)

    def action_scale_inflight(self, factor: float) -> None:
        self.steering.scale_inflight(factor)

    def action_queue(self, delta: int) -> None:
        self.steering.queue(delta)

    def action_output(self, down: bool) -> None:
        self.steering.output(down)

    def action_budget(self, down: bool) -> None:
        self.steering.budget(down)

    def action_pause(self) -> None:
        self.steering.pause()

    def action_adaptive(self) -> None:
        # A lane switched on without a target of its own gets the dashboard's TTFT SLO.
        self.steering.toggle_adaptive(self.monitor.health.slo.get("ttft_p99_s") or 2.0)

    def action_undo(self) -> None:
        self.steering.undo()

    def action_edit(self) -> None:
        self.steering.edit()

    def action_audit(self) -> None:
        client = self.steering.client
        if client is None:
            self.notify("no gate: start gpuwatch with --admin URL", severity="warning")
            return

        async def show() -> None:
            try:
                entries = await client.audit(50)
            except GateError as exc:
                await self.push_screen(AuditScreen(None, str(exc)))
                return
            await self.push_screen(AuditScreen(entries))

        self.run_worker(show(), group="control")

    def action_plan(self) -> None:
        """The last plan saved for this gate (``gpuwatch plan sweep --gate URL``)."""
        from gpuwatch.plan.planner import load_for, plan_key, plans_dir
        from gpuwatch.tui.screens.plan import PlanScreen

        url = self.options.admin_url
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

        def chosen(apply: bool | None) -> None:
            if apply and plan is not None and plan.recommended is not None:
                rec = plan.recommended
                self.steering.apply_lane(rec.lane, rec.limits(), f"the plan of {plan.created}")

        self.push_screen(PlanScreen(plan, self.steering.view.limits(), url, hint), chosen)

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.all_bindings(), self.HELP_NOTES))

    def all_bindings(self) -> list[Binding]:
        return [b for b in [*self.BINDINGS, *Dashboard.BINDINGS] if isinstance(b, Binding)]

    def action_gpus(self) -> None:
        if not isinstance(self.screen, GpuScreen):
            self.push_screen(GpuScreen())

    def action_cycle_window(self) -> None:
        self.window_index = (self.window_index + 1) % len(WINDOWS)
        self._painted_version = -1
        self.paint(force_charts=True)
        self.notify(f"chart window {self.window[1]}", timeout=2)

    def action_freeze(self) -> None:
        self.frozen = not self.frozen
        self._painted_version = -1
        self.paint(force_charts=True)

    def action_next_theme(self) -> None:
        if not self._themes:
            return
        i = self._themes.index(self.theme) if self.theme in self._themes else -1
        self.theme = self._themes[(i + 1) % len(self._themes)]
        self._painted_version = -1
        self.paint()
        self.notify(f"theme {self.theme}", timeout=2)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for b in self.all_bindings():
            if b.action in ("command_palette",):
                continue
            yield SystemCommand(
                b.description.capitalize(),
                f"{b.description} ({b.key_display or b.key})",
                lambda a=b.action: self.run_action(a),
            )

    async def action_quit(self) -> None:
        self.exit()
