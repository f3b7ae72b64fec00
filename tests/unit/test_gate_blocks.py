"""The gate's per-second request blocks and their running window sums (requestblocks.py,
rolling.py): merging, expiry at the window edge, the exact and the sketched regimes, goodput."""

from __future__ import annotations

import random

import pytest

from gpuwatch.gate.latency import QUESTIONS, LaneLatency, Record
from gpuwatch.gate.logsketch import ALPHA, bucket, bucket_value, merge
from gpuwatch.gate.requestblocks import EXACT_MAX, RAW_MAX, Requests, add, exact_summary
from gpuwatch.gate.rolling import Rolling
from gpuwatch.series import sample_quantile


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def answered(lane: LaneLatency, arrived: float, ttft: float, gap: float | None = None) -> None:
    r = lane.start(arrived)
    r.queue_wait_s, r.ttft_s, r.e2e_s, r.max_itl_s = ttft / 10, ttft, 2 * ttft, gap
    lane.end(r)


def fresh_sum(blocks: list[Requests]) -> Requests:
    out = Requests()
    for b in blocks:
        out.merge(b, 1)
    return out


def same(a: Requests, b: Requests) -> bool:
    keys = ("ended", "refused", "failed", "sketched", "queue_wait", "ttft", "e2e", "good")
    return all(getattr(a, k) == getattr(b, k) for k in keys)


def test_each_window_s_running_sum_is_the_merge_of_its_blocks() -> None:
    """Requests ending in any order, into seconds old and new, as time goes and jumps: every
    window's sum stays what merging its blocks afresh gives, and a sum taken away leaves no
    empty bucket behind."""
    rng = random.Random(5)
    clock = Clock()
    lane = LaneLatency(clock)
    for step in range(2000):
        clock.t += rng.choice((0.0, 0.1, 0.7, 3.0, 40.0 if step % 500 == 0 else 0.2))
        r = lane.start(clock.t - rng.choice((0.0, 0.5, 30.0, 90.0, 299.0, 400.0)))
        r.outcome = rng.choice(("ok", "ok", "refused", "failed", "invalid"))
        r.ttft_s, r.e2e_s = rng.lognormvariate(-1, 1), rng.lognormvariate(0, 1)
        r.max_itl_s = rng.choice((None, rng.lognormvariate(-3, 1)))
        lane.end(r)
        if step % 41 == 0:  # a question asked now and then: judged from then on
            lane.goodput(60, rng.choice((0.2, 0.4, None)), rng.choice((0.05, None)))
        if step % 97 == 0:
            for w in (60.0, 300.0):
                total, blocks = lane.ended.window(w, clock.t)
                assert same(total, fresh_sum(blocks)), (step, w)
                assert 0 not in total.ttft.values() and 0 not in total.good.values()
    clock.t += 10_000  # a long idle: every second left every window
    for w in (60.0, 300.0):
        total, blocks = lane.ended.window(w, clock.t)
        assert blocks == [] and same(total, Requests())
    assert lane.ended.blocks == {}


def test_a_second_leaves_a_window_when_none_of_it_is_inside() -> None:
    clock = Clock()
    lane = LaneLatency(clock)
    answered(lane, 1000.9, 0.2)
    clock.t = 1060.999
    assert lane.summary(60).requests == 1  # second 1000 is partly after now - 60
    clock.t = 1061.0
    lane._cache.clear()
    assert lane.summary(60).requests == 0 and lane.goodput(60, None, None).ended == 0
    assert lane.summary(300).requests == 1
    clock.t = 1300.999
    lane._cache.clear()
    assert lane.summary(300).requests == 1
    clock.t = 1301.0
    lane._cache.clear()
    assert lane.summary(300).requests == 0 and lane.ended.blocks == {}


