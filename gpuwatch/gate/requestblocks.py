"""The requests of one second, summarised for what ``/admin/status`` asks of them.

A request's record (``Record``) goes into the block of the second it arrived in when it ends
(its fields are final then). A block counts, for its ended requests: outcomes; queue wait,
TTFT and duration in log buckets (``logsketch``, 0.5%) with the exact largest of each; and for
each goodput question asked (the ``ttft_s`` / ``itl_s`` bounds a reader names), how many
answered requests were within both bounds, judged on their own values as they end. Each
window keeps the running sum of its blocks (``rolling``), so a read costs a few hundred
buckets whatever the rate.

A question asked for the first time has no counts for the requests that ended before: those
are judged from each block's pairs (TTFT bucket, largest-gap bucket) of answered requests,
once, so a request within 0.5% of a bound may be judged on the wrong side; every request
ending after that is judged exactly. The pair, not two separate tallies: a request is good
only when both its TTFT and its gaps are within bounds.

Exact where exact is cheap: a block also keeps its records themselves while it has at most
``RAW_MAX``; a window whose blocks all still do, and that holds at most ``EXACT_MAX`` ended
requests, is answered from the records, exactly as before (quantiles interpolated between the
two nearest ranks, every request judged against the bounds). Otherwise from the sums: each
quantile within 0.5% of the value of its rank; counts, maxima and goodput's ended, refused
and failed exact.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from gpuwatch.adminapi import Goodput, LatencyWindow, Tail
from gpuwatch.gate.logsketch import ALPHA, QUANTILES, bucket, bucket_value, counted, merge, tail
from gpuwatch.series import sample_quantile

# invalid: the client sent what no server could serve (a bad body): not counted for goodput.
Outcome = Literal["ok", "refused", "failed", "abandoned", "invalid"]

# A second's ended requests kept one by one up to this many (a burst of a few hundred stays
# exact); a window is answered from them while it holds at most EXACT_MAX: sorting that many
# takes about a millisecond, on the event loop.
RAW_MAX = 256
EXACT_MAX = 4096

# (TTFT bucket, largest-gap bucket) of an answered request; None: no first token / no gap.
Pair = tuple[int | None, int | None]
# The bounds goodput is judged against: (ttft_s, itl_s), None where not judged.
Question = tuple[float | None, float | None]


@dataclass(slots=True)
class Record:
    """One inference request, from arrival at the gate to its end."""

    arrived: float
    outcome: Outcome = "ok"
    queue_wait_s: float | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    max_itl_s: float | None = None


class Requests:
    """Ended requests of one second (a block), or of a window (the sum of its blocks)."""

    __slots__ = (
        "e2e",
        "ended",
        "failed",
        "good",
        "pairs",
        "queue_wait",
        "raw",
        "refused",
        "sketched",
        "top_e2e",
        "top_queue_wait",
        "top_ttft",
        "ttft",
    )

    def __init__(self) -> None:
        self.ended = self.refused = self.failed = 0
        self.queue_wait: dict[int, int] = {}
        self.ttft: dict[int, int] = {}
        self.e2e: dict[int, int] = {}
        # A block's own: its answered requests by pair (for a question first asked now).
        self.pairs: dict[Pair, int] = {}
        # Answered requests within the bounds of each question asked (``judge``).
        self.good: dict[Question, int] = {}
        # Blocks whose records were let go (a block: 0 or 1; a window: how many it holds).
        self.sketched = 0
        # A block's own: its records while it has at most RAW_MAX, and the largest of each
        # measure (a largest value cannot be taken away from a sum: read block by block).
        self.raw: list[Record] | None = []
        self.top_queue_wait = self.top_ttft = self.top_e2e = 0.0

    def count(
        self,
        record: Record,
        wait: int | None,
        ttft: int | None,
        e2e: int | None,
        good: Sequence[Question],
    ) -> None:
        """One ended request, its buckets (and the questions it is good for) worked out once
        by ``add`` for its block and every sum."""
        self.ended += 1
        if record.outcome == "refused":
            self.refused += 1
        elif record.outcome != "ok":
            self.failed += 1  # upstream errors, and clients that gave up waiting
        if wait is not None:
            self.queue_wait[wait] = self.queue_wait.get(wait, 0) + 1
        if ttft is not None:
            self.ttft[ttft] = self.ttft.get(ttft, 0) + 1
        if e2e is not None:
            self.e2e[e2e] = self.e2e.get(e2e, 0) + 1
        for question in good:
            self.good[question] = self.good.get(question, 0) + 1

    def merge(self, other: Requests, sign: int) -> None:
        self.ended += sign * other.ended
        self.refused += sign * other.refused
        self.failed += sign * other.failed
        self.sketched += sign * other.sketched
        merge(self.queue_wait, other.queue_wait, sign)
        merge(self.ttft, other.ttft, sign)
        merge(self.e2e, other.e2e, sign)
        merge(self.good, other.good, sign)


def good_for(record: Record, question: Question) -> bool:
    """Whether an answered request is within the question's bounds (unset: not judged)."""
    ttft_s, itl_s = question
    return not (
        (ttft_s and (record.ttft_s is None or record.ttft_s > ttft_s))
        or (itl_s and record.max_itl_s is not None and record.max_itl_s > itl_s)
    )


