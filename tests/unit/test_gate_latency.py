"""The gate's per-request record: windows, exact and sketched answers, the answer cache."""

from __future__ import annotations

import random

import pytest

from gpuwatch.adminapi import Goodput, Tail
from gpuwatch.gate.latency import KEEP_S, MAX_RECORDS, RECENT_S, ItlSketch, LaneLatency, Record
from gpuwatch.gate.logsketch import ALPHA, bucket, tail
from gpuwatch.gate.requestblocks import exact_summary
from gpuwatch.series import sample_quantile


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def ended(lane: LaneLatency, arrived: float | None = None, **fields: object) -> Record:
    """A request that arrived at ``arrived`` and ended now with ``fields``."""
    r = lane.start(arrived)
    for key, value in fields.items():
        setattr(r, key, value)
    lane.end(r)
    return r


def test_a_record_ended_late_does_not_hide_the_window() -> None:
    """Regression: a slow upload's record (arrived 80 s ago, ended now) stopped the walk over
    the window, and the last minute read as empty."""
    clock = Clock()
    lane = LaneLatency(clock)
    for i in range(10):
        clock.t = 1000.0 + i
        ended(lane, ttft_s=0.1, e2e_s=0.5)
    clock.t = 1010.0
    ended(lane, 930.0, ttft_s=0.2, e2e_s=80.0)
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
    summary = sketch.summary(300)
    ordered = sorted(gaps)
    assert summary.count == 20000 and summary.max == ordered[-1]
    for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
        exact = sample_quantile(ordered, q)
        # Rank by the nearest sample, value within ALPHA (plus the one-rank difference).
        assert getattr(summary, name) == pytest.approx(exact, rel=ALPHA + 0.005)


def test_answers_are_reused_for_a_second_and_the_cache_stays_small() -> None:
    clock = Clock()
    lane = LaneLatency(clock)
    ended(lane, ttft_s=0.1, e2e_s=0.2)
    first = lane.summary(60)
    ended(lane, ttft_s=0.3, e2e_s=0.4)
    assert lane.summary(60) is first  # within the second: the same answer
    for bound in range(100):  # many callers, each with its own SLO
        lane.goodput(60, 0.01 * (bound + 1), None)
    clock.t += 2
    lane.goodput(60, 1.0, None)
    assert lane.cached_answers == 1
    assert lane.summary(60).requests == 2


def test_a_window_s_summary_and_goodput_whole() -> None:
    """What /admin/status says of a lane, every key: the invalid are not requests, only the
    ok are timed, every request that waited says how long, and goodput counts the ended."""
    clock = Clock()
    lane = LaneLatency(clock)
    clock.t = 1000.0
    cases: list[tuple[float, dict[str, object]]] = [
        (939.0, {"ttft_s": 9.0, "e2e_s": 9.0}),  # the second before the window's first: out
        (950.0, {"queue_wait_s": 0.5, "ttft_s": 0.2, "e2e_s": 1.0, "max_itl_s": 0.05}),  # good
        (951.0, {"ttft_s": 0.6, "e2e_s": 2.0}),  # slow: TTFT past 0.5
        (952.0, {"ttft_s": 0.1, "e2e_s": 2.0, "max_itl_s": 0.2}),  # slow: a gap past 0.1
        (953.0, {"ttft_s": 0.1, "e2e_s": 2.0, "max_itl_s": 0.1}),  # a gap at the bound: good
        (954.0, {"e2e_s": 3.0}),  # ok without a first token (an embedding): slow by TTFT
        (955.0, {"outcome": "refused", "queue_wait_s": 1.5, "e2e_s": 1.5}),
        (956.0, {"outcome": "failed", "e2e_s": 0.5}),
        (957.0, {"outcome": "abandoned", "queue_wait_s": 0.25, "e2e_s": 0.25}),
        (958.0, {"outcome": "invalid", "e2e_s": 0.0}),  # the client's fault: not counted
    ]
    for arrived, fields in cases:
        ended(lane, arrived, **fields)
    running = lane.start(959.0)  # still running: no e2e, not ended
    running.ttft_s = 0.3
    clock.t = 990.0
    lane.itl.add([0.01, 0.01, 0.012])
    clock.t = 1000.0
    summary = lane.summary(60)
    assert summary.requests == 9
    assert summary.ttft.count == 5 and summary.ttft.max == 0.6
    assert summary.queue_wait == exact_summary([0.5, 1.5, 0.25])
    assert summary.e2e == exact_summary([1.0, 2.0, 2.0, 2.0, 3.0])
    assert summary.itl.count == 3 and summary.itl.max == 0.012
    assert lane.goodput(60, 0.5, 0.1) == Goodput(
        ended=8, good=2, slow=3, refused=1, failed=2, ratio=2 / 8
    )
    # Without an SLO every ended ok request is good; an ITL bound alone judges only gaps.
    assert lane.goodput(60, None, None).good == 5
    assert lane.goodput(60, None, 0.1).slow == 1
    assert lane.summary(300).requests == 10
    report = lane.report(0.5, 0.1)
    assert set(report.latency) == set(report.goodput) == {"1m", "5m"}
    assert report.goodput["1m"] == lane.goodput(60, 0.5, 0.1)
    assert report.latency["5m"] == lane.summary(300)
    clock.t = 1300.0  # all but the running one left even the longest window
    assert lane.goodput(300, None, None) == Goodput()
    assert lane.summary(300).requests == 0  # the running one arrived too long ago too


