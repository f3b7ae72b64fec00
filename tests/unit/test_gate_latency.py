"""The gate's exact per-request record: windows, sketch accuracy, the answer cache."""

from __future__ import annotations

import asyncio
import random

import pytest

from gpuwatch.adminapi import Goodput, Tail
from gpuwatch.gate.latency import (
    ALPHA,
    KEEP_S,
    MAX_RECORDS,
    ItlSketch,
    LaneLatency,
    LatencyView,
    Record,
    _bucket,
    exact_summary,
    itl_summary,
)
from gpuwatch.series import sample_quantile


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_a_record_appended_late_does_not_hide_the_window() -> None:
    """Regression: a slow upload's record (arrived 80 s ago, appended now) stopped the walk
    over the window, and the last minute read as empty."""
    clock = Clock()
    lane = LaneLatency(clock)
    for i in range(10):
        clock.t = 1000.0 + i
        r = lane.start()
        r.ttft_s, r.e2e_s = 0.1, 0.5
    clock.t = 1010.0
    late = lane.start(arrived=930.0)
    late.ttft_s, late.e2e_s = 0.2, 80.0
    summary = lane.summary(60)
    assert summary.requests == 10 and summary.ttft.count == 10
    assert lane.goodput(60, 1.0, None).ended == 10
    assert lane.summary(300).requests == 11


def test_the_itl_sketch_is_within_its_relative_accuracy() -> None:
    clock = Clock()
    sketch = ItlSketch(clock)
    rng = random.Random(3)
    gaps = [rng.lognormvariate(-3.5, 1.0) for _ in range(20000)]
    for i in range(0, len(gaps), 500):
        clock.t += 1
        sketch.add(gaps[i : i + 500])
    summary = sketch.summary(120)
    ordered = sorted(gaps)
    assert summary.count == 20000 and summary.max == ordered[-1]
    for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
        exact = sample_quantile(ordered, q)
        # Rank by the nearest sample, value within ALPHA (plus the one-rank difference).
        assert getattr(summary, name) == pytest.approx(exact, rel=ALPHA + 0.005)


def test_answers_are_reused_for_a_second_and_the_cache_stays_small() -> None:
    clock = Clock()
    lane = LaneLatency(clock)
    r = lane.start()
    r.ttft_s, r.e2e_s = 0.1, 0.2
    first = lane.summary(60)
    r2 = lane.start()
    r2.ttft_s, r2.e2e_s = 0.3, 0.4
    assert lane.summary(60) is first  # within the second: the same answer
    for bound in range(100):  # many callers, each with its own SLO
        lane.goodput(60, 0.01 * (bound + 1), None)
    clock.t += 2
    lane.goodput(60, 1.0, None)
    assert lane.cached_answers == 1
    assert lane.summary(60).requests == 2


async def test_a_report_is_one_computation_however_many_ask() -> None:
    """Status readers asking at once share one worker-thread computation (and its answer);
    one that leaves does not cancel it for the others."""
    lane = LaneLatency()
    for i in range(1000):
        r = lane.start()
        r.ttft_s, r.e2e_s = 0.001 * i, 0.002 * i
    leaving = asyncio.create_task(lane.report(None, None))
    await asyncio.sleep(0)  # it has started the computation
    staying = asyncio.create_task(lane.report(None, None))
    leaving.cancel()
    answer = await staying
    assert answer.latency["1m"].ttft.count == 1000
    assert await lane.report(None, None) is answer  # reused within the second
    other = await lane.report(0.5, None)  # another SLO: its own computation
    assert other.goodput["1m"].good == 501 and lane.cached_answers == 2


def test_a_view_does_not_change_with_the_record() -> None:
    clock = Clock()
    lane = LaneLatency(clock)
    lane.start().e2e_s = 0.1
    lane.itl.add([0.01])
    view = lane.view()
    lane.start().e2e_s = 0.2
    lane.itl.add([0.02])
    assert view.summary(60).requests == 1 and view.summary(60).itl.count == 1
    assert lane.view().summary(60).itl.count == 2


def record(arrived: float, outcome: str = "ok", **fields: float | None) -> Record:
    return Record(arrived, outcome, **fields)  # type: ignore[arg-type]


