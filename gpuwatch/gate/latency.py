"""What users feel, exactly: per lane, every inference request of the last minutes.

The gate sees every request, so it does not estimate: each one's queue wait, time to first
token (queue wait included) and whole duration are kept, and their p50/p90/p99/max over the
last 1 m and 5 m come from the samples themselves, interpolated between the two nearest ranks
as ``gpuwatch load`` and ``vllm bench serve`` compute theirs.

Times between streamed chunks (ITL) are too many to keep one by one (a busy node streams
thousands a second), so they go into a log-bucketed sketch per second whose buckets are 1%
wide: its quantiles are within 0.5% of the exact value (DDSketch's relative-accuracy
guarantee), at a fixed cost per chunk. Its max is exact.

Each request's outcome is kept too, so the admin API answers goodput for the SLO the caller
names: requests admitted *and* meeting every bound, over all that arrived and ended (refused,
failed and abandoned ones count as misses).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, TypeVar, cast

from gpuwatch.adminapi import Goodput, LatencyWindow, Tail
from gpuwatch.series import sample_quantile, window_label

T = TypeVar("T")

WINDOWS_S = (60.0, 300.0)
KEEP_S = max(WINDOWS_S)
# A bound on memory whatever the rate: at 1,000 requests/s the 5-minute window is 300,000.
MAX_RECORDS = 300_000
# The sketch: bucket i holds values in (GAMMA**(i-1), GAMMA**i]; the midpoint estimate is
# within ALPHA of any value in the bucket.
ALPHA = 0.005
GAMMA = (1 + ALPHA) / (1 - ALPHA)
_LOG_GAMMA = math.log(GAMMA)
_ITL_FLOOR_S = 1e-6  # gaps shorter than a microsecond share the lowest bucket

# invalid: the client sent what no server could serve (a bad body): not counted for goodput.
Outcome = Literal["ok", "refused", "failed", "abandoned", "invalid"]
QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))


@dataclass
class Record:
    """One inference request, from arrival at the gate to its end."""

    arrived: float
    outcome: Outcome = "ok"
    queue_wait_s: float | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    max_itl_s: float | None = None


def exact_summary(values: Iterable[float]) -> Tail:
    ordered = sorted(values)
    if not ordered:
        return Tail()
    p50, p90, p99 = (sample_quantile(ordered, q) for _, q in QUANTILES)
    return Tail(len(ordered), p50, p90, p99, ordered[-1])


class LaneReport(NamedTuple):
    """A lane's ``latency`` and ``goodput`` in ``/admin/status``, by window label."""

    latency: dict[str, LatencyWindow]
    goodput: dict[str, Goodput]


def _bucket(value: float) -> int:
    return math.ceil(math.log(max(value, _ITL_FLOOR_S)) / _LOG_GAMMA)


def _bucket_value(index: int) -> float:
    # The point that is within ALPHA of every value in (GAMMA**(i-1), GAMMA**i].
    return 2 * GAMMA**index / (GAMMA + 1)


class ItlSketch:
    """Per-second log-bucketed counts of chunk gaps; quantiles over any recent window."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._seconds: deque[tuple[int, dict[int, int], float]] = deque()  # (second, counts, max)

    def add(self, gaps: Iterable[float]) -> None:
        now = int(self.clock())
        if not self._seconds or self._seconds[-1][0] != now:
            self._seconds.append((now, {}, 0.0))
            while self._seconds and self._seconds[0][0] < now - KEEP_S:
                self._seconds.popleft()
        second, counts, biggest = self._seconds[-1]
        for gap in gaps:
            b = _bucket(gap)
            counts[b] = counts.get(b, 0) + 1
            biggest = max(biggest, gap)
        self._seconds[-1] = (second, counts, biggest)

    def copy(self) -> list[tuple[int, dict[int, int], float]]:
        """The seconds as they are now: only the last one's counts still change."""
        seconds = list(self._seconds)
        if seconds:
            second, counts, top = seconds[-1]
            seconds[-1] = (second, dict(counts), top)
        return seconds

    def summary(self, window_s: float) -> Tail:
        return itl_summary(self._seconds, self.clock() - window_s)


