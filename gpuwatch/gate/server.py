"""``gpuwatch gate``: an admission-control proxy in front of any OpenAI-compatible server.

This module only composes the parts: the proxy plane (``proxy.py``), the admin plane at
``/admin`` (``admin.py``), the state and its change transaction (``state.py``), one admission
lane per configured lane (``admission.py``), the metrics, and the listener (``listener.py``).
"""

from __future__ import annotations

from collections.abc import Collection
from functools import partial
from pathlib import Path

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gpuwatch.gate import state as state_mod
from gpuwatch.gate.adaptive_loop import AdaptiveLoop
from gpuwatch.gate.admin import Admin
from gpuwatch.gate.admission import AdmissionLane
from gpuwatch.gate.config import GateConfig
from gpuwatch.gate.latency import LaneLatency
from gpuwatch.gate.limits import Limits
from gpuwatch.gate.listener import Listening, listen, track_requests
from gpuwatch.gate.metrics import GateMetrics
from gpuwatch.gate.otel import GateTelemetry
from gpuwatch.gate.proxy import Proxy
from gpuwatch.gate.stallwatch import StallWatch, generation_lanes
from gpuwatch.gate.state import GateState
from gpuwatch.gate.tenantstatus import ClassCollector
from gpuwatch.gate.upstream import Upstream
from gpuwatch.gate.upstream_metrics import UpstreamMetrics
from gpuwatch.stall import DEFAULT_STALL_AFTER_S


def _inflight(lane: AdmissionLane) -> float:
    return lane.inflight


def _queued(lane: AdmissionLane) -> float:
    return len(lane.queue)


def _limit_inflight(state: GateState, name: str) -> float:
    return state.limits.lanes[name].max_inflight  # configured (an adaptive lane's upper bound)


def _effective_inflight(lane: AdmissionLane) -> float:
    return lane.limits.max_inflight


def _limit_queue(lane: AdmissionLane) -> float:
    return lane.limits.max_queue


def _wait_budget(lane: AdmissionLane) -> float:
    budget = lane.wait_budget()
    return float("nan") if budget is None else budget


def _inflight_tokens(lane: AdmissionLane) -> float:
    return lane.inflight_tokens


def _limit_inflight_tokens(state: GateState, name: str) -> float:
    budget = state.limits.lanes[name].max_inflight_tokens
    return float("nan") if budget is None else budget


