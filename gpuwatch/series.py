"""History: ring buffers, counter rates and windowed histogram quantiles.

``histogram_quantile`` is the quantile of bucketed data in gpuwatch, ``sample_quantile`` the
quantile of raw samples. The first follows Prometheus' ``histogram_quantile``
(promql/quantile.go), and the windows follow PromQL's range vectors (``rate``/``increase`` over
the samples inside ``(t - w, t]``, extrapolated as Prometheus does), so a number here equals
the same query in a Grafana panel on the same scrapes.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpuwatch.errors import GpuwatchError
from gpuwatch.model import EngineSnapshot, Histogram

Buckets = Sequence[tuple[float, float]]


class HistogramError(GpuwatchError, ValueError):
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


def sample_quantile(ordered: Sequence[float], q: float) -> float:
    """Quantile ``q`` of sorted raw samples, interpolated linearly between the two nearest
    ranks: numpy's default and ``statistics.quantiles(method="inclusive")``, what
    ``vllm bench serve`` reports. Used where every sample is known (the gate, the load report).
    """
    if not ordered:
        raise ValueError("no samples")
    position = q * (len(ordered) - 1)
    lo = math.floor(position)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (position - lo)


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

    def drop_before(self, t: float) -> None:
        while self.fine and self.fine[0].t < t:
            self.fine.popleft()

    def prepend(self, points: Iterable[Point]) -> None:
        """Points from before this series began (a backfill, oldest first): those not older
        than the first point held are dropped, and the fine part keeps its capacity."""
        first = self.fine[0].t if self.fine else math.inf
        older = [p for p in points if p.t < first]
        room = self.capacity - len(self.fine)
        if room > 0 and older:
            self.fine.extendleft(reversed(older[-room:]))

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

    def at(self, t: float) -> Point | None:
        """The newest point at or before ``t`` (fine resolution), or None."""
        fine = self.fine
        i = bisect.bisect_right(fine, t, key=lambda p: p.t)
        return fine[i - 1] if i else None


def extrapolated_increase(
    samples: Sequence[tuple[float, float]], start: float, end: float
) -> float | None:
    """What PromQL's ``increase()`` gives for counter ``samples`` over the range (start, end].

    Prometheus' ``extrapolatedRate`` (promql/functions.go) without the division by the range:
    the increase from the first to the last sample (a value lower than the one before it is a
    counter reset and adds that value back), extrapolated towards the range's ends by up to
    the time to each end, where that is under 1.1 average sample intervals (else half an
    interval), and at the start never past where the counter would have been zero.
    ``samples`` are (time, value) inside the range, oldest first; None with fewer than two.
    """
    if len(samples) < 2:
        return None
    (first_t, first_v), (last_t, last_v) = samples[0], samples[-1]
    result = last_v - first_v
    previous = first_v
    for _, value in samples[1:]:
        if value < previous:
            result += previous
        previous = value
    return _extrapolate(result, first_t, first_v, last_t, len(samples), start, end)


def _extrapolate(
    result: float, first_t: float, first_v: float, last_t: float, n: int, start: float, end: float
) -> float | None:
    """``extrapolated_increase`` from its parts: the increase between the first and last of
    ``n`` samples (resets counted), extrapolated towards the range's ends."""
    sampled = last_t - first_t
    if sampled <= 0:
        return None
    average = sampled / (n - 1)
    threshold = average * 1.1
    to_start, to_end = first_t - start, end - last_t
    if to_start >= threshold:
        to_start = average / 2
    if result > 0 and first_v >= 0:
        to_start = min(to_start, sampled * (first_v / result))
    if to_end >= threshold:
        to_end = average / 2
    return result * (sampled + to_start + to_end) / sampled


class CounterRate:
    """A counter's rate over a sliding window: exactly PromQL's ``rate(x[window])`` evaluated
    at the newest sample (or at ``at``), from the samples inside ``(at - window, at]``.

    A value lower than the one before is a counter reset (a server restart): ``update`` says so,
    and the rate counts across it as Prometheus does.
    """

    def __init__(self, window_s: float = 60.0) -> None:
        self.window_s = window_s
        self._points: deque[Point] = deque()

    def update(self, t: float, value: float) -> bool:
        """Record a sample; return True when the counter went backwards (a server restart)."""
        reset = bool(self._points) and value < self._points[-1].v
        self._points.append(Point(t, value))
        while self._points and self._points[0].t <= t - self.window_s:
            self._points.popleft()
        return reset

    def last(self) -> float | None:
        return self._points[-1].v if self._points else None

    def _inside(self, at: float | None) -> tuple[list[tuple[float, float]], float]:
        if not self._points:
            return [], 0.0
        end = self._points[-1].t if at is None else at
        start = end - self.window_s
        return [(p.t, p.v) for p in self._points if start < p.t <= end], end

    def increase(self, at: float | None = None) -> float | None:
        """``increase(x[window])`` at ``at`` (default: the newest sample). Samples are kept
        for one window behind the newest, so ``at`` must not be earlier than the newest."""
        samples, end = self._inside(at)
        return extrapolated_increase(samples, end - self.window_s, end)

    def rate(self, at: float | None = None) -> float | None:
        """``rate(x[window])`` at ``at`` (default: the newest sample), per second."""
        increase = self.increase(at)
        return None if increase is None else increase / self.window_s