def test_a_request_ending_after_its_second_left_the_minute_counts_in_five() -> None:
    clock = Clock()
    lane = LaneLatency(clock)
    r = lane.start(1000.0)
    clock.t = 1100.0  # a long stream: its second left the last minute while it ran
    assert lane.summary(60).requests == 0 and lane.summary(300).requests == 1  # in flight
    r.ttft_s, r.e2e_s = 0.5, 100.0
    lane.end(r)
    lane._cache.clear()
    assert lane.summary(60).requests == 0 and lane.goodput(60, None, None).ended == 0
    assert lane.goodput(300, None, None).good == 1
    assert lane.summary(300).e2e.max == 100.0
    late = lane.start(700.0)  # arrived before the longest window: in none
    late.e2e_s = 400.0
    lane.end(late)
    assert lane.ended.blocks.keys() == {1000}


def test_a_second_of_raw_max_requests_is_exact_and_one_more_is_sketched() -> None:
    clock = Clock()
    lane = LaneLatency(clock)
    ttfts = [0.05 + 0.001 * i * i for i in range(RAW_MAX + 1)]
    for t in ttfts[:RAW_MAX]:
        answered(lane, 1000.5, t)
    window = lane.summary(60)
    exact = window.ttft
    assert exact == exact_summary(ttfts[:RAW_MAX])  # interpolated between ranks, exactly
    assert (window.exact, window.rel_error, window.error) == (True, ALPHA, None)  # says so
    answered(lane, 1000.5, ttfts[-1])
    lane._cache.clear()
    window = lane.summary(60)
    sketched = window.ttft
    # and says it is not: the stated error is the sketch's
    assert (window.exact, window.error) == (False, ALPHA) and lane.summary(300).error == ALPHA
    (block,) = lane.ended.blocks.values()
    assert block.raw is None and lane.ended.sums[0].sketched == 1
    assert sketched.count == RAW_MAX + 1 and sketched.max == ttfts[-1]  # exact
    ordered = sorted(ttfts)
    for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
        # The value of the nearest rank within ALPHA; the interpolated one is a rank away.
        lo = ordered[int(q * len(ordered)) - 1]
        hi = ordered[int(q * len(ordered))]
        got = getattr(sketched, name)
        assert lo * (1 - ALPHA) <= got <= hi * (1 + ALPHA), (name, got, lo, hi)
    assert sketched.p50 != exact.p50  # not the exact answer any more: the sketch's
    clock.t = 1061.0  # the sketched second left the minute: the window is exact again
    answered(lane, 1061.0, 0.3)
    lane._cache.clear()
    assert lane.summary(60).ttft == exact_summary([0.3]) and lane.summary(60).exact
    assert not lane.summary(300).exact
    assert lane.ended.sums[0].sketched == 0 and lane.ended.sums[1].sketched == 1


def test_a_window_of_more_than_exact_max_requests_is_sketched() -> None:
    clock = Clock()
    lane = LaneLatency(clock)
    per_second = EXACT_MAX // 32
    assert per_second <= RAW_MAX
    for s in range(32):
        clock.t = 1000.0 + s
        for i in range(per_second):
            answered(lane, 1000.0 + s, 0.1 + 0.0001 * i)
    clock.t = 1040.0
    total, _ = lane.ended.window(60, clock.t)
    assert total.ended == EXACT_MAX and total.sketched == 0
    exact = lane.summary(60).ttft
    assert exact.p50 == sample_quantile(sorted(0.1 + 0.0001 * i for i in range(per_second)), 0.5)
    assert lane.summary(60).exact
    answered(lane, 1040.0, 0.1)
    lane._cache.clear()
    over = lane.summary(60).ttft
    assert over.count == EXACT_MAX + 1 and over.p50 == pytest.approx(exact.p50, rel=ALPHA)
    assert lane.summary(60).error == ALPHA  # no second over RAW_MAX, but too many in all


