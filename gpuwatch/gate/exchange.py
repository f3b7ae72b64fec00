"""One request's accounting as it passes the gate.

Only inference requests (a POST to a path a lane names: chat, completions, embeddings,
images...) feed the lane's latency histograms and its exact record (``latency.py``); anything
else proxied (``GET /v1/models``, ``/health``) is counted apart, so it never dilutes what users
feel.
"""

from __future__ import annotations

import time

from gpuwatch.gate.latency import LaneLatency, Outcome, Record
from gpuwatch.gate.metrics import LaneMetrics


class Exchange:
    def __init__(self, metrics: LaneMetrics, latency: LaneLatency | None, received: float) -> None:
        self.metrics = metrics
        self.latency = latency
        self.received = received
        self.record: Record | None = latency.start(received) if latency is not None else None
        self._last_chunk: float | None = None
        self._gaps: list[float] = []
        if self.record is None:
            metrics.other.inc()

    @property
    def inference(self) -> bool:
        return self.record is not None

    def admitted(self, queue_wait_s: float) -> None:
        self.metrics.admitted.inc()
        if self.record is not None:
            self.metrics.queue_wait.observe(queue_wait_s)
            self.record.queue_wait_s = queue_wait_s

    def first_byte(self) -> None:
        """The upstream's first body byte reached the gate: the user's time to first token."""
        now = time.monotonic()
        self._last_chunk = now
        if self.record is not None:
            ttft = now - self.received
            self.metrics.ttft.observe(ttft)
            self.record.ttft_s = ttft

    def chunk(self) -> None:
        """Another streamed chunk: the gap since the last one is an inter-token latency."""
        now = time.monotonic()
        if self._last_chunk is not None and self.record is not None:
            self._gaps.append(now - self._last_chunk)
        self._last_chunk = now

    def outcome(self, outcome: Outcome) -> None:
        if self.record is not None and self.record.outcome == "ok":
            self.record.outcome = outcome

    def end(self) -> None:
        if self.record is None:
            return
        e2e = time.monotonic() - self.received
        self.record.e2e_s = e2e
        if self.record.outcome in ("ok", "failed"):
            self.metrics.duration.observe(e2e)
        if self._gaps:
            assert self.latency is not None
            self.latency.itl.add(self._gaps)
            self.record.max_itl_s = max(self._gaps)
