from __future__ import annotations

import math

import pytest

from gpuwatch.model import EngineSnapshot, Histogram
from gpuwatch.series import (
    SERIES,
    CounterRate,
    EngineHistory,
    HistogramError,
    Point,
    RingSeries,
    extrapolated_increase,
    histogram_quantile,
    sample_quantile,
    window_label,
)


def test_ring_keeps_recent_points_and_downsamples_older() -> None:
    ring = RingSeries(capacity=10, coarse_every=5, coarse_capacity=3)
    for t in range(40):
        ring.append(float(t), float(t))
    assert [p.t for p in ring.fine] == [float(t) for t in range(30, 40)]
    # 30 points left the fine ring: 6 coarse averages, of which the newest 3 are kept.
    assert [p.v for p in ring.coarse] == [17.0, 22.0, 27.0]
    pts = ring.points(since=25)
    assert pts[0].v == 27.0 and pts[-1].v == 39.0


def test_counter_rate_is_promql_rate_over_the_window() -> None:
    c = CounterRate(window_s=10)
    for t in range(0, 31, 5):
        c.update(float(t), t * 4.0)
    # rate(x[10s]) at t=30 sees (20, 30]: t=25 and t=30 (20 is outside: the range is left-open).
    # Increase 20 over 5 s, extrapolated 5 s back to the range start (under 1.1 intervals).
    assert c.increase() == pytest.approx(40.0)
    assert c.rate() == pytest.approx(4.0)
    # At t=32, (22, 32]: the same two samples, 3 s to the start and 2 s to the end: 20 * 10/5.
    assert c.increase(at=32) == pytest.approx(40.0)
    # At t=36, (26, 36] holds one sample: no rate, as in PromQL.
    assert c.increase(at=36) is None


def test_counter_rate_extrapolates_no_further_than_zero() -> None:
    c = CounterRate(window_s=60)
    c.update(100, 0.0)
    c.update(101, 10.0)
    # The series starts inside the range: half an interval back, but not past zero (0 s here).
    assert c.increase() == pytest.approx(10.0)
    c2 = CounterRate(window_s=60)
    c2.update(100, 5.0)
    c2.update(101, 15.0)
    # Zero would be 0.5 s back, the half interval 0.5 s too: 10 * 1.5 / 1.
    assert c2.increase() == pytest.approx(15.0)


def test_counter_reset_is_detected_and_counted_across() -> None:
    c = CounterRate(window_s=60)
    c.update(0, 100)
    c.update(1, 200)
    assert c.update(2, 5) is True
    # As PromQL: 5 - 100, plus 200 for the reset = 105 over 2 s, extrapolated half an interval
    # back (the range starts 58 s before the first sample): 105 * 2.5 / 2, divided by 60 s.
    assert c.increase() == pytest.approx(131.25)
    assert c.rate() == pytest.approx(131.25 / 60)


def _snap(gen: float, ttft_count: float) -> EngineSnapshot:
    s = EngineSnapshot("http://x/metrics", "vllm", "m", running=3, generation_tokens_total=gen)
    s.histograms["ttft"] = Histogram(((0.5, ttft_count), (math.inf, ttft_count)))
    return s


def test_engine_history_reports_a_counter_going_backwards() -> None:
    h = EngineHistory(window_s=60)
    assert h.update(0, _snap(600, 10)) == []
    assert h.update(1, _snap(700, 12)) == []
    assert h.update(2, _snap(800, 14)) == []
    # 10 s window: 200 tokens over 2 s, extrapolated half an interval back: 250 / 10 s.
    assert h.rate("generation_tokens_total") == pytest.approx(25.0)
    events = h.update(3, _snap(10, 1))
    assert len(events) == 2
    assert "generation_tokens_total went backwards (800 -> 10)" in events[0]
    assert "server restarted" in events[0]
    assert [p.v for p in h.series["running"].points()] == [3, 3, 3, 3]
    assert h.series["ttft_p50"].last() is not None