def sketched_lane(records: list[tuple[str, float | None, float | None]]) -> LaneLatency:
    """A lane whose one second holds RAW_MAX + len(records) ended requests (so it answers
    from its sketch): ``records`` (outcome, TTFT, largest gap) and filler refusals."""
    lane = LaneLatency(Clock())
    for outcome, ttft, gap in records:
        r = lane.start(1000.0)
        r.outcome, r.ttft_s, r.max_itl_s, r.e2e_s = outcome, ttft, gap, 1.0  # type: ignore[assignment]
        lane.end(r)
    for _ in range(RAW_MAX):
        r = lane.start(1000.0)
        r.outcome, r.e2e_s = "refused", 0.01
        lane.end(r)
    assert lane.ended.sums[0].sketched == 1
    return lane


def test_sketched_goodput_judges_each_request_on_both_bounds_at_once() -> None:
    lane = sketched_lane(
        [
            ("ok", 0.2, 0.05),  # good
            ("ok", 0.9, 0.05),  # slow by TTFT
            ("ok", 0.2, 0.5),  # slow by a gap
            ("ok", 0.9, 0.5),  # slow by both: one slow request, not two
            ("ok", None, None),  # no first token: slow when TTFT is judged
            ("ok", 0.2, None),  # no gap (not streamed): not judged on ITL
            ("failed", 0.1, 0.01),
            ("abandoned", None, None),
        ]
    )
    g = lane.goodput(60, 0.5, 0.1)
    assert (g.ended, g.good, g.slow, g.refused, g.failed) == (RAW_MAX + 8, 2, 4, RAW_MAX, 2)
    assert g.ratio == 2 / (RAW_MAX + 8)
    assert lane.goodput(60, None, 0.1).good == 4  # TTFT not judged
    assert lane.goodput(60, 0.5, None).good == 3  # gaps not judged
    assert lane.goodput(60, None, None).good == 6


def test_sketched_goodput_misjudges_only_within_alpha_of_a_bound() -> None:
    bound = 0.5
    near = [bound * (1 + f) for f in (-0.02, -0.011, -0.006, 0.006, 0.011, 0.02)]
    lane = sketched_lane([("ok", t, None) for t in near])
    good = lane.goodput(60, bound, None).good
    assert good == 3  # each more than ALPHA from the bound: on the right side
    # And whatever the bound, the count is off by no more than the requests within ALPHA.
    rng = random.Random(2)
    ttfts = [rng.uniform(0.1, 1.0) for _ in range(400)]
    lane = sketched_lane([("ok", t, None) for t in ttfts])
    for bound in (0.2, 0.33, 0.5, 0.77):
        truth = sum(1 for t in ttfts if t <= bound)
        close = sum(1 for t in ttfts if abs(t - bound) <= ALPHA * bound)
        assert abs(lane.goodput(60, bound, None).good - truth) <= close


def test_in_flight_requests_count_in_the_sketched_window_as_they_are_so_far() -> None:
    lane = sketched_lane([("ok", 0.2, None)])
    running = lane.start(1000.0)
    running.queue_wait_s, running.ttft_s = 3.0, 4.0
    summary = lane.summary(60)
    assert summary.requests == RAW_MAX + 2
    assert summary.ttft.count == 2 and summary.ttft.max == 4.0
    assert summary.queue_wait.count == 1 and summary.queue_wait.max == 3.0
    assert summary.e2e.count == 1  # only the ended have a duration
    assert lane.goodput(60, None, None).ended == RAW_MAX + 1  # only the ended are judged


def test_a_sum_taken_away_from_itself_is_empty() -> None:
    rolling: Rolling[Requests] = Rolling(Requests, (60.0, 300.0))
    found = rolling.at(1000.2, 1000.5)
    assert found is not None
    block, sums = found
    assert len(sums) == 2
    questions = [(0.5, None), (0.1, None)]
    add(block, sums, Record(1000.2, "ok", 0.1, 0.2, 0.3, 0.01), questions)
    add(block, sums, Record(1000.2, "invalid", e2e_s=0.1), questions)  # not counted
    assert block.good == sums[0].good == {(0.5, None): 1}
    total = fresh_sum([block])
    total.merge(block, -1)
    assert same(total, Requests())
    assert rolling.at(600.0, 1000.5) is None  # older than the longest window


