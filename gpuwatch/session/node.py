"""One node as a dashboard shows it: its options, monitor, guard, steering, pollers and clock.

A ``NodeSession`` is built whole by one of three factories and not rewired afterwards:
``live_session`` (this machine's endpoints, or a prebuilt monitor shown as it is),
``replay_session`` (a recording: the replay is a field, the guard refuses every change) and
``fleet.node_session`` (a node of the fleet, fed by Prometheus). The dashboard screen takes a
session in its constructor and runs its pollers; where the steering's questions go (a modal, a
notification) is the one thing a screen lends it while shown (``show_on``).
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from gpuwatch import polling
from gpuwatch.adminapi import Limits, LimitValue
from gpuwatch.alerts.node import NodeAlerts, node_alerts
from gpuwatch.config import DEFAULT_THEME, AlertSettings, KnobConfig, ScrapeSettings
from gpuwatch.control.gate import GateClient, default_actor
from gpuwatch.control.guard import Guard
from gpuwatch.control.knobs.apply import default_audit_path
from gpuwatch.control.knobs.base import Knob, KnobValue
from gpuwatch.control.knobs.steer import KnobRef, KnobSource, KnobSteering
from gpuwatch.control.steering import Severity, Steering
from gpuwatch.gate.audit import AuditLog
from gpuwatch.monitor.state import EventLevel, Monitor
from gpuwatch.record.player import Player
from gpuwatch.session.knobs import KNOB_READ_S, KnobReader, knob_audit
from gpuwatch.sources.nvml import NvmlReader

REPLAY_READ_ONLY = "a replay is read-only"

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
    # The stacks' own admin APIs (``[[knobs]]``), where their knob changes are audited (empty:
    # the default path), and how often their knobs are read.
    knobs: list[KnobConfig] = field(default_factory=list)
    knob_audit: str = ""
    knob_interval_s: float = KNOB_READ_S
    slow_link: bool = False  # charts every 10 s, no animation (a weak SSH link)


@dataclass(frozen=True)
class Poller:
    """One of the node's loops, run as a worker while its dashboard is shown. ``quiet``: its
    failure is a line in the log, not the app's end (a backfill still reading at exit)."""

    name: str
    run: Callable[[], Coroutine[Any, Any, Any]]
    quiet: bool = False


class SteeringUI(Protocol):
    """The half of ``SteeringView`` only a screen can do: ask, tell, show."""

    def notify(self, text: str, severity: Severity = "information") -> None: ...

    async def confirm(self, title: str, details: list[str]) -> bool: ...

    async def edit_form(self, gate: str, lane: str, limits: Limits) -> dict[str, LimitValue] | None:
        """The operator's changes to ``lane`` of the gate at ``gate``, or None."""

    async def edit_knobs(self, title: str, knobs: list[Knob]) -> dict[str, KnobValue] | None:
        """New values by name for some of ``knobs`` (one target of one stack), or None."""

    def changed(self) -> None: ...


class Unshown:
    """Where the steering's questions go while no screen shows the session: what it says
    becomes an event, nothing is confirmed (a change made off screen is never sent)."""

    def __init__(self, session: NodeSession) -> None:
        self.session = session

    def notify(self, text: str, severity: Severity = "information") -> None:
        level: EventLevel = "info" if severity == "information" else "warn"
        self.session.monitor.event(level, text)

    async def confirm(self, title: str, details: list[str]) -> bool:
        return False

    async def edit_form(self, gate: str, lane: str, limits: Limits) -> dict[str, LimitValue] | None:
        return None

    async def edit_knobs(self, title: str, knobs: list[Knob]) -> dict[str, KnobValue] | None:
        return None

    def changed(self) -> None:
        return None


class OnScreen:
    """``OperatorView`` over a session: events into its monitor, the rest to the screen that
    shows it (the gate's steering and the knobs' share one)."""

    def __init__(self, session: NodeSession) -> None:
        self.session = session

    def event(self, level: EventLevel, text: str) -> None:
        self.session.monitor.event(level, text)

    def notify(self, text: str, severity: Severity = "information") -> None:
        self.session.ui.notify(text, severity)

    async def confirm(self, title: str, details: list[str]) -> bool:
        return await self.session.ui.confirm(title, details)

    def changed(self) -> None:
        self.session.ui.changed()


