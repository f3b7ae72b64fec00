"""What users feel, per lane: every inference request of the last minutes, summarised as it
ends.

The gate sees every request, so it counts each one: its queue wait, time to first token
(queue wait included), whole duration, largest gap between chunks and outcome, over the last
1 m and 5 m, answered as p50/p90/p99/max and as goodput for the SLO the caller names (requests
admitted *and* meeting every bound, over all that arrived and ended: refused, failed and
abandoned ones count as misses).

Kept per second (``requestblocks``, ``rolling``): each ended request goes into the block of
the second it arrived in, and each window's running sum with it. Where a window holds few
requests (no second of it more than ``RAW_MAX``, at most ``EXACT_MAX`` in all) it is answered
from the records themselves, interpolated between the two nearest ranks as ``gpuwatch load``
and ``vllm bench serve`` compute theirs; above that from log buckets 1% wide, each quantile
within 0.5% of the exact value. A status read costs the same at 1,000 requests a second as at
10, on the event loop, in about a millisecond: no copy, no thread, no walk over 300,000
records.

Times between streamed chunks (ITL) are too many to keep one by one (a busy node streams
thousands a second): they are always counted in the log buckets, per second of when they
happened. Their max is exact.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, TypeVar, cast

from gpuwatch.adminapi import Goodput, LatencyWindow, Tail
from gpuwatch.gate import requestblocks
from gpuwatch.gate.logsketch import counted, merge, tail
from gpuwatch.gate.requestblocks import Outcome, Question, Record, Requests, judge
from gpuwatch.gate.rolling import Rolling
from gpuwatch.series import window_label

__all__ = ["WINDOWS_S", "ItlSketch", "LaneLatency", "LaneReport", "Outcome", "Record"]

T = TypeVar("T")

WINDOWS_S = (60.0, 300.0)
KEEP_S = max(WINDOWS_S)
# The adaptive controller reads the newest records one by one (``AdaptiveLoop._records``):
# they are kept this long (longer where a lane's queue timeout asks: ``keep_recent``), and
# never more than MAX_RECORDS, a bound on memory whatever the rate.
RECENT_S = 60.0
MAX_RECORDS = 300_000
# Goodput questions (bounds) judged request by request as they end: the newest asked. A new
# one costs one pass over the blocks; the one a dashboard asks every second then costs nothing.
QUESTIONS = 8


class LaneReport(NamedTuple):
    """A lane's ``latency`` and ``goodput`` in ``/admin/status``, by window label."""

    latency: dict[str, LatencyWindow]
    goodput: dict[str, Goodput]


class Gaps:
    """Chunk gaps of one second in log buckets (or a window's sum), and the largest."""

    __slots__ = ("counts", "top")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.top = 0.0

    def merge(self, other: Gaps, sign: int) -> None:
        merge(self.counts, other.counts, sign)


