"""One request's accounting as it passes the gate.

Only inference requests (a POST to a path a lane names: chat, completions, embeddings,
images...) feed the lane's latency histograms and its exact record (``latency.py``); anything
else proxied (``GET /v1/models``, ``/health``) is counted apart, so it never dilutes what users
feel.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gpuwatch.gate.latency import LaneLatency, Outcome, Record
from gpuwatch.gate.metrics import LaneMetrics


class Exchange:
    def __init__(self, metrics: LaneMetrics, latency: LaneLatency | None, received: float) -> None:
        self.metrics = metrics
        self.latency = latency
        self.received = received
        self.record: Record | None = latency.start(received) if latency is not None else None
        self._last_chunk: float | None = None
        self._gaps: list[float] = []  # not yet in the lane's ITL sketch
        self._max_gap = 0.0
        self._flushed = received
        self._queued_at: float | None = None
        self._on_first: Callable[[], None] | None = None
        self.answered = False  # the whole answer reached the client (``answered_whole``)
        if self.record is None:
            metrics.other.inc()

    @property
    def inference(self) -> bool:
        return self.record is not None

    def queueing(self) -> None:
        """It asks its lane for a slot (and may wait for one)."""
        self._queued_at = time.monotonic()

    def admitted(self, queue_wait_s: float, on_first: Callable[[], None] | None = None) -> None:
        """It holds a slot; ``on_first`` is called at its first token (the lane learns its
        time from admission to first token: ``Ticket.first_token``)."""
        self._queued_at = None
        self._on_first = on_first
        self.metrics.admitted.inc()
        if self.record is not None:
            self.metrics.queue_wait.observe(queue_wait_s)
            self.record.queue_wait_s = queue_wait_s

    def first_byte(self) -> None:
        """The upstream's first body byte reached the gate: the user's time to first token."""
        now = time.monotonic()
        self._last_chunk = now
        if self._on_first is not None:
            self._on_first()
        if self.record is not None:
            ttft = now - self.received
            self.metrics.ttft.observe(ttft)
            self.record.ttft_s = ttft

    def chunk(self) -> None:
        """Another streamed chunk: the gap since the last one is an inter-token latency.

        Gaps reach the lane's ITL sketch once a second, so a long stream's gaps count in the
        seconds they happened, not all in the second it ended."""
        now = time.monotonic()
        if self._last_chunk is not None and self.record is not None:
            gap = now - self._last_chunk
            self._gaps.append(gap)
            self._max_gap = max(self._max_gap, gap)
            if now - self._flushed >= 1.0:
                self._flush_gaps(now)
        self._last_chunk = now

    def _flush_gaps(self, now: float) -> None:
        if self._gaps and self.latency is not None:
            self.latency.itl.add(self._gaps)
            self._gaps = []
        self._flushed = now

    def answered_whole(self) -> None:
        """The upstream finished its answer (``data: [DONE]``, or its last chunk) and the gate
        wrote it to the client: a success, whatever the client does next. Clients close at
        [DONE] (GuideLLM does), often under the gate's last write or while the upstream's
        stream is still open; counting those as abandoned put whole answers among the
        failures."""
        self.answered = True

    def outcome(self, outcome: Outcome) -> None:
        if self.answered:
            return
        if self.record is not None and self.record.outcome == "ok":
            self.record.outcome = outcome

    def end(self) -> None:
        if self.record is None:
            return
        now = time.monotonic()
        if self._queued_at is not None:
            # Left the queue without a slot (refused on timeout, or the client gave up): the
            # wait was real, and the worst of them belong in the queue-wait tail.
            self.record.queue_wait_s = now - self._queued_at
        self._flush_gaps(now)
        if self._max_gap:
            self.record.max_itl_s = self._max_gap
        e2e = now - self.received
        if self.record.outcome in ("ok", "failed"):
            self.metrics.duration.observe(e2e)
        self.record.e2e_s = e2e
        if self.latency is not None:
            self.latency.end(self.record)  # final now: into its second's block