def reference_rates(
    scrapes: list[tuple[float, dict[float, float]]], window: float, end: float
) -> list[tuple[float, float]] | None:
    """Each bucket's rate walked scrape by scrape through extrapolated_increase."""
    start = end - window
    inside = [(t, b) for t, b in scrapes if start < t <= end]
    if len(inside) < 2:
        return None
    out = []
    for le in inside[-1][1]:
        samples = [(t, b[le]) for t, b in inside if le in b]
        increase = extrapolated_increase(samples, start, end)
        if increase is not None:
            out.append((le, increase / window))
    return sorted(out) or None


def test_bucket_rates_equal_a_walk_through_every_scrape_and_are_worked_out_once() -> None:
    """HistogramWindow.rates: from the first and last scrape when nothing reset, walking them
    all otherwise, remembered per scrape; always what the walk through every scrape gives,
    with resets (a restart) and a bucket missing from a scrape among them."""
    import random

    from gpuwatch.series import HistogramWindow

    bounds = (0.1, 1.0, math.inf)
    for seed in range(30):
        rng = random.Random(seed)
        window = HistogramWindow(10.0)
        scrapes: list[tuple[float, dict[float, float]]] = []
        counts = [0.0, 0.0, 0.0]
        t = 0.0
        for _ in range(60):
            t += rng.choice([0.5, 1.0, 1.0, 2.5])
            if rng.random() < 0.05:
                counts = [0.0, 0.0, 0.0]  # the server restarted
            for b in range(3):
                counts[b] += rng.randint(0, 5)
            cumulative = dict(
                zip(bounds, (counts[0], counts[0] + counts[1], sum(counts)), strict=True)
            )
            if rng.random() < 0.05:
                del cumulative[0.1]  # a scrape without one bucket
            scrapes.append((t, cumulative))
            window.update(t, Histogram(tuple(cumulative.items())))
            expected = reference_rates(scrapes, 10.0, t)  # at the newest scrape
            assert window.rates() == expected  # the same arithmetic: equal, not approximate
            for q in (0.5, 0.99):
                assert window.quantile(q) == (
                    None if expected is None else histogram_quantile(q, expected)
                )
    worked: list[float | None] = []
    real = window._rates

    def counted(at: float | None) -> list[tuple[float, float]] | None:
        worked.append(at)
        return real(at)

    window._rates = counted  # type: ignore[method-assign]  # counts the windows worked out
    window.update(t + 1, Histogram(tuple((le, v + 1) for le, v in scrapes[-1][1].items())))
    for q in (0.5, 0.99, 0.9):
        window.quantile(q)
    assert worked == [None]  # three quantiles of one scrape: the rates once


@pytest.mark.parametrize(
    ("q", "expected"), [(0.0, 1.0), (0.5, 2.5), (0.25, 1.75), (1.0, 4.0), (0.99, 3.97)]
)
def test_sample_quantile_interpolates_between_the_nearest_ranks(q: float, expected: float) -> None:
    assert sample_quantile([1.0, 2.0, 3.0, 4.0], q) == pytest.approx(expected)


def test_sample_quantile_of_one_sample_and_of_none() -> None:
    assert sample_quantile([7.0], 0.99) == 7.0
    with pytest.raises(ValueError, match=r"^no samples$"):
        sample_quantile([], 0.5)


@pytest.mark.parametrize(
    ("seconds", "label"),
    [(60, "1m"), (300, "5m"), (3600, "1h"), (7200, "2h"), (10, "10s"), (90, "90s"),
     (5400, "90m"), (59, "59s"), (0.5, "0.5s"), (120, "2m")],
)  # fmt: skip
def test_window_labels(seconds: float, label: str) -> None:
    assert window_label(seconds) == label


