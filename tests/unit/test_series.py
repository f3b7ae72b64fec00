from __future__ import annotations

import math

import pytest

from gpuwatch.model import EngineSnapshot, Histogram
from gpuwatch.series import CounterRate, EngineHistory, RingSeries


def test_ring_keeps_recent_points_and_downsamples_older() -> None:
    ring = RingSeries(capacity=10, coarse_every=5, coarse_capacity=3)
    for t in range(40):
        ring.append(float(t), float(t))
    assert [p.t for p in ring.fine] == [float(t) for t in range(30, 40)]
    # 30 points left the fine ring: 6 coarse averages, of which the newest 3 are kept.
    assert [p.v for p in ring.coarse] == [17.0, 22.0, 27.0]
    pts = ring.points(since=25)
    assert pts[0].v == 27.0 and pts[-1].v == 39.0


def test_counter_rate_and_window() -> None:
    c = CounterRate(window_s=10)
    for t in range(0, 31, 5):
        c.update(float(t), t * 4.0)
    assert c.rate() == pytest.approx(4.0)
    assert c.increase() == pytest.approx(40.0)  # window of 10 s at 4/s


def test_counter_reset_is_detected_and_restarts_window() -> None:
    c = CounterRate(window_s=60)
    c.update(0, 100)
    c.update(1, 200)
    assert c.update(2, 5) is True
    assert c.rate() is None
    c.update(4, 25)
    assert c.rate() == pytest.approx(10.0)


def _snap(gen: float, ttft_count: float) -> EngineSnapshot:
    s = EngineSnapshot("http://x/metrics", "vllm", "m", running=3, generation_tokens_total=gen)
    s.histograms["ttft"] = Histogram(((0.5, ttft_count), (math.inf, ttft_count)))
    return s


def test_engine_history_reports_a_counter_going_backwards() -> None:
    h = EngineHistory(window_s=60)
    assert h.update(0, _snap(600, 10)) == []
    assert h.update(1, _snap(700, 12)) == []
    assert h.rate("generation_tokens_total") == pytest.approx(100.0)
    events = h.update(2, _snap(10, 1))
    assert len(events) == 2
    assert "generation_tokens_total went backwards (700 -> 10)" in events[0]
    assert "server restarted" in events[0]
    assert h.rate("generation_tokens_total") is None
    h.update(3, _snap(60, 3))
    assert h.rate("generation_tokens_total") == pytest.approx(50.0)
    assert h.quantile("ttft", 0.5) == pytest.approx(0.25)
    assert [p.v for p in h.series["running"].points()] == [3, 3, 3, 3]
    assert h.series["ttft_p50"].last().v == pytest.approx(0.25)
