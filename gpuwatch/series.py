"""History: ring buffers, counter rates and windowed histogram quantiles.

``histogram_quantile`` is the only quantile function in gpuwatch; it follows Prometheus'
``histogram_quantile`` (promql/quantile.go) so the numbers here match a Grafana panel.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpuwatch.model import EngineSnapshot, Histogram

Buckets = Sequence[tuple[float, float]]


class HistogramError(ValueError):
    """A histogram that Prometheus itself would refuse to interpolate."""


def histogram_quantile(q: float, buckets: Buckets) -> float | None:
    """Quantile ``q`` of cumulative ``buckets`` (upper bound, count), as Prometheus computes it.

    Linear interpolation inside the bucket, lower bound 0 for the first bucket, a rank that
    falls in the ``+Inf`` bucket returns the largest finite bound; ``None`` when there are no
    observations. Raises ``HistogramError`` when the ``+Inf`` bucket is missing.
    """
    if math.isnan(q):
        return None
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    ordered = sorted(buckets)
    if not ordered or not math.isinf(ordered[-1][0]):
        raise HistogramError("histogram has no +Inf bucket")
    coalesced: list[list[float]] = []
    for bound, count in ordered:
        if coalesced and coalesced[-1][0] == bound:
            coalesced[-1][1] += count
        else:
            coalesced.append([bound, count])
    # Prometheus forces counts monotonic: scrapes are not atomic across bucket series.
    highest = 0.0
    for pair in coalesced:
        highest = max(highest, pair[1])
        pair[1] = highest
    if len(coalesced) < 2:
        return None
    observations = coalesced[-1][1]
    if observations == 0:
        return None
    rank = q * observations
    last = len(coalesced) - 1
    b = next((i for i in range(last) if coalesced[i][1] >= rank), last)
    if b == last:
        return coalesced[-2][0]
    if b == 0 and coalesced[0][0] <= 0:
        return coalesced[0][0]
    start = 0.0
    end, count = coalesced[b]
    if b > 0:
        start = coalesced[b - 1][0]
        count -= coalesced[b - 1][1]
        rank -= coalesced[b - 1][1]
    if count == 0:
        return None
    return start + (end - start) * (rank / count)


@dataclass
class Point:
    t: float
    v: float


class RingSeries:
    """Recent points at full resolution; older ones kept as averages of ``coarse_every`` points.

    The default keeps one hour at 1 s and the 24 hours before it at 1 minute.
    """

    def __init__(
        self, capacity: int = 3600, coarse_every: int = 60, coarse_capacity: int = 1440
    ) -> None:
        self.fine: deque[Point] = deque()
        self.coarse: deque[Point] = deque(maxlen=coarse_capacity)
        self.capacity = capacity
        self.coarse_every = coarse_every
        self._pending: list[Point] = []

    def append(self, t: float, v: float) -> None:
        self.fine.append(Point(t, v))
        if len(self.fine) > self.capacity:
            self._pending.append(self.fine.popleft())
            if len(self._pending) >= self.coarse_every:
                ts = sum(p.t for p in self._pending) / len(self._pending)
                vs = sum(p.v for p in self._pending) / len(self._pending)
                self.coarse.append(Point(ts, vs))
                self._pending.clear()

    def __len__(self) -> int:
        return len(self.fine) + len(self.coarse) + len(self._pending)

    def points(self, since: float | None = None) -> list[Point]:
        if since is not None and self.fine and self.fine[0].t >= since:
            older = [p for p in (*self.coarse, *self._pending) if p.t >= since]
            return [*older, *self.fine]
        if since is not None and self.fine:
            # Charts ask for the last minutes of an hour: skip the older points by bisection.
            fine = list(self.fine)
            return fine[bisect.bisect_left(fine, since, key=lambda p: p.t) :]
        every: Iterable[Point] = [*self.coarse, *self._pending, *self.fine]
        return [p for p in every if since is None or p.t >= since]

    def last(self) -> Point | None:
        return self.fine[-1] if self.fine else None


class CounterRate:
    """Per-second rate of a counter over a sliding window; a decrease restarts the window."""

    def __init__(self, window_s: float = 60.0) -> None:
        self.window_s = window_s
        self._points: deque[Point] = deque()

    def update(self, t: float, value: float) -> bool:
        """Record a sample; return True when the counter went backwards (a server restart)."""
        reset = bool(self._points) and value < self._points[-1].v
        if reset:
            self._points.clear()
        self._points.append(Point(t, value))
        while len(self._points) > 2 and self._points[1].t <= t - self.window_s:
            self._points.popleft()
        return reset

    def last(self) -> float | None:
        return self._points[-1].v if self._points else None

    def reset(self, t: float, value: float | None) -> None:
        self._points.clear()
        if value is not None:
            self._points.append(Point(t, value))

    def rate(self) -> float | None:
        if len(self._points) < 2:
            return None
        first, last = self._points[0], self._points[-1]
        if last.t <= first.t:
            return None
        return (last.v - first.v) / (last.t - first.t)

    def increase(self) -> float | None:
        if len(self._points) < 2:
            return None
        return self._points[-1].v - self._points[0].v


class HistogramWindow:
    """Quantiles over a sliding window from bucket deltas between scrapes.

    Equivalent to ``histogram_quantile(q, rate(x_bucket[window]))``: the rate's divisor cancels.
    """

    def __init__(self, window_s: float = 60.0) -> None:
        self.window_s = window_s
        self._snaps: deque[tuple[float, dict[float, float]]] = deque()

    def update(self, t: float, hist: Histogram) -> bool:
        """Record a scrape; return True when a bucket went backwards (a server restart)."""
        current = dict(hist.buckets)
        reset = False
        if self._snaps:
            previous = self._snaps[-1][1]
            reset = any(current.get(le, 0.0) < count for le, count in previous.items())
            if reset:
                self._snaps.clear()
        self._snaps.append((t, current))
        while len(self._snaps) > 2 and self._snaps[1][0] <= t - self.window_s:
            self._snaps.popleft()
        return reset

    def reset(self, t: float, hist: Histogram) -> None:
        self._snaps.clear()
        self._snaps.append((t, dict(hist.buckets)))

    def delta(self) -> list[tuple[float, float]] | None:
        if not self._snaps:
            return None
        newest = self._snaps[-1][1]
        if len(self._snaps) == 1:
            return None
        oldest = self._snaps[0][1]
        return sorted((le, count - oldest.get(le, 0.0)) for le, count in newest.items())

    def quantile(self, q: float) -> float | None:
        delta = self.delta()
        if delta is None:
            return None
        return histogram_quantile(q, delta)

    def observations(self) -> float | None:
        delta = self.delta()
        if not delta:
            return None
        return max(count for _, count in delta)


COUNTER_FIELDS = (
    "prompt_tokens_total",
    "generation_tokens_total",
    "preemptions_total",
    "prefix_cache_hits_total",
    "prefix_cache_queries_total",
)
GAUGE_FIELDS = ("running", "waiting", "kv_cache_usage")
# What the charts draw: gauges as scraped, plus what is derived from counters and histograms.
SERIES = (*GAUGE_FIELDS, "ttft_p50", "ttft_p99", "itl_p99", "gen_tps", "prompt_tps")


class EngineHistory:
    """Live history of one engine: series over time, counter rates, windowed quantiles.

    ``update`` returns one-line events; a counter or histogram that goes backwards means the
    server restarted, so every window restarts and the event says so.
    """

    def __init__(self, window_s: float = 60.0, capacity: int = 3600) -> None:
        self.window_s = window_s
        self.series = {name: RingSeries(capacity) for name in SERIES}
        self.counters = {name: CounterRate(window_s) for name in COUNTER_FIELDS}
        self.latency: dict[str, HistogramWindow] = {}
        # Rates and quantiles over a short window: what the panel and the charts show "now".
        self._recent = {
            name: CounterRate(10.0) for name in ("generation_tokens_total", "prompt_tokens_total")
        }

    def update(self, t: float, snap: EngineSnapshot) -> list[str]:
        events: list[str] = []
        for name, counter in self.counters.items():
            value = getattr(snap, name)
            if value is None:
                continue
            before = counter.last()
            if counter.update(t, value):
                events.append(
                    f"{snap.source}: {name} went backwards ({before:g} -> {value:g}):"
                    " server restarted, windows reset"
                )
        for kind, hist in snap.histograms.items():
            window = self.latency.setdefault(kind, HistogramWindow(self.window_s))
            if window.update(t, hist):
                events.append(
                    f"{snap.source}: {kind} histogram went backwards: server restarted,"
                    " windows reset"
                )
        if events:
            self._restart(t, snap)
        for name, recent in self._recent.items():
            value = getattr(snap, name)
            if value is not None:
                recent.update(t, value)
        self._append(t, snap)
        return events

    def _append(self, t: float, snap: EngineSnapshot) -> None:
        derived = {
            "ttft_p50": self.quantile("ttft", 0.5),
            "ttft_p99": self.quantile("ttft", 0.99),
            "itl_p99": self.quantile("itl", 0.99),
            "gen_tps": self._recent["generation_tokens_total"].rate(),
            "prompt_tps": self._recent["prompt_tokens_total"].rate(),
        }
        for name in GAUGE_FIELDS:
            derived[name] = getattr(snap, name)
        for name, value in derived.items():
            if value is not None:
                self.series[name].append(t, value)

    def _restart(self, t: float, snap: EngineSnapshot) -> None:
        for name, counter in [*self.counters.items(), *self._recent.items()]:
            counter.reset(t, getattr(snap, name))
        for kind, window in self.latency.items():
            if kind in snap.histograms:
                window.reset(t, snap.histograms[kind])

    def rate(self, name: str) -> float | None:
        recent = self._recent.get(name)
        return (recent or self.counters[name]).rate()

    def per_minute(self, name: str) -> float | None:
        rate = self.counters[name].rate()
        return rate * 60 if rate is not None else None

    def quantile(self, kind: str, q: float) -> float | None:
        window = self.latency.get(kind)
        if window is None:
            return None
        try:
            return window.quantile(q)
        except HistogramError:
            return None

    def prefix_hit_rate(self) -> float | None:
        hits = self.counters["prefix_cache_hits_total"].increase()
        queries = self.counters["prefix_cache_queries_total"].increase()
        if hits is None or not queries:
            return None
        return hits / queries
