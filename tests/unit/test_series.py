from __future__ import annotations

import math

import pytest

from gpuwatch.model import EngineSnapshot, Histogram
from gpuwatch.series import (
    CounterRate,
    EngineHistory,
    RingSeries,
    extrapolated_increase,
    histogram_quantile,
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