class ItlSketch:
    """Per-second log-bucketed counts of chunk gaps; quantiles over each window."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.seconds: Rolling[Gaps] = Rolling(Gaps, WINDOWS_S)

    def add(self, gaps: Iterable[float]) -> None:
        now = self.clock()
        found = self.seconds.at(now, now)
        assert found is not None  # now is never older than the longest window
        block, sums = found
        values = list(gaps)
        counts = counted(values)
        merge(block.counts, counts)
        block.top = max(block.top, *values) if values else block.top
        for total in sums:
            merge(total.counts, counts)

    def summary(self, window_s: float) -> Tail:
        total, blocks = self.seconds.window(window_s, self.clock())
        return tail(total.counts, max((b.top for b in blocks), default=0.0))


# Answers are reused for this long, so readers polling once a second cost one computation
# between them.
CACHE_S = 1.0


class LaneLatency:
    """One lane's requests of the last ``KEEP_S`` seconds."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        # The newest records one by one, for the adaptive controller (see RECENT_S).
        self.records: deque[Record] = deque(maxlen=MAX_RECORDS)
        self.recent_s = RECENT_S
        self.itl = ItlSketch(clock)
        self.ended: Rolling[Requests] = Rolling(Requests, WINDOWS_S)
        # Requests not yet ended, by id: a status read times them as they are so far. As many
        # as the lane has in flight and queued (and bodies being read), whatever the rate.
        self._live: dict[int, Record] = {}
        # The questions judged as requests end, least recently asked first.
        self._questions: dict[Question, None] = {}
        # Answers of three kinds (summary, goodput, report), each keyed by its kind first.
        self._cache: dict[tuple[Any, ...], tuple[float, object]] = {}

    @property
    def cached_answers(self) -> int:
        """Answers held for reuse (at most one second's worth of distinct questions)."""
        return len(self._cache)

    def keep_recent(self, seconds: float) -> None:
        """Keep the records one by one at least this long (the adaptive controller's window
        and a queue timeout: a request admitted now may have arrived that long ago)."""
        self.recent_s = max(RECENT_S, seconds)

    def start(self, arrived: float | None = None) -> Record:
        now = self.clock()
        record = Record(now if arrived is None else arrived)
        self.records.append(record)
        self._live[id(record)] = record
        horizon = now - self.recent_s
        while self.records and self.records[0].arrived < horizon:
            self.records.popleft()
        return record

    def end(self, record: Record) -> None:
        """``record`` ended (its fields are final): into the block of its arrival second."""
        if self._live.pop(id(record), None) is None:
            return  # ended before, or not this lane's
        found = self.ended.at(record.arrived, self.clock())
        if found is not None:
            requestblocks.add(*found, record, self._questions)

    def _in_flight(self, window_s: float, now: float) -> list[Record]:
        """The requests still in flight that arrived in the window (the same whole seconds
        as the blocks'), not invalid. One older than the longest window is let go: it is in
        no window, and its end will find no block."""
        oldest = int(now) - int(KEEP_S)
        for key in [k for k, r in self._live.items() if int(r.arrived) < oldest]:
            del self._live[key]
        edge = int(now) - int(window_s)
        return [
            r
            for r in self._live.values()
            if min(int(r.arrived), int(now)) >= edge and r.outcome != "invalid"
        ]

    def _hit(self, key: tuple[Any, ...]) -> object | None:
        hit = self._cache.get(key)
        return hit[1] if hit is not None and self.clock() - hit[0] < CACHE_S else None

    def _cached(self, key: tuple[Any, ...], compute: Callable[[], T]) -> T:
        hit = self._hit(key)
        if hit is not None:
            return cast(T, hit)  # stored under this key by this method: of its kind
        now = self.clock()
        value = compute()
        # Keys carry the caller's SLO: answers past their second are dropped, so the cache
        # holds at most what one second of distinct questions asked.
        self._cache = {k: v for k, v in self._cache.items() if now - v[0] < CACHE_S}
        self._cache[key] = (now, value)
        return value

    def _summary(self, window_s: float) -> LatencyWindow:
        now = self.clock()
        total, blocks = self.ended.window(window_s, now)
        live = self._in_flight(window_s, now)
        return requestblocks.summary(total, blocks, live, self.itl.summary(window_s))

    def _ask(self, question: Question) -> None:
        """Judge each request against ``question`` as it ends from now on, and count the
        blocks there are now (``requestblocks.judge``); the least recently asked question
        beyond QUESTIONS is forgotten."""
        if question in self._questions:
            del self._questions[question]
            self._questions[question] = None  # the most recently asked now
            return
        rolling = self.ended
        if len(self._questions) >= QUESTIONS:
            oldest = next(iter(self._questions))
            del self._questions[oldest]
            for block in [*rolling.blocks.values(), *rolling.sums]:
                block.good.pop(oldest, None)
        self._questions[question] = None
        for block in rolling.blocks.values():
            if n := judge(block, question):
                block.good[question] = n
        for i, window_s in enumerate(rolling.windows):
            total, blocks = rolling.window(window_s, self.clock())
            assert total is rolling.sums[i]
            if n := sum(b.good.get(question, 0) for b in blocks):
                total.good[question] = n

    def _goodput(self, window_s: float, ttft_s: float | None, itl_s: float | None) -> Goodput:
        question = (ttft_s or None, itl_s or None)
        self._ask(question)
        total, _ = self.ended.window(window_s, self.clock())
        return requestblocks.goodput(total, question)

    def summary(self, window_s: float) -> LatencyWindow:
        return self._cached(("summary", window_s), lambda: self._summary(window_s))

    def goodput(self, window_s: float, ttft_s: float | None, itl_s: float | None) -> Goodput:
        """Of the requests that arrived in the window and have ended: how many were good."""
        return self._cached(
            ("goodput", window_s, ttft_s, itl_s), lambda: self._goodput(window_s, ttft_s, itl_s)
        )

    def report(self, ttft_s: float | None, itl_s: float | None) -> LaneReport:
        """``/admin/status``'s ``latency`` and ``goodput`` of a lane, over every window: from
        the windows' running sums (or their few records), so computed on the event loop in
        about a millisecond whatever the rate; reused for CACHE_S."""
        return self._cached(
            ("report", ttft_s, itl_s),
            lambda: LaneReport(
                {window_label(w): self._summary(w) for w in WINDOWS_S},
                {window_label(w): self._goodput(w, ttft_s, itl_s) for w in WINDOWS_S},
            ),
        )