def test_a_question_asked_before_is_judged_exactly_as_requests_end() -> None:
    """In a sketched window a bound first asked now is judged by buckets for the requests
    that ended before; from then on each request is judged by its own values."""
    bound = 0.5
    lane = sketched_lane([("ok", bound * 1.004, None)])  # within ALPHA: its bucket's value
    first = lane.goodput(60, bound, None).good  # is judged, on either side
    r = lane.start(1000.0)
    r.ttft_s, r.e2e_s = bound * 1.004, 1.0
    lane.end(r)  # over the bound by 0.4%: slow, exactly
    lane._cache.clear()
    again = lane.goodput(60, bound, None)
    assert again.good == first and again.slow == 2 - first


def test_only_the_newest_questions_are_kept() -> None:
    lane = sketched_lane([("ok", 0.2, None)])
    for n in range(QUESTIONS + 3):
        assert lane.goodput(60, 1.0 + n, None).good == 1
    kept = set(lane.ended.sums[0].good)
    assert len(kept) == QUESTIONS and (1.0, None) not in kept
    assert all(set(b.good) <= kept for b in lane.ended.blocks.values())
    lane._cache.clear()
    assert lane.goodput(60, 1.0, None).good == 1  # asked again: counted again


def test_a_second_at_a_window_s_edge_is_in_it_and_one_before_is_not() -> None:
    """At 1000.5 the minute's oldest second is 940 and five minutes' is 700 (part of each is
    after now - w): each is in its window's sum, the second before is not."""
    rolling: Rolling[Requests] = Rolling(Requests, (60.0, 300.0))
    assert rolling.at(699.9, 1000.5) is None  # the very first call: already too old
    at_five = rolling.at(700.0, 1000.5)
    assert at_five is not None and at_five[1] == [rolling.sums[1]]
    at_minute = rolling.at(940.0, 1000.5)
    assert at_minute is not None and at_minute[1] == rolling.sums
    before = rolling.at(939.9, 1000.5)
    assert before is not None and before[1] == [rolling.sums[1]]


def test_the_longest_window_decides_what_is_too_old_whatever_the_windows() -> None:
    rolling: Rolling[Requests] = Rolling(Requests, (10.0, 60.0, 300.0))
    found = rolling.at(800.0, 1000.5)  # older than two windows, inside the longest
    assert found is not None and found[1] == [rolling.sums[2]]


def test_second_zero_counts_when_a_window_s_edge_is_zero() -> None:
    """A clock that starts at 0 (a simulation): at 60.5 the minute's oldest second is 0."""
    rolling: Rolling[Requests] = Rolling(Requests, (60.0, 300.0))
    found = rolling.at(0.0, 60.5)
    assert found is not None and found[1] == rolling.sums
    block, sums = found
    add(block, sums, Record(0.0, "ok", ttft_s=0.1, e2e_s=0.2), [])
    total, blocks = rolling.window(60, 60.5)
    assert total.ended == 1 and blocks == [block]
    five: Rolling[Requests] = Rolling(Requests, (60.0, 300.0))
    found = five.at(0.0, 300.5)  # five minutes' oldest second is 0
    assert found is not None and found[1] == [five.sums[1]]


def sketched_waits(lane: LaneLatency, second: float, waits: list[float]) -> None:
    """``waits`` refused requests (each with its queue wait) in ``second``, past RAW_MAX."""
    for wait in waits:
        r = lane.start(second)
        r.outcome, r.queue_wait_s = "refused", wait
        lane.end(r)