def test_a_ring_keeps_its_capacity_fine_and_averages_the_rest() -> None:
    ring = RingSeries(capacity=3, coarse_every=2, coarse_capacity=2)
    assert len(ring) == 0 and ring.last() is None and ring.at(5.0) is None
    for t in range(1, 9):
        ring.append(float(t), float(t * 10))
    # 1, 2 -> one coarse point; 3, 4 -> another; 5 waits for a partner; 6, 7, 8 are fine.
    assert [(p.t, p.v) for p in ring.points()] == [
        (1.5, 15.0), (3.5, 35.0), (5.0, 50.0), (6.0, 60.0), (7.0, 70.0), (8.0, 80.0)
    ]  # fmt: skip
    assert len(ring) == 6 and ring.last() == Point(8.0, 80.0)
    assert [p.t for p in ring.points(since=3.0)] == [3.5, 5.0, 6.0, 7.0, 8.0]
    assert [p.t for p in ring.points(since=6.0)] == [5.0, 6.0, 7.0, 8.0][1:]
    assert [p.t for p in ring.points(since=7.0)] == [7.0, 8.0]  # bisected: fine points only
    assert [p.t for p in ring.points(since=7.5)] == [8.0]
    assert ring.at(6.5) == Point(6.0, 60.0) and ring.at(7.0) == Point(7.0, 70.0)
    assert ring.at(5.9) is None  # before the fine points
    ring.drop_before(7.0)
    assert [p.t for p in ring.fine] == [7.0, 8.0]


def test_a_backfill_goes_before_the_first_point_within_the_capacity() -> None:
    ring = RingSeries(capacity=4)
    ring.append(10.0, 1.0)
    ring.prepend([Point(t, 0.0) for t in (5.0, 6.0, 7.0, 8.0, 10.0, 11.0)])
    assert [p.t for p in ring.fine] == [6.0, 7.0, 8.0, 10.0]  # the newest that fit
    ring.prepend([Point(1.0, 0.0)])  # full: nothing more
    assert [p.t for p in ring.fine] == [6.0, 7.0, 8.0, 10.0]
    empty = RingSeries(capacity=2)
    empty.prepend([Point(1.0, 0.0), Point(2.0, 0.0)])
    assert [p.t for p in empty.fine] == [1.0, 2.0]
    empty.prepend([])
    assert len(empty) == 2


def test_a_history_s_counters_per_minute_and_prefix_hit_rate() -> None:
    history = EngineHistory(window_s=60.0)
    assert history.per_minute("preemptions_total") is None
    assert history.prefix_hit_rate() is None
    for t, pre, hits, queries in ((0.0, 0, 0, 0), (30.0, 3, 30, 40), (60.0, 6, 60, 80)):
        snap = EngineSnapshot("s", "vllm", "m", running=1.0, preemptions_total=pre)
        snap.prefix_cache_hits_total, snap.prefix_cache_queries_total = hits, queries
        history.update(t, snap)
    assert history.per_minute("preemptions_total") == pytest.approx(6.0)
    assert history.prefix_hit_rate() == pytest.approx(0.75)
    idle = EngineHistory()
    for t in (0.0, 30.0):
        snap = EngineSnapshot("s", "vllm", "m", running=1.0)
        snap.prefix_cache_hits_total, snap.prefix_cache_queries_total = 0, 0
        idle.update(t, snap)
    assert idle.prefix_hit_rate() is None  # no query in the window: no rate, not 0/0


def test_dropping_the_partial_window_keeps_the_gauges() -> None:
    history = EngineHistory(window_s=60.0)
    for t in range(0, 120, 5):
        snap = EngineSnapshot("s", "vllm", "m", running=2.0, generation_tokens_total=t * 10.0)
        history.update(float(t), snap)
    assert history.series["gen_tps"].points()[0].t < 60.0
    history.drop_partial(started=0.0)
    assert history.series["gen_tps"].points()[0].t == 60.0  # a whole window after the start
    assert history.series["running"].points()[0].t == 0.0  # scraped, not derived: kept
    assert [p.v for p in history.series["running"].points()] == [2.0] * 24
    last_rate = history.series["gen_tps"].last()
    assert last_rate is not None and last_rate.t == 115.0 and last_rate.v == pytest.approx(10.0)


def test_the_default_ring_is_an_hour_at_its_rate_then_a_day_of_minutes() -> None:
    ring = RingSeries()
    for t in range(3600 + 60):
        ring.append(float(t), 1.0)
    assert len(ring.fine) == 3600 and [p.t for p in ring.coarse] == [29.5]  # 60 averaged
    assert ring.coarse.maxlen == 1440


