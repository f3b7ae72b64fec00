"""The fleet through Prometheus, without the screen: its options, its source, what was read
(``FleetState``), the one guard, one change for many gates, and the drill-down's factory
(``node_session``: a ``NodeSession`` for one row's node, fed by Prometheus' samples)."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuwatch import polling
from gpuwatch.admintoken import read_token
from gpuwatch.config import DEFAULT_THEME, GateTarget
from gpuwatch.control.fleet import FleetChange, address_of
from gpuwatch.control.guard import Guard
from gpuwatch.monitor.fleet import FleetState
from gpuwatch.monitor.state import Monitor
from gpuwatch.session.node import DashboardOptions, EnginePoll, NodeSession, Poller, local_pollers
from gpuwatch.sources.prometheus import PrometheusError, PrometheusSource
from gpuwatch.sources.promnode import NodeSamples, read_history
from gpuwatch.sources.promql import FleetRow, dialects_named

HISTORY_READ_ONLY = "the fleet in the past is read-only"


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


class FleetSession:
    """The fleet table's model. In the past (``options.at``) everything is read-only: the one
    guard, which a fleet change, every node's steering and their gate clients all ask."""

    def __init__(self, options: FleetOptions, state: FleetState | None = None) -> None:
        self.options = options
        self.source = options.source
        # A prebuilt state (the screenshots' scene) is shown as it is: nothing polls.
        self.polls = state is None
        self.state = state or FleetState(options.slo)
        past = options.at is not None
        self.guard = Guard(read_only=options.read_only or past)
        if past:
            self.guard.reason = HISTORY_READ_ONLY
        self.change = FleetChange(self.guard)

    async def read(self, at: float | None) -> None:
        """One reading of the whole fleet (now, or at ``at``) into ``state``."""
        reading = await self.source.read_fleet(at)
        if at is not None:
            # Each instant judged on its own values: no hold carried over a jump.
            self.state.badges.clear()
        self.state.apply(reading)

    def node_session(self, row: FleetRow, at: float | None = None) -> NodeSession:
        """The drill-down: ``row``'s node as its own dashboard shows it, read from Prometheus'
        samples of its instance (or its /metrics with ``direct``), its GPUs from DCGM, its
        charts' hour from query_range, its gate's admin API when one is configured. At a past
        instant ``at`` the clock runs from that instant (the charts end there), everything is
        read once and nothing goes stale."""
        fo = self.options
        admin, token, problem = None, None, None
        if row.gate:
            gate = address_of(row.gate, row.node, fo.gates)
            admin = gate.admin
            if admin and gate.token_file:
                try:
                    token = read_token(Path(gate.token_file).expanduser())
                except ValueError as exc:
                    problem = f"gate {row.gate}: {exc}"
        direct = fo.direct and at is None
        url = f"http://{row.instance}/metrics"
        engine_poll: EnginePoll | None = None
        if not direct:
            reader = NodeSamples(self.source, url, row.instance, dialects_named(row.dialect))

            def engine_poll(monitor: Monitor, _url: str) -> Coroutine[Any, Any, None]:
                return polling.poll_prometheus_engine(monitor, reader, fo.interval_s, at)

        options = DashboardOptions(
            [url] if row.dialect != "gate" else [],
            fo.interval_s,
            admin_url=admin,
            admin_token=token,
            theme=fo.theme,
            slo=fo.slo,
            read_only=self.guard.read_only,
            title_endpoint=f"{row.instance} ({'its /metrics' if direct else 'via Prometheus'})",
            hostname=row.node,
            engine_poll=engine_poll,
            local=False,
        )
        # Unix time, as Prometheus stamps its samples.
        clock: Callable[[], float] = time.time
        interval = options.interval_s
        if at is not None:
            opened = time.monotonic()
            clock, interval = (lambda: at + time.monotonic() - opened), math.inf
        monitor = Monitor(options.urls, interval, fo.slo, options.admin_url, clock=clock)
        if problem is not None:
            monitor.event("warn", problem)

        def pollers(session: NodeSession) -> list[Poller]:
            found = local_pollers(session)
            found.append(
                Poller(
                    "dcgm",
                    lambda: polling.poll_dcgm(monitor, self.source, row.node, fo.interval_s, at),
                )
            )
            if options.urls:
                # A backfill still reading when the app closes meets a closed client: that
                # must not fail the app's exit (nothing is left to draw it on).
                found.append(Poller("backfill", lambda: self.backfill(monitor, row, at), True))
            return found

        return NodeSession(options, monitor, self.guard, pollers)

    async def backfill(self, monitor: Monitor, row: FleetRow, at: float | None) -> bool:
        """The charts' hour from query_range, once the first reading made the engines (the
        hour goes before what they hold). True when it added points."""
        while not monitor.serving_engines():
            await asyncio.sleep(0.2)
        now = at if at is not None else time.time()
        try:
            history = await read_history(
                self.source, row.instance, dialects_named(row.dialect), now, monitor.window_s
            )
        except PrometheusError as exc:
            monitor.event("warn", f"the charts' hour from Prometheus: {exc}")
            return False
        return bool(polling.apply_history(monitor, history))