def test_a_window_s_summary_and_goodput_whole() -> None:
    """What /admin/status says of a lane, every key: the invalid are not requests, only the
    ok are timed, every request that waited says how long, and goodput counts the ended."""
    records = [
        record(940.0, ttft_s=9.0, e2e_s=9.0),  # arrived at the window's edge: outside it
        record(950.0, queue_wait_s=0.5, ttft_s=0.2, e2e_s=1.0, max_itl_s=0.05),  # good
        record(951.0, ttft_s=0.6, e2e_s=2.0),  # slow: TTFT past 0.5
        record(952.0, ttft_s=0.1, e2e_s=2.0, max_itl_s=0.2),  # slow: a gap past 0.1
        record(953.0, ttft_s=0.1, e2e_s=2.0, max_itl_s=0.1),  # a gap at the bound: good
        record(954.0, e2e_s=3.0),  # ok without a first token (an embedding): slow by TTFT
        record(955.0, "refused", queue_wait_s=1.5, e2e_s=1.5),
        record(956.0, "failed", e2e_s=0.5),
        record(957.0, "abandoned", queue_wait_s=0.25, e2e_s=0.25),
        record(958.0, "invalid", e2e_s=0.0),  # the client's fault: not counted anywhere
        record(959.0, ttft_s=0.3),  # still running: no e2e, not ended
    ]
    view = LatencyView(records, [(990, {_bucket(0.01): 3}, 0.012)], now=1000.0)
    summary = view.summary(60)
    assert summary.requests == 9
    assert summary.ttft.count == 5 and summary.ttft.max == 0.6
    assert summary.queue_wait == exact_summary([0.5, 1.5, 0.25])
    assert summary.e2e == exact_summary([1.0, 2.0, 2.0, 2.0, 3.0])
    assert summary.itl.count == 3 and summary.itl.max == 0.012
    assert view.goodput(60, 0.5, 0.1) == Goodput(
        ended=8, good=2, slow=3, refused=1, failed=2, ratio=2 / 8
    )
    # Without an SLO every ended ok request is good; an ITL bound alone judges only gaps.
    assert view.goodput(60, None, None).good == 5
    assert view.goodput(60, None, 0.1).slow == 1
    assert view.goodput(1, None, None) == Goodput(
        ended=0, good=0, slow=0, refused=0, failed=0, ratio=None
    )
    report = view.report(0.5, 0.1)
    assert set(report.latency) == set(report.goodput) == {"1m", "5m"}
    assert report.goodput["1m"] == view.goodput(60, 0.5, 0.1)
    assert report.latency["5m"] == view.summary(300)


def test_an_empty_summary_says_none_not_zero() -> None:
    empty = Tail(count=0, p50=None, p90=None, p99=None, max=None)
    assert exact_summary([]) == empty
    assert itl_summary([], 0.0) == empty
    three = exact_summary([3.0, 1.0, 2.0])
    assert (three.count, three.p50, three.max) == (3, 2.0, 3.0)
    assert three.p90 == sample_quantile([1.0, 2.0, 3.0], 0.9)


def test_the_itl_quantiles_by_rank_never_above_the_largest_gap() -> None:
    seconds = [(10, {_bucket(0.01): 90, _bucket(0.1): 9, _bucket(1.0): 1}, 0.9)]
    out = itl_summary(seconds, 0.0)
    assert out.count == 100 and out.max == 0.9
    assert out.p50 == pytest.approx(0.01, rel=ALPHA)
    assert out.p90 == pytest.approx(0.01, rel=ALPHA)  # the 90th of 100 is the last 0.01
    assert out.p99 == pytest.approx(0.1, rel=ALPHA)
    # The top bucket's value may exceed the largest gap seen in it: the gap bounds it.
    assert itl_summary([(10, {_bucket(1.0): 1}, 0.99)], 0.0).p99 == 0.99
    # Two seconds' counts merge; a second wholly before ``since`` is left out (not stopped at).
    seconds = [
        (8, {_bucket(0.5): 5}, 0.5),
        (9, {_bucket(0.01): 1}, 0.01),
        (10, {_bucket(0.01): 1}, 0.011),
    ]
    # A second counts while any of it is after ``since``: [9, 10) is, for 9.0 as for 9.5.
    assert itl_summary(seconds, 9.0) == itl_summary(seconds, 9.5)
    assert itl_summary(seconds, 9.0).count == 2 and itl_summary(seconds, 9.0).max == 0.011
    assert itl_summary(seconds, 10.0).count == 1
    assert itl_summary(seconds, 8.5).count == 7 and itl_summary(seconds, 8.5).max == 0.5