class KnobsView(OnScreen):
    """``KnobView`` over a session: its knob sources, the form on its screen."""

    def sources(self) -> list[KnobSource]:
        reader = self.session.knob_reader
        return reader.sources if reader is not None else []

    async def edit_knobs(self, title: str, knobs: list[Knob]) -> dict[str, KnobValue] | None:
        return await self.session.ui.edit_knobs(title, knobs)


class NodeView(OnScreen):
    """``SteeringView`` over a session: the gate's state from its monitor, the questions to
    the screen that shows it."""

    def limits(self) -> Limits | None:
        # A gate that does not answer has no limits to steer: its last ones may be gone.
        gate = self.session.monitor.gate
        return gate.limits if gate and gate.status.state == "UP" else None

    def gate_reason(self) -> str | None:
        gate = self.session.monitor.gate
        return gate.status.reason if gate else None

    def show_limits(self, limits: Limits) -> None:
        self.session.monitor.apply_gate(limits, None, current=True)

    def tenants(self, lane: str) -> list[str]:
        gate = self.session.monitor.gate
        live = gate.lanes.get(lane) if gate else None
        return [t.id for t in live.tenants] if live else []

    async def edit_form(self, lane: str, limits: Limits) -> dict[str, LimitValue] | None:
        gate = self.session.monitor.gate
        return await self.session.ui.edit_form(gate.url if gate else "?", lane, limits)


class NodeSession:
    """One node: what it is (``options``), what is known of it (``monitor``), the one guard
    every change asks, the steering of its gate, the loops that feed it, and its clock."""

    def __init__(
        self,
        options: DashboardOptions,
        monitor: Monitor,
        guard: Guard,
        pollers: Callable[[NodeSession], list[Poller]] | None = None,
        replay: Player | None = None,
        alerts: NodeAlerts | None = None,
        knobs: tuple[KnobReader, AuditLog] | None = None,
    ) -> None:
        self.options = options
        # The SLO's burn rates on what is polled (a recording shows its recorded events).
        self.alerts = alerts
        # The terminal's bell, lent by the screen showing the session (a page-level alert).
        self.bell: Callable[[], None] | None = None
        self._monitor = monitor
        self.guard = guard
        # A replay is a field, not a kind of dashboard: its player holds the monitor (rebuilt
        # from a checkpoint on a step back), so the session always reads the player's.
        self.replay = replay
        self.ui: SteeringUI = Unshown(self)
        self.steering = Steering(guard, NodeView(self), options.admin_url or "")
        # The stacks' own knobs (none for a replay or a prebuilt monitor): read by a poller,
        # steered by the same keys on their rows, through the same guard.
        self.knob_reader: KnobReader | None = knobs[0] if knobs else None
        audit = knobs[1] if knobs else AuditLog(default_audit_path())
        self.knobs = KnobSteering(guard, KnobsView(self), audit, default_actor())
        self.pollers: list[Poller] = pollers(self) if pollers is not None else []

    @property
    def monitor(self) -> Monitor:
        return self.replay.monitor if self.replay is not None else self._monitor

    @property
    def read_only(self) -> bool:
        return self.guard.read_only

    @property
    def polls(self) -> bool:
        """Whether its sources are polled (so staleness and the badge are judged each second);
        a recording or a prebuilt monitor is shown as it is."""
        return bool(self.pollers)

    def drawn_at(self) -> tuple[float, float]:
        """The instant the screen shows, as (clock, wall). Live: the monitor's last tick, which
        the header's clock names, so that a replay moved to that recorded tick draws the same
        screen; before the first tick, now. A replay: its cursor, between ticks too."""
        m = self.monitor
        if self.replay is not None:
            return m.clock(), m.wall()
        return m.ticked or (m.clock(), m.wall())

    def ring(self) -> None:
        if self.bell is not None:
            self.bell()

    def show_on(self, ui: SteeringUI | None) -> None:
        """The screen now showing this session (None: none) takes the steering's questions."""
        self.ui = ui if ui is not None else Unshown(self)

    # -- the admission panel's rows: the gate's lanes, then the stacks' knobs -------------

    def next_row(self) -> None:
        """``tab``: the next lane; after the last lane the first knob, after the last knob the
        first lane again."""
        lanes, rows = self.steering.lanes(), self.knobs.rows()
        if self.knobs.selected in rows:
            i = rows.index(self.knobs.selected) + 1
            if i < len(rows):
                self.knobs.select(rows[i])
                return
            self.knobs.select(None)
            self.steering.select_lane(0)
            return
        self.knobs.selected = None  # gone with its stack's last read: a lane is selected
        last_lane = not lanes or self.steering.selected_lane == lanes[-1]
        if rows and last_lane:
            self.knobs.select(rows[0])
        else:
            self.steering.next_lane()

    def select_row(self, index: int) -> None:
        """A number key: the lanes first, then the knobs, in the panel's order."""
        lanes, rows = self.steering.lanes(), self.knobs.rows()
        if index < len(lanes):
            self.knobs.select(None)
            self.steering.select_lane(index)
        elif index - len(lanes) < len(rows):
            self.knobs.select(rows[index - len(lanes)])

    @property
    def on_knob(self) -> KnobRef | None:
        """The knob row selected (the keys act on it), or None: the gate's lane is."""
        found = self.knobs.current()
        return self.knobs.selected if found is not None else None

    async def poll_gate(self) -> None:
        """The gate's status into the monitor, through the client the steering sends with."""
        o = self.options
        assert o.admin_url
        async with GateClient(o.admin_url, o.admin_token, self.guard) as client:
            self.steering.client = client
            await polling.poll_gate(self.monitor, client, o.interval_s)

    def close(self) -> None:
        """The screen is going away: pending keys dropped, changes in flight stopped."""
        self.steering.close()
        self.knobs.close()
        if self.options.nvml is not None:
            self.options.nvml.close()