def add(
    block: Requests, sums: Sequence[Requests], record: Record, questions: Iterable[Question]
) -> None:
    """An ended request into its second's block and the sums of the windows holding it,
    judged against each question asked."""
    if record.outcome == "invalid":
        return
    wait = None if record.queue_wait_s is None else bucket(record.queue_wait_s)
    ttft = e2e = None  # timed only when answered
    good: list[Question] = []
    if record.outcome == "ok":
        if record.ttft_s is not None:
            ttft = bucket(record.ttft_s)
            block.top_ttft = max(block.top_ttft, record.ttft_s)
        if record.e2e_s is not None:
            e2e = bucket(record.e2e_s)
            block.top_e2e = max(block.top_e2e, record.e2e_s)
        gap = None if record.max_itl_s is None else bucket(record.max_itl_s)
        block.pairs[ttft, gap] = block.pairs.get((ttft, gap), 0) + 1
        good = [q for q in questions if good_for(record, q)]
    if record.queue_wait_s is not None:
        block.top_queue_wait = max(block.top_queue_wait, record.queue_wait_s)
    let_go = False
    if block.raw is not None:
        if len(block.raw) < RAW_MAX:
            block.raw.append(record)
        else:
            block.raw, block.sketched, let_go = None, 1, True
    block.count(record, wait, ttft, e2e, good)
    for total in sums:
        total.count(record, wait, ttft, e2e, good)
        total.sketched += let_go


def exact(total: Requests) -> bool:
    """Whether a window is answered from its records."""
    return total.sketched == 0 and total.ended <= EXACT_MAX


def exact_summary(values: Iterable[float]) -> Tail:
    ordered = sorted(values)
    if not ordered:
        return Tail()
    p50, p90, p99 = (sample_quantile(ordered, q) for _, q in QUANTILES)
    return Tail(len(ordered), p50, p90, p99, ordered[-1])


def summary(
    total: Requests, blocks: Sequence[Requests], live: Sequence[Record], itl: Tail
) -> LatencyWindow:
    """A window's ``latency``: its ended requests (``total``, ``blocks``) and those still in
    flight that arrived in it (``live``, never invalid: timed so far, as a reader sees them).
    It says which regime answered (``exact``) and the sketch's error (``rel_error``: ITL's
    always, the others' when not exact), so a screen never calls an estimate exact."""
    if exact(total):
        recent = [r for b in blocks for r in b.raw or ()] + list(live)
        done = [r for r in recent if r.outcome == "ok"]
        return LatencyWindow(
            requests=len(recent),
            ttft=exact_summary([r.ttft_s for r in done if r.ttft_s is not None]),
            queue_wait=exact_summary(
                [r.queue_wait_s for r in recent if r.queue_wait_s is not None]
            ),
            e2e=exact_summary([r.e2e_s for r in done if r.e2e_s is not None]),
            itl=itl,
            rel_error=ALPHA,
        )
    waits = [r.queue_wait_s for r in live if r.queue_wait_s is not None]
    ttfts = [r.ttft_s for r in live if r.outcome == "ok" and r.ttft_s is not None]
    return LatencyWindow(
        requests=total.ended + len(live),
        ttft=tail(
            counted(ttfts, dict(total.ttft)), max([b.top_ttft for b in blocks] + ttfts, default=0)
        ),
        queue_wait=tail(
            counted(waits, dict(total.queue_wait)),
            max([b.top_queue_wait for b in blocks] + waits, default=0),
        ),
        e2e=tail(total.e2e, max((b.top_e2e for b in blocks), default=0)),
        itl=itl,
        exact=False,
        rel_error=ALPHA,
    )


def _highest(bound: float) -> int:
    """The highest bucket whose value is within ``bound``."""
    b = bucket(bound)
    return b if bucket_value(b) <= bound else b - 1


def judge(block: Requests, question: Question) -> int:
    """How many of a block's answered requests are within the question's bounds: each one
    while it has its records, else by its pair of buckets (one within 0.5% of a bound may be
    judged on the wrong side). For a question asked for the first time: from then on each
    request is judged as it ends (``add``)."""
    if block.raw is not None:
        return sum(1 for r in block.raw if r.outcome == "ok" and good_for(r, question))
    ttft_s, itl_s = question
    top_ttft = None if not ttft_s else _highest(ttft_s)
    top_gap = None if not itl_s else _highest(itl_s)
    return sum(
        n
        for (ttft, gap), n in block.pairs.items()
        if (top_ttft is None or (ttft is not None and ttft <= top_ttft))
        and (top_gap is None or gap is None or gap <= top_gap)
    )


def goodput(total: Requests, question: Question) -> Goodput:
    """Of the requests that arrived in a window and have ended: how many were good. The
    question must have been asked before (``judge``), so the sum counts it: exactly while the
    window's blocks kept their records when it was first asked, and for every request that
    ended after."""
    ended, good = total.ended, total.good.get(question, 0)
    slow = ended - total.refused - total.failed - good
    return Goodput(ended, good, slow, total.refused, total.failed, good / ended if ended else None)