def test_a_point_at_the_start_of_the_asked_span_is_in_it() -> None:
    ring = RingSeries(capacity=2, coarse_every=1)
    for t in (1.0, 2.0, 3.0, 4.0):
        ring.append(t, t)
    assert [p.t for p in ring.points(since=2.0)] == [2.0, 3.0, 4.0]  # coarse 2.0 included
    assert [p.t for p in ring.points(since=3.0)] == [3.0, 4.0]  # the first fine point
    plain = RingSeries(capacity=10)
    plain.append(5.0, 1.0)
    assert [p.t for p in plain.points(since=5.0)] == [5.0]
    one_room = RingSeries(capacity=2)
    one_room.append(5.0, 1.0)
    one_room.prepend([Point(3.0, 0.0), Point(4.0, 0.0)])
    assert [p.t for p in one_room.fine] == [4.0, 5.0]  # room for one: the newest


def test_a_counter_that_stays_is_no_reset_and_the_window_s_edge_is_outside_it() -> None:
    rate = CounterRate(window_s=10.0)
    assert rate.update(0.0, 5.0) is False
    assert rate.update(1.0, 5.0) is False  # the same value: no restart
    assert rate.update(2.0, 4.0) is True
    rate = CounterRate(window_s=10.0)
    for t in (0.0, 5.0, 10.0):
        rate.update(t, t)
    assert rate.increase(at=10.0) == pytest.approx(10.0)  # 0 s is the window's edge: out
    assert rate.rate(at=10.0) == pytest.approx(1.0)
    assert CounterRate().increase() is None and CounterRate().rate() is None


def test_the_restart_events_say_what_went_backwards() -> None:
    h = EngineHistory(window_s=60)
    hist = Histogram(((0.1, 5.0), (float("inf"), 10.0)), 1.0, 10.0)
    back = Histogram(((0.1, 1.0), (float("inf"), 2.0)), 0.2, 2.0)
    first = EngineSnapshot("http://n/metrics", "vllm", "m", generation_tokens_total=50.0)
    first.histograms = {"ttft": hist}
    again = EngineSnapshot("http://n/metrics", "vllm", "m", generation_tokens_total=5.0)
    again.histograms = {"ttft": back}
    assert h.update(0.0, first) == []
    assert h.update(1.0, again) == [
        "http://n/metrics: generation_tokens_total went backwards (50 -> 5): server restarted",
        "http://n/metrics: ttft histogram went backwards: server restarted",
    ]


def test_each_derived_series_is_its_own_quantile_or_rate() -> None:
    h = EngineHistory(window_s=60)
    kinds = ("ttft", "itl", "queue", "prefill", "decode")
    for t, n in ((0.0, 0.0), (5.0, 50.0), (10.0, 100.0)):
        snap = EngineSnapshot(
            "s", "vllm", "m", running=2.0, waiting=1.0, kv_cache_usage=0.5,
            generation_tokens_total=n * 3, prompt_tokens_total=n * 7,
        )  # fmt: skip
        # Each kind's answers in its own bucket: 0.1 s for ttft, 0.2 s for itl ...
        snap.histograms = {
            kind: Histogram(((0.1 * (i + 1), n), (float("inf"), n)), None, n)
            for i, kind in enumerate(kinds)
        }
        h.update(t, snap)
    last = {name: p for name, ring in h.series.items() if (p := ring.last()) is not None}
    assert {name: p.t for name, p in last.items()} == dict.fromkeys(SERIES, 10.0)
    assert (last["running"].v, last["waiting"].v, last["kv_cache_usage"].v) == (2.0, 1.0, 0.5)
    assert last["ttft_p50"].v == pytest.approx(0.05) and last["ttft_p99"].v == pytest.approx(0.099)
    assert last["itl_p99"].v == pytest.approx(0.198)
    for i, part in enumerate(("queue", "prefill", "decode"), start=2):
        assert last[f"{part}_p99"].v == pytest.approx(0.099 * (i + 1))
    assert last["gen_tps"].v == h.rate("generation_tokens_total") != h.rate("prompt_tokens_total")
    assert last["prompt_tps"].v == pytest.approx(last["gen_tps"].v * 7 / 3)