class Gate:
    def __init__(
        self,
        upstream: str,
        config: GateConfig,
        state: GateState,
        token: str | None,
        upstream_metrics: str | None = None,
        controller: str = "aimd",
        adaptive_pace: float = 1.0,
        stall_after_s: float | None = DEFAULT_STALL_AFTER_S,
        stall_lanes: Collection[str] | None = None,
    ) -> None:
        self.config = config
        self.state = state
        self.token = token.encode() if token else None
        limits = state.limits
        self.lanes = {
            lane.name: AdmissionLane(
                lane.name,
                limits.lanes[lane.name],
                limits.paused,
                slo_ttft_s=config.slo_ttft_s if lane.name in config.slo_lanes else None,
            )
            for lane in config.lanes
        }
        self.metrics = GateMetrics(list(self.lanes))
        self.upstream = Upstream(upstream, on_retry=self.metrics.upstream_retries.inc)
        self.latency = {name: LaneLatency() for name in self.lanes}
        # Spans and GenAI metrics over OTLP, only with an endpoint (otel.py; the SDK loads then).
        self.telemetry = GateTelemetry(config.otlp) if config.otlp.enabled else None
        self.proxy = Proxy(
            config, self.lanes, self.metrics, self.upstream, self.latency, self.telemetry
        )
        # Read as often as the controller decides (once a second of the upstream's time): a
        # reading older than a decision would be judged again as if it were new.
        self.upstream_metrics = (
            UpstreamMetrics(upstream_metrics, interval_s=adaptive_pace)
            if upstream_metrics
            else None
        )
        self.adaptive = AdaptiveLoop(
            state,
            self.lanes,
            self.latency,
            self.metrics,
            self.upstream_metrics.latest if self.upstream_metrics else lambda: None,
            controller,
            pace=adaptive_pace,
            kv_high=config.kv_usage_high,
        )
        self.adaptive.apply(limits)  # an adaptive lane starts at its lower bound
        self.admin = Admin(
            state, self.lanes, config.client_body_timeout_s, self.latency, config.fairness
        )
        self.metrics.registry.register(ClassCollector(self.lanes, config.fairness))
        self.admin.adaptive = self.adaptive
        shed = stall_lanes
        if shed is None:
            prefixes = {lane.name: lane.prefixes for lane in config.lanes}
            shed = generation_lanes(self.proxy.lane_for, prefixes)
        self.stall = StallWatch(
            state, self.lanes, shed, self.proxy.streams, stall_after_s, upstream_metrics is not None
        )
        if self.upstream_metrics is not None:
            self.upstream_metrics.listeners.append(self.stall.on_page)
        self.admin.stall = self.stall
        state.on_change(self._apply)
        self._bind_gauges()

    def lane_for(self, path: str) -> str | None:
        return self.proxy.lane_for(path)

    def _apply(self, limits: Limits) -> None:
        self.adaptive.apply(limits)  # the one place limits reach the lanes

    def _bind_gauges(self) -> None:
        """Gauges read the admission state when scraped: nothing to update per request."""
        self.metrics.paused.set_function(lambda: 1.0 if self.state.limits.paused else 0.0)
        self.metrics.upstream_stalled.set_function(self.stall.stalled)
        for name, lane in self.lanes.items():
            lm = self.metrics.lanes[name]
            lm.inflight.set_function(partial(_inflight, lane))
            lm.queued.set_function(partial(_queued, lane))
            lm.limit_inflight.set_function(partial(_limit_inflight, self.state, name))
            lm.effective_inflight.set_function(partial(_effective_inflight, lane))
            lm.limit_queue.set_function(partial(_limit_queue, lane))
            lm.queue_wait_budget.set_function(partial(_wait_budget, lane))
            lm.inflight_tokens.set_function(partial(_inflight_tokens, lane))
            lm.limit_inflight_tokens.set_function(partial(_limit_inflight_tokens, self.state, name))

    def app(self) -> web.Application:
        # The proxy reads bodies itself, bounded per lane (client_max_size is for request.read).
        app = web.Application(middlewares=[track_requests])
        app.add_subapp("/admin", self.admin.app(self.token))
        app.router.add_get("/metrics", self.get_metrics)
        app.router.add_get("/health", self.health)
        app.router.add_route("*", "/{tail:.*}", self.proxy.handle, expect_handler=self.proxy.expect)
        app.on_startup.append(self._open)
        app.on_cleanup.append(self._close)
        return app

    async def _open(self, _: web.Application) -> None:
        await self.upstream.open()
        self.adaptive.start()
        self.stall.start()
        if self.upstream_metrics is not None:
            self.upstream_metrics.start()

    async def _close(self, _: web.Application) -> None:
        await self.adaptive.stop()
        await self.stall.stop()
        if self.upstream_metrics is not None:
            await self.upstream_metrics.stop()
        await self.upstream.close()
        if self.telemetry is not None:
            await self.telemetry.close()  # what the batch processor holds goes out

    async def get_metrics(self, _: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(self.metrics.registry),
            headers={"Content-Type": CONTENT_TYPE_LATEST},
        )

    async def health(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})


async def start_gate(
    upstream: str,
    config: GateConfig,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    token: str | None = None,
    state_file: Path | None = None,
    upstream_metrics: str | None = None,
    controller: str = "aimd",
    adaptive_pace: float = 1.0,
    stall_after_s: float | None = DEFAULT_STALL_AFTER_S,
    stall_lanes: Collection[str] | None = None,
) -> tuple[Gate, Listening]:
    """Load state (persisted limits win), start serving; close with ``served.close()``."""
    defaults = {lane.name: lane.limits for lane in config.lanes}
    path = state_file or state_mod.default_path(host, port)
    state = state_mod.load(path, defaults)
    if not path.exists():
        state.save()  # the file exists from the start: its path is something to show
    gate = Gate(
        upstream, config, state, token, upstream_metrics, controller, adaptive_pace,
        stall_after_s, stall_lanes,
    )  # fmt: skip
    served = await listen(gate.app(), host, port, config.client_header_timeout_s)
    return gate, served