class HistogramWindow:
    """Quantiles over a sliding window: exactly ``histogram_quantile(q, rate(x_bucket[window]))``
    evaluated at the newest scrape (or at ``at``), each bucket's rate taken as PromQL takes it
    from the scrapes inside ``(at - window, at]``."""

    def __init__(self, window_s: float = 60.0) -> None:
        self.window_s = window_s
        self._snaps: deque[tuple[float, dict[float, float]]] = deque()
        self._plain: deque[bool] = deque()  # per scrape: it continues the one before it
        # p50 and p99, on the chart and on the panel, all ask at the newest scrape: the bucket
        # rates are worked out once per (scrape, at), not once per quantile.
        self._memo: tuple[tuple[float | None, float, int], list[tuple[float, float]] | None] = (
            (None, -1.0, -1),
            None,
        )

    def update(self, t: float, hist: Histogram) -> bool:
        """Record a scrape; return True when a bucket went backwards (a server restart)."""
        current = dict(hist.buckets)
        previous = self._snaps[-1][1] if self._snaps else None
        reset = previous is not None and any(
            current.get(le, 0.0) < count for le, count in previous.items()
        )
        self._snaps.append((t, current))
        # Scrapes that just continue the one before (the same buckets, none went down): over
        # a run of them a bucket's increase is its last count less its first.
        self._plain.append(previous is not None and not reset and current.keys() == previous.keys())
        while self._snaps and self._snaps[0][0] <= t - self.window_s:
            self._snaps.popleft()
            self._plain.popleft()
        return reset

    def rates(self, at: float | None = None) -> list[tuple[float, float]] | None:
        """Per bucket bound, its ``rate(x_bucket[window])``; None with under two scrapes."""
        if not self._snaps:
            return None
        key = (at, self._snaps[-1][0], len(self._snaps))
        if self._memo[0] == key:
            return self._memo[1]
        rates = self._rates(at)
        self._memo = (key, rates)
        return rates

    def _rates(self, at: float | None) -> list[tuple[float, float]] | None:
        end = self._snaps[-1][0] if at is None else at
        start = end - self.window_s
        inside = [(t, b) for t, b in self._snaps if start < t <= end]
        if len(inside) < 2:
            return None
        out = []
        first_i = next(i for i, (t, _) in enumerate(self._snaps) if start < t)
        plain = all(itertools.islice(self._plain, first_i + 1, first_i + len(inside)))
        if plain:
            # No reset and no bucket missing inside the window: first and last scrape suffice
            # (the same arithmetic as below, without walking every scrape per bucket).
            (first_t, first), (last_t, last) = inside[0], inside[-1]
            n = len(inside)
            for le, count in last.items():
                increase = _extrapolate(
                    count - first[le], first_t, first[le], last_t, n, start, end
                )
                if increase is not None:
                    out.append((le, increase / self.window_s))
            return sorted(out) or None
        for le in inside[-1][1]:
            increase = extrapolated_increase([(t, b[le]) for t, b in inside if le in b], start, end)
            if increase is not None:
                out.append((le, increase / self.window_s))
        return sorted(out) or None

    def quantile(self, q: float, at: float | None = None) -> float | None:
        rates = self.rates(at)
        if rates is None:
            return None
        return histogram_quantile(q, rates)


def window_label(seconds: float) -> str:
    """60 -> "1m", 10 -> "10s", 3600 -> "1h": how a window is written on screen and in JSON."""
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g}h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s"


# Token rates are shown over a short window, so the number moves with the load you see.
RECENT_RATE_WINDOW_S = 10.0

COUNTER_FIELDS = (
    "prompt_tokens_total",
    "generation_tokens_total",
    "preemptions_total",
    "prefix_cache_hits_total",
    "prefix_cache_queries_total",
)
GAUGE_FIELDS = ("running", "waiting", "kv_cache_usage")
# What the charts draw: gauges as scraped, plus what is derived from counters and histograms.
# The parts of TTFT, kept as p99 series so the screen can say which one grew.
TTFT_PARTS = ("queue", "prefill", "decode")  # a subset of model.LATENCY_KINDS
SERIES = (
    *GAUGE_FIELDS,
    "ttft_p50",
    "ttft_p99",
    "itl_p99",
    "gen_tps",
    "prompt_tps",
    *(f"{part}_p99" for part in TTFT_PARTS),
)


class EngineHistory:
    """Live history of one engine: series over time, counter rates, windowed quantiles.

    ``update`` returns one-line events; a counter or histogram that goes backwards means the
    server restarted (the event says so); rates and quantiles count across the reset as
    PromQL does.
    """

    def __init__(self, window_s: float = 60.0, capacity: int = 3600) -> None:
        self.window_s = window_s
        self.series = {name: RingSeries(capacity) for name in SERIES}
        self.counters = {name: CounterRate(window_s) for name in COUNTER_FIELDS}
        self.latency: dict[str, HistogramWindow] = {}
        # Rates and quantiles over a short window: what the panel and the charts show "now".
        self._recent = {
            name: CounterRate(RECENT_RATE_WINDOW_S)
            for name in ("generation_tokens_total", "prompt_tokens_total")
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
                    " server restarted"
                )
        for kind, hist in snap.histograms.items():
            window = self.latency.setdefault(kind, HistogramWindow(self.window_s))
            if window.update(t, hist):
                events.append(f"{snap.source}: {kind} histogram went backwards: server restarted")
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
            **{f"{part}_p99": self.quantile(part, 0.99) for part in TTFT_PARTS},
        }
        for name in GAUGE_FIELDS:
            derived[name] = getattr(snap, name)
        for name, value in derived.items():
            if value is not None:
                self.series[name].append(t, value)

    def drop_partial(self, started: float) -> None:
        """Forget the derived points (rates, quantiles) of the first window after ``started``:
        they were computed over less than a window (a backfill holds the right ones)."""
        for name, ring in self.series.items():
            if name not in GAUGE_FIELDS:
                ring.drop_before(started + self.window_s)

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