def itl_summary(seconds: Iterable[tuple[int, dict[int, int], float]], since: float) -> Tail:
    """Quantiles of the gaps counted in the seconds after ``since``."""
    merged: dict[int, int] = {}
    biggest = 0.0
    for second, counts, top in seconds:
        if second + 1 <= since:
            continue
        biggest = max(biggest, top)
        for b, n in counts.items():
            merged[b] = merged.get(b, 0) + n
    total = sum(merged.values())
    if not total:
        return Tail()
    ordered = sorted(merged.items())
    found: list[float | None] = []
    for _, q in QUANTILES:
        rank, seen = max(1, math.ceil(q * total)), 0
        value = None
        for b, n in ordered:
            seen += n
            if seen >= rank:
                value = min(_bucket_value(b), biggest)
                break
        found.append(value)
    p50, p90, p99 = found
    return Tail(total, p50, p90, p99, biggest)


# A status read walks and sorts every sample in its window (about 250 ms at 300,000 records):
# answers are reused for this long, so readers polling once a second cost one computation
# between them, and the computation runs in a worker thread (``LaneLatency.report``).
CACHE_S = 1.0


class LatencyView:
    """A lane's record as it was at ``now``, to be read anywhere (a worker thread) while the
    event loop goes on writing the record itself.

    The copy is of references, taken on the loop in one C-level step (about 10 ms at 300,000
    records, against 250 ms to compute on them). Sharing the records is safe because a record
    is final once its ``e2e_s`` is set (``Exchange.end`` writes it last, and nothing writes a
    record after): an ended one never changes, and one still in flight is read as the loop
    left it at some instant, one field at a time, as any reader a moment later would see it.
    """

    def __init__(
        self,
        records: list[Record],
        itl: list[tuple[int, dict[int, int], float]],
        now: float,
    ) -> None:
        self.records = records
        self.itl = itl
        self.now = now

    def _since(self, window_s: float) -> list[Record]:
        """The records that arrived in the window. Records are appended when a request's body
        has been read, which can be long after it arrived (a slow upload), so the order is
        nearly, not strictly, by arrival: every record is looked at."""
        since = self.now - window_s
        return [r for r in self.records if r.arrived > since]

    def summary(self, window_s: float) -> LatencyWindow:
        recent = [r for r in self._since(window_s) if r.outcome != "invalid"]
        done = [r for r in recent if r.outcome == "ok"]
        return LatencyWindow(
            requests=len(recent),
            ttft=exact_summary([r.ttft_s for r in done if r.ttft_s is not None]),
            queue_wait=exact_summary(
                [r.queue_wait_s for r in recent if r.queue_wait_s is not None]
            ),
            e2e=exact_summary([r.e2e_s for r in done if r.e2e_s is not None]),
            itl=itl_summary(self.itl, self.now - window_s),
        )

    def goodput(self, window_s: float, ttft_s: float | None, itl_s: float | None) -> Goodput:
        """Of the requests that arrived in the window and have ended: how many were good."""
        ended = [r for r in self._since(window_s) if r.e2e_s is not None and r.outcome != "invalid"]
        good = slow = refused = failed = 0
        for r in ended:
            if r.outcome == "refused":
                refused += 1
            elif r.outcome != "ok":
                failed += 1  # upstream errors, and clients that gave up waiting
            elif (ttft_s and (r.ttft_s is None or r.ttft_s > ttft_s)) or (
                itl_s and r.max_itl_s is not None and r.max_itl_s > itl_s
            ):
                slow += 1
            else:
                good += 1
        total = len(ended)
        return Goodput(total, good, slow, refused, failed, good / total if total else None)

    def report(self, ttft_s: float | None, itl_s: float | None) -> LaneReport:
        """``/admin/status``'s ``latency`` and ``goodput`` of a lane, over every window."""
        return LaneReport(
            {window_label(w): self.summary(w) for w in WINDOWS_S},
            {window_label(w): self.goodput(w, ttft_s, itl_s) for w in WINDOWS_S},
        )