def test_the_itl_sketch_keeps_one_entry_a_second_for_the_longest_window() -> None:
    clock = Clock()
    sketch = ItlSketch(clock)
    sketch.add([0.01, 0.02])
    clock.t += 0.5
    sketch.add([0.03])  # the same second: the same entry
    assert [(s, sum(c.values()), top) for s, c, top in sketch.copy()] == [(1000, 3, 0.03)]
    clock.t = 1000 + KEEP_S
    sketch.add([0.001])
    assert len(sketch.copy()) == 2  # second 1000 is KEEP_S old: still kept
    clock.t += 1
    sketch.add([0.001])
    assert [s for s, _, _ in sketch.copy()] == [1000 + KEEP_S, 1001 + KEEP_S]
    assert sketch.copy()[-1][2] == 0.001  # a new second's largest gap starts from nothing


def test_records_older_than_the_longest_window_are_dropped_and_at_most_max_records_kept() -> None:
    clock = Clock()
    lane = LaneLatency(clock)
    lane.start(arrived=999.0 - KEEP_S)  # older than KEEP_S: dropped at once
    lane.start(arrived=1000.0 - KEEP_S)  # exactly KEEP_S old: kept
    lane.start()
    assert [r.arrived for r in lane.records] == [1000.0 - KEEP_S, 1000.0]
    assert lane.records.maxlen == MAX_RECORDS


def test_each_question_has_its_own_cached_answer_for_just_under_a_second() -> None:
    clock = Clock()
    lane = LaneLatency(clock)
    r = lane.start()
    r.ttft_s, r.e2e_s, r.max_itl_s = 0.4, 1.0, 0.2
    assert lane.goodput(60, 0.5, None).good == 1
    assert lane.goodput(60, 0.3, None).good == 0  # another TTFT bound: not the cached one
    assert lane.goodput(60, None, 0.1).good == 0  # an ITL bound
    assert lane.goodput(300, 0.5, 0.1).slow == 1
    first = lane.summary(60)
    assert lane.summary(300) is not first
    clock.t += 0.999
    assert lane.summary(60) is first
    clock.t += 0.001  # CACHE_S after: computed again
    assert lane.summary(60) is not first
    assert lane.cached_answers == 1  # the others, a second old, were dropped


async def test_a_report_answers_its_own_question() -> None:
    lane = LaneLatency()
    r = lane.start()
    r.ttft_s, r.e2e_s, r.max_itl_s = 0.1, 1.0, 0.2
    strict = await lane.report(0.5, 0.1)
    assert strict.goodput["1m"].slow == 1
    loose = await lane.report(0.5, None)
    assert loose.goodput["1m"].good == 1
    assert await lane.report(0.5, 0.1) is strict and lane.cached_answers == 2


def test_a_quantile_s_rank_falls_in_the_bucket_that_reaches_it() -> None:
    out = itl_summary([(10, {_bucket(0.01): 49, _bucket(0.1): 51}, 0.1)], 0.0)
    assert out.p50 == pytest.approx(0.1, rel=ALPHA)  # the 50th gap is the first of 0.1
    out = itl_summary([(10, {_bucket(0.01): 50, _bucket(0.1): 50}, 0.1)], 0.0)
    assert out.p50 == pytest.approx(0.01, rel=ALPHA)


def test_every_refusal_is_counted() -> None:
    view = LatencyView([record(1.0, "refused", e2e_s=0.1) for _ in range(3)], [], now=2.0)
    assert view.goodput(60, None, None).refused == 3


async def test_questions_asked_at_once_each_get_their_own_answer() -> None:
    lane = LaneLatency()
    r = lane.start()
    r.ttft_s, r.e2e_s = 0.4, 1.0
    strict = asyncio.create_task(lane.report(0.3, None))
    await asyncio.sleep(0)  # its computation is under way
    loose = await lane.report(0.5, None)  # waits for it, then asks its own
    assert loose.goodput["1m"].good == 1
    assert (await strict).goodput["1m"].good == 0


async def test_a_computation_cancelled_with_the_loop_is_dropped_quietly() -> None:
    loop = asyncio.get_running_loop()
    errors: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    lane = LaneLatency()
    lane.start().e2e_s = 1.0
    lane._start(("report", None, None), None, None)
    assert lane._work is not None
    work = lane._work[1]
    work.cancel()
    with pytest.raises(asyncio.CancelledError):
        await work
    await asyncio.sleep(0)
    assert lane._work is None and lane.cached_answers == 0 and errors == []