def test_an_empty_summary_says_none_not_zero() -> None:
    empty = Tail(count=0, p50=None, p90=None, p99=None, max=None)
    assert exact_summary([]) == empty
    assert tail({}, 0.0) == empty
    assert LaneLatency(Clock()).summary(60).ttft == empty
    three = exact_summary([3.0, 1.0, 2.0])
    assert (three.count, three.p50, three.max) == (3, 2.0, 3.0)
    assert three.p90 == sample_quantile([1.0, 2.0, 3.0], 0.9)


def test_the_quantiles_by_rank_never_above_the_largest_value() -> None:
    out = tail({bucket(0.01): 90, bucket(0.1): 9, bucket(1.0): 1}, 0.9)
    assert out.count == 100 and out.max == 0.9
    assert out.p50 == pytest.approx(0.01, rel=ALPHA)
    assert out.p90 == pytest.approx(0.01, rel=ALPHA)  # the 90th of 100 is the last 0.01
    assert out.p99 == pytest.approx(0.1, rel=ALPHA)
    # The top bucket's value may exceed the largest gap seen in it: the gap bounds it.
    assert tail({bucket(1.0): 1}, 0.99).p99 == 0.99


def test_a_quantile_s_rank_falls_in_the_bucket_that_reaches_it() -> None:
    out = tail({bucket(0.01): 49, bucket(0.1): 51}, 0.1)
    assert out.p50 == pytest.approx(0.1, rel=ALPHA)  # the 50th gap is the first of 0.1
    out = tail({bucket(0.01): 50, bucket(0.1): 50}, 0.1)
    assert out.p50 == pytest.approx(0.01, rel=ALPHA)


def test_the_itl_sketch_counts_a_second_while_any_of_it_is_in_the_window() -> None:
    clock = Clock()
    sketch = ItlSketch(clock)
    sketch.add([0.5] * 5)  # second 1000
    clock.t = 1001.5
    sketch.add([0.01])  # second 1001
    clock.t = 1002.0
    sketch.add([0.011])  # second 1002
    clock.t = 1060.5
    assert sketch.summary(60).count == 7 and sketch.summary(60).max == 0.5
    clock.t = 1060.99
    assert sketch.summary(60).count == 7  # second 1000 is still partly in the last minute
    clock.t = 1061.0
    assert (sketch.summary(60).count, sketch.summary(60).max) == (2, 0.011)
    clock.t = 1062.0
    assert sketch.summary(60).count == 1
    assert sketch.summary(300).count == 7
    clock.t = 1000.0 + KEEP_S
    assert sketch.summary(300).count == 7  # second 1000 is KEEP_S old: still in
    clock.t += 1
    assert sketch.summary(300).count == 2
    assert len(sketch.seconds.blocks) == 2


def test_records_are_kept_one_by_one_only_as_long_as_the_controller_needs() -> None:
    clock = Clock()
    lane = LaneLatency(clock)
    lane.start(arrived=999.0 - RECENT_S)  # older: dropped at once
    lane.start(arrived=1000.0 - RECENT_S)  # exactly RECENT_S old: kept
    lane.start()
    assert [r.arrived for r in lane.records] == [1000.0 - RECENT_S, 1000.0]
    assert lane.records.maxlen == MAX_RECORDS
    lane.keep_recent(100.0)  # a lane with a long queue timeout asks for more
    lane.start(arrived=910.0)
    assert lane.records[-1].arrived == 910.0 and len(lane.records) == 3
    lane.keep_recent(1.0)  # never under RECENT_S
    assert lane.recent_s == RECENT_S


def test_each_question_has_its_own_cached_answer_for_just_under_a_second() -> None:
    clock = Clock()
    lane = LaneLatency(clock)
    ended(lane, ttft_s=0.4, e2e_s=1.0, max_itl_s=0.2)
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


def test_a_report_answers_its_own_question() -> None:
    lane = LaneLatency()
    ended(lane, ttft_s=0.1, e2e_s=1.0, max_itl_s=0.2)
    strict = lane.report(0.5, 0.1)
    assert strict.goodput["1m"].slow == 1
    loose = lane.report(0.5, None)
    assert loose.goodput["1m"].good == 1
    assert lane.report(0.5, 0.1) is strict and lane.cached_answers == 2


def test_every_refusal_is_counted_once() -> None:
    lane = LaneLatency(Clock())
    for _ in range(3):
        r = ended(lane, outcome="refused", e2e_s=0.1)
    lane.end(r)  # a second end is no second request
    assert lane.goodput(60, None, None).refused == 3
    lane.end(Record(1000.0, "refused", e2e_s=0.1))  # not started here: not this lane's
    assert lane.summary(300).requests == 3