class LaneLatency:
    """One lane's requests of the last ``KEEP_S`` seconds."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.records: deque[Record] = deque(maxlen=MAX_RECORDS)
        self.itl = ItlSketch(clock)
        # Answers of three kinds (summary, goodput, report), each keyed by its kind first.
        self._cache: dict[tuple[Any, ...], tuple[float, object]] = {}
        # The report being computed in a worker thread, and for which question: one at a time
        # per lane, shared by every reader asking the same.
        self._work: tuple[tuple[Any, ...], asyncio.Future[LaneReport]] | None = None

    @property
    def cached_answers(self) -> int:
        """Answers held for reuse (at most one second's worth of distinct questions)."""
        return len(self._cache)

    def _hit(self, key: tuple[Any, ...]) -> object | None:
        hit = self._cache.get(key)
        return hit[1] if hit is not None and self.clock() - hit[0] < CACHE_S else None

    def _store(self, key: tuple[Any, ...], at: float, value: object) -> None:
        # Keys carry the caller's SLO: answers past their second are dropped, so the cache
        # holds at most what one second of distinct questions asked.
        now = self.clock()
        self._cache = {k: v for k, v in self._cache.items() if now - v[0] < CACHE_S}
        self._cache[key] = (at, value)

    def _cached(self, key: tuple[Any, ...], compute: Callable[[], T]) -> T:
        hit = self._hit(key)
        if hit is not None:
            return cast(T, hit)  # stored under this key by this method: of its kind
        now = self.clock()
        value = compute()
        self._store(key, now, value)
        return value

    def view(self) -> LatencyView:
        """The record as it is now, for reading elsewhere (see LatencyView)."""
        return LatencyView(list(self.records), self.itl.copy(), self.clock())

    def start(self, arrived: float | None = None) -> Record:
        record = Record(self.clock() if arrived is None else arrived)
        self.records.append(record)
        horizon = self.clock() - KEEP_S
        while self.records and self.records[0].arrived < horizon:
            self.records.popleft()
        return record

    def summary(self, window_s: float) -> LatencyWindow:
        return self._cached(("summary", window_s), lambda: self.view().summary(window_s))

    def goodput(self, window_s: float, ttft_s: float | None, itl_s: float | None) -> Goodput:
        """Of the requests that arrived in the window and have ended: how many were good."""
        return self._cached(
            ("goodput", window_s, ttft_s, itl_s),
            lambda: self.view().goodput(window_s, ttft_s, itl_s),
        )

    async def report(self, ttft_s: float | None, itl_s: float | None) -> LaneReport:
        """``LatencyView.report`` off the event loop: computed in a worker thread from a view
        taken here, so a status read costs the proxy a copy of references, never the sort of
        300,000 records. Reused for CACHE_S; one computation per lane at a time, shared by
        every reader asking the same (a reader that leaves does not cancel it)."""
        key = ("report", ttft_s, itl_s)
        while True:
            hit = self._hit(key)
            if hit is not None:
                return cast(LaneReport, hit)  # stored under a "report" key: a report
            if self._work is None:
                self._start(key, ttft_s, itl_s)
            assert self._work is not None
            work_key, work = self._work
            value = await asyncio.shield(work)
            if work_key == key:
                return value
            # Another question's answer: wait for it, then ask ours (one thread per lane).

    def _start(self, key: tuple[Any, ...], ttft_s: float | None, itl_s: float | None) -> None:
        view = self.view()
        work = asyncio.ensure_future(asyncio.to_thread(view.report, ttft_s, itl_s))
        self._work = (key, work)

        def done(finished: asyncio.Future[LaneReport]) -> None:
            self._work = None
            if not finished.cancelled() and finished.exception() is None:
                self._store(key, view.now, finished.result())

        work.add_done_callback(done)
