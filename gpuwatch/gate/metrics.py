"""The gate's own /metrics (read back by the data layer's ``gate`` dialect)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gpuwatch.buckets import GATE_DURATION_BUCKETS, GATE_LATENCY_BUCKETS
from gpuwatch.gate.limits import REASONS


class GateMetrics:
    def __init__(self, lanes: list[str]) -> None:
        self.registry = r = CollectorRegistry()
        lane = ["lane"]
        self.inflight = Gauge(
            "gpuwatch_gate_inflight", "Requests in flight upstream.", lane, registry=r
        )
        self.queued = Gauge(
            "gpuwatch_gate_queued", "Requests waiting for a slot.", lane, registry=r
        )
        self.limit_inflight = Gauge(
            "gpuwatch_gate_limit_max_inflight", "Current max_inflight.", lane, registry=r
        )
        self.limit_queue = Gauge(
            "gpuwatch_gate_limit_max_queue", "Current max_queue.", lane, registry=r
        )
        self.queue_wait_budget = Gauge(
            "gpuwatch_gate_queue_wait_budget_seconds",
            "The longest a request may wait for a slot now (max_queue_wait_s, or the lane's "
            "TTFT target less its recent prefill time); NaN: no budget.",
            lane,
            registry=r,
        )
        self.inflight_tokens = Gauge(
            "gpuwatch_gate_inflight_tokens",
            "Tokens reserved by requests in flight (prompt + output bound).",
            lane,
            registry=r,
        )
        self.limit_inflight_tokens = Gauge(
            "gpuwatch_gate_limit_max_inflight_tokens",
            "Current max_inflight_tokens (NaN: no token budget).",
            lane,
            registry=r,
        )
        self.paused = Gauge("gpuwatch_gate_paused", "1 while admission is paused.", registry=r)
        self.upstream_stalled = Gauge(
            "gpuwatch_gate_upstream_stalled",
            "1 while the upstream is stalled (requests in it, no progress) and lanes are shed.",
            registry=r,
        )
        self.admitted = Counter("gpuwatch_gate_admitted", "Requests admitted.", lane, registry=r)
        self.rejected = Counter(
            "gpuwatch_gate_rejected", "Requests refused, by reason.", ["lane", "reason"], registry=r
        )
        self.upstream_errors = Counter(
            "gpuwatch_gate_upstream_errors", "Upstream connection failures (502s).", registry=r
        )
        self.upstream_timeouts = Counter(
            "gpuwatch_gate_upstream_timeouts",
            "Answers the upstream stopped sending: no first byte (first_byte, a 504) or no next "
            "chunk (idle) within the lane's upstream timeout.",
            ["lane", "kind"],
            registry=r,
        )
        self.upstream_retries = Counter(
            "gpuwatch_gate_upstream_retries",
            "Requests sent again on a new connection: a kept-alive one was closed under them.",
            registry=r,
        )
        self.streams_broken = Counter(
            "gpuwatch_gate_streams_broken",
            "Streamed answers cut short, by the side that went away (client or upstream).",
            ["side"],
            registry=r,
        )
        self.bad_requests = Counter(
            "gpuwatch_gate_bad_requests",
            "Requests refused before admission for what they sent (bad path, body, size).",
            ["code"],
            registry=r,
        )
        self.queue_wait = Histogram(
            "gpuwatch_gate_queue_wait_seconds",
            "Time queued before admission (inference requests).",
            lane,
            buckets=GATE_LATENCY_BUCKETS,
            registry=r,
        )
        self.ttft = Histogram(
            "gpuwatch_gate_ttft_seconds",
            "From the gate receiving an inference request to the first body byte from upstream.",
            lane,
            buckets=GATE_LATENCY_BUCKETS,
            registry=r,
        )
        self.duration = Histogram(
            "gpuwatch_gate_request_duration_seconds",
            "Whole inference request, queue included (answered ones, refusals apart).",
            lane,
            buckets=GATE_DURATION_BUCKETS,
            registry=r,
        )
        self.other = Counter(
            "gpuwatch_gate_other_requests",
            "Proxied requests that are not inference (GET /v1/models, /health, ...).",
            lane,
            registry=r,
        )
        self.effective_inflight = Gauge(
            "gpuwatch_gate_effective_inflight",
            "The max_inflight in force (the adaptive controller's on an adaptive lane).",
            lane,
            registry=r,
        )
        self.adaptive_decisions = Counter(
            "gpuwatch_gate_adaptive_decisions",
            "Changes of an adaptive lane's effective limit, by direction (up, down).",
            ["lane", "direction"],
            registry=r,
        )
        self.lanes = {name: LaneMetrics(self, name) for name in lanes}


class LaneMetrics:
    """One lane's labelled children, resolved once: label lookups cost more than the updates."""

    def __init__(self, m: GateMetrics, lane: str) -> None:
        self.admitted = m.admitted.labels(lane)
        self.queue_wait = m.queue_wait.labels(lane)
        self.ttft = m.ttft.labels(lane)
        self.duration = m.duration.labels(lane)
        self.other = m.other.labels(lane)
        self.rejected = {reason: m.rejected.labels(lane, reason) for reason in REASONS}
        self.inflight = m.inflight.labels(lane)
        self.queued = m.queued.labels(lane)
        self.limit_inflight = m.limit_inflight.labels(lane)
        self.limit_queue = m.limit_queue.labels(lane)
        self.queue_wait_budget = m.queue_wait_budget.labels(lane)
        self.inflight_tokens = m.inflight_tokens.labels(lane)
        self.limit_inflight_tokens = m.limit_inflight_tokens.labels(lane)
        self.effective_inflight = m.effective_inflight.labels(lane)