def test_a_sketched_window_counts_each_queue_wait_and_forgets_those_that_left() -> None:
    clock = Clock()
    lane = LaneLatency(clock)
    waits = [0.2] * (RAW_MAX // 2) + [0.4] * (RAW_MAX // 2 + 1)
    sketched_waits(lane, 1000.0, waits)
    window = lane.summary(60)
    assert not window.exact
    assert window.queue_wait.count == RAW_MAX + 1 and window.queue_wait.max == 0.4
    # Rank 129 of 257 is a 0.4 (128 waited 0.2): each wait counted once, in its own bucket.
    assert window.queue_wait.p50 == pytest.approx(0.4, rel=ALPHA)
    clock.t = 1030.0
    sketched_waits(lane, 1030.0, [0.1] * (RAW_MAX + 1))
    clock.t = 1061.0  # second 1000 left the minute: its waits are taken out of the sum
    lane._cache.clear()
    window = lane.summary(60)
    assert not window.exact and window.queue_wait.count == RAW_MAX + 1
    assert window.queue_wait.p99 == pytest.approx(0.1, rel=ALPHA)
    assert window.queue_wait.max == 0.1
    assert lane.summary(300).queue_wait.count == 2 * (RAW_MAX + 1)


def test_a_sketched_window_s_maxima_are_exact_below_a_second() -> None:
    lane = sketched_lane([("ok", 0.2, 0.01)])
    window = lane.summary(60)
    # Every value under a second: each maximum is the largest seen, not a starting value.
    assert (window.ttft.max, window.e2e.max, window.queue_wait.max) == (0.2, 1.0, None)
    assert window.ttft.p99 == 0.2  # never above the exact largest
    only = LaneLatency(Clock())
    sketched_waits(only, 1000.0, [0.25] * (RAW_MAX + 1))
    assert only.summary(60).queue_wait.max == 0.25 and only.summary(60).e2e.max is None


def test_a_sketched_window_reports_the_itl_sketch_and_skips_untimed_live_requests() -> None:
    lane = sketched_lane([("ok", 0.2, None)])
    lane.itl.add([0.01, 0.02, 0.03])
    lane.start(1000.0)  # in flight, no first token yet: no TTFT to count
    window = lane.summary(60)
    assert not window.exact and window.itl == lane.itl.summary(60) and window.itl.count == 3
    assert window.ttft.count == 1 and window.requests == RAW_MAX + 2


def test_the_exact_regime_s_quantiles_are_interpolated_between_ranks() -> None:
    clock = Clock()
    lane = LaneLatency(clock)
    ttfts = [0.01 * i * i for i in range(1, 41)]
    for t in ttfts:
        answered(lane, 1000.5, t)
    got = lane.summary(60).ttft
    ordered = sorted(ttfts)
    want = [sample_quantile(ordered, q) for q in (0.5, 0.9, 0.99)]
    assert [got.p50, got.p90, got.p99] == want and got.max == ordered[-1] and got.count == 40


def test_a_request_exactly_at_a_bound_is_good_exact_or_sketched() -> None:
    """Within the bound means at most the bound: judged on its own values (exact, or ending
    after the question) and by buckets (a bound that is a bucket's value holds that bucket)."""
    bound = bucket_value(bucket(0.5))
    assert bucket(bound) == bucket(0.5)
    exact_lane = LaneLatency(Clock())
    answered(exact_lane, 1000.0, bound, bound)
    assert exact_lane.goodput(60, bound, bound).good == 1
    # First asked once the second was sketched: judged by the pair of buckets.
    lane = sketched_lane([("ok", bound, bound)])
    assert lane.goodput(60, bound, None).good == 1
    assert lane.goodput(60, None, bound).good == 1
    assert lane.goodput(60, bound, bound).good == 1


def test_a_bound_between_bucket_values_holds_the_bucket_below() -> None:
    b = bucket(0.5)
    bound = bucket_value(b) * (1 - ALPHA / 2)  # in bucket b, under that bucket's value
    assert bucket(bound) == b and bucket_value(b) > bound
    lane = sketched_lane([("ok", bucket_value(b - 1), None), ("ok", bucket_value(b), None)])
    assert lane.goodput(60, bound, None).good == 1


def test_merging_counts_of_zero_leaves_nothing_behind() -> None:
    into = {3: 2}
    merge(into, {3: 2, 4: 0}, -1)
    assert into == {}
    merge(into, {5: 0})
    assert into == {}