INF = float("inf")


@pytest.mark.parametrize(
    ("q", "buckets", "expected"),
    [
        (0.0, ((1.0, 10.0), (INF, 10.0)), 0.0),  # q 0 is the lower edge, not -Inf
        (1.0, ((1.0, 10.0), (2.0, 20.0), (INF, 20.0)), 2.0),  # q 1 is the top, not +Inf
        (-0.1, ((1.0, 10.0), (INF, 10.0)), -INF),
        (1.1, ((1.0, 10.0), (INF, 10.0)), INF),
        # The same bound twice (two series of one histogram): their counts add up.
        (0.5, ((1.0, 4.0), (1.0, 6.0), (2.0, 20.0), (INF, 20.0)), 1.0),
        (0.75, ((1.0, 4.0), (1.0, 6.0), (2.0, 20.0), (INF, 20.0)), 1.5),
        (0.5, ((1.0, 1.0), (INF, 1.0)), 0.5),  # one observation is a quantile
        # A first bucket at or under 0: its bound, no interpolation from 0.
        (0.5, ((0.0, 10.0), (1.0, 20.0), (INF, 20.0)), 0.0),
        (0.25, ((-1.0, 10.0), (1.0, 20.0), (INF, 20.0)), -1.0),
        (0.25, ((0.5, 10.0), (1.0, 20.0), (INF, 20.0)), 0.25),
        (0.75, ((1.0, 10.0), (2.0, 10.0), (3.0, 20.0), (INF, 20.0)), 2.5),  # past an empty one
    ],
)
def test_histogram_quantile_at_its_edges(
    q: float, buckets: tuple[tuple[float, float], ...], expected: float
) -> None:
    assert histogram_quantile(q, buckets) == pytest.approx(expected)


def test_a_histogram_without_its_inf_bucket_says_so() -> None:
    with pytest.raises(HistogramError) as refused:
        histogram_quantile(0.5, ((1.0, 1.0),))
    assert str(refused.value) == "histogram has no +Inf bucket"


@pytest.mark.parametrize(
    ("samples", "start", "end", "expected"),
    [
        # Two samples 10 s apart: to each end exactly 1.1 intervals is too far (half an
        # interval instead), just under it is taken whole.
        (((10.0, 100.0), (20.0, 200.0)), -1.0, 31.0, 100 * (10 + 5 + 5) / 10),
        # (the start is bounded by zero too: 10 s before the first sample.)
        (((10.0, 100.0), (20.0, 200.0)), -0.9, 30.9, 100 * (10 + 10 + 10.9) / 10),
        # Not past zero at the start: zero is 5 s before the first sample (50 then 10/s).
        (((10.0, 50.0), (20.0, 150.0)), 0.0, 20.0, 100 * (10 + 5) / 10),
        # An increase under 1: the zero bound still applies (a fraction, not a count).
        (((10.0, 0.25), (20.0, 0.75)), 0.0, 20.0, 0.5 * (10 + 5) / 10),
        # Fewer than two samples, or no time between them: no increase at all.
        (((10.0, 1.0),), 0.0, 20.0, None),
        (((10.0, 1.0), (10.0, 2.0)), 0.0, 20.0, None),
    ],
)
def test_extrapolation_to_the_range_s_ends(
    samples: tuple[tuple[float, float], ...], start: float, end: float, expected: float | None
) -> None:
    got = extrapolated_increase(samples, start, end)
    assert got == (pytest.approx(expected) if expected is not None else None)


def test_a_rate_asked_for_another_instant_is_over_that_instant_s_window() -> None:
    rate = CounterRate(window_s=10.0)
    for t, v in ((0.0, 0.0), (5.0, 5.0), (10.0, 20.0)):
        rate.update(t, v)
    assert rate.rate() == pytest.approx(2.0)  # (5, 20] extrapolated to 0 s, bounded by zero
    assert rate.rate(at=12.0) == pytest.approx(2.6)  # 2 s more at the end
    # A sample exactly at the window's start is outside it (PromQL's left-open range).
    assert rate.increase(at=15.0) is None
