"""The gate's exact per-request record: windows, sketch accuracy, the answer cache."""

from __future__ import annotations

import asyncio
import random

import pytest

from gpuwatch.gate.latency import ALPHA, ItlSketch, LaneLatency
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