def local_pollers(session: NodeSession) -> list[Poller]:
    """A loop per source of the session's options: each engine URL, the GPUs, this host, the
    gate."""
    m, o = session.monitor, session.options
    found: list[Poller] = []
    for url in o.urls:

        def engine(url: str = url) -> Coroutine[Any, Any, None]:
            if o.engine_poll is not None:
                return o.engine_poll(m, url)
            return polling.poll_endpoint(m, url, o.interval_s, o.scrape)

        found.append(Poller(f"engine {url}", engine))
    nvml = o.nvml
    if nvml is not None:
        found.append(Poller("nvml", lambda: polling.poll_gpus(m, nvml, o.interval_s)))
    if o.local:
        found.append(Poller("host", lambda: polling.poll_host(m)))
    if o.admin_url:
        found.append(Poller("gate", session.poll_gate))
    if session.alerts is not None:
        found.append(Poller("alerts", session.alerts.run, quiet=True))
    if session.knob_reader is not None:
        found.append(Poller("knobs", session.knob_reader.run, quiet=True))
    return found


def live_session(options: DashboardOptions, monitor: Monitor | None = None) -> NodeSession:
    """This machine's node: every source of ``options`` polled into a new monitor. A prebuilt
    ``monitor`` (simulated data, a screenshot's scene) is shown as it is: nothing polls."""
    guard = Guard(read_only=options.read_only)
    if monitor is not None:
        return NodeSession(options, monitor, guard)
    fresh = Monitor(options.urls, options.interval_s, options.slo, options.admin_url)
    session: NodeSession
    alerts = node_alerts(fresh, options.alerts, bell=lambda: session.ring())
    reader = KnobReader(
        lambda: fresh,
        options.knobs,
        fresh.event,
        lambda: session.ui.changed(),
        options.knob_interval_s,
    )
    audit = knob_audit(options.knob_audit, fresh.event)
    session = NodeSession(
        options, fresh, guard, local_pollers, alerts=alerts, knobs=(reader, audit)
    )
    return session


def replay_session(player: Player, options: DashboardOptions) -> NodeSession:
    """A recording: the same node's screen fed by ``player``, read-only through the one guard
    (which says why), its header's clock the recording's."""
    shown = replace(options, read_only=True, clock_label="REPLAY")
    guard = Guard(read_only=True, reason=REPLAY_READ_ONLY)
    return NodeSession(shown, player.monitor, guard, replay=player)
