"""histogram_quantile against hand-computed cases (Prometheus semantics)."""

from __future__ import annotations

import math

import pytest

from gpuwatch.model import Histogram
from gpuwatch.series import HistogramError, HistogramWindow, histogram_quantile

INF = math.inf


def test_interpolates_inside_bucket() -> None:
    # 10 obs <= 1, 20 <= 2, 30 total. p50: rank 15 -> bucket (1,2], 5 of 10 -> 1.5
    assert histogram_quantile(0.5, [(1.0, 10), (2.0, 20), (INF, 30)]) == pytest.approx(1.5)


def test_first_bucket_lower_bound_is_zero() -> None:
    # rank 2.5 of 10 in the first bucket (0, 0.5]: 0.5 * 2.5/10
    assert histogram_quantile(0.25, [(0.5, 10), (1.0, 10), (INF, 10)]) == pytest.approx(0.125)


def test_rank_in_inf_bucket_returns_largest_finite_bound() -> None:
    assert histogram_quantile(0.99, [(1.0, 5), (2.5, 8), (INF, 10)]) == 2.5


def test_empty_histogram_is_none() -> None:
    assert histogram_quantile(0.5, [(1.0, 0), (INF, 0)]) is None


def test_missing_inf_bucket_is_an_error() -> None:
    with pytest.raises(HistogramError, match=r"\+Inf"):
        histogram_quantile(0.5, [(1.0, 3), (2.0, 4)])


def test_out_of_range_q_and_non_monotonic_counts() -> None:
    assert histogram_quantile(-0.1, [(1.0, 1), (INF, 1)]) == -INF
    assert histogram_quantile(1.1, [(1.0, 1), (INF, 1)]) == INF
    # A bucket lower than its predecessor (non-atomic scrape) is lifted, as Prometheus does.
    assert histogram_quantile(0.5, [(1.0, 10), (2.0, 8), (INF, 20)]) == pytest.approx(1.0)


def test_unsorted_input_and_duplicate_bounds() -> None:
    assert histogram_quantile(0.5, [(INF, 30), (2.0, 20), (1.0, 10)]) == pytest.approx(1.5)


def _h(*pairs: tuple[float, float]) -> Histogram:
    return Histogram(tuple(pairs))


def test_window_uses_deltas_between_scrapes() -> None:
    w = HistogramWindow(window_s=60)
    w.update(0, _h((0.1, 100), (1.0, 100), (INF, 100)))  # old fast requests
    w.update(10, _h((0.1, 100), (1.0, 110), (INF, 110)))  # 10 new, all in (0.1, 1]
    # Lifetime p50 would be ~0.055; the window only sees the slow ones: 0.1 + 0.9 * 5/10
    assert w.quantile(0.5) == pytest.approx(0.55)


def test_window_holds_only_the_scrapes_inside_it() -> None:
    w = HistogramWindow(window_s=60)
    w.update(0, _h((1.0, 0), (2.0, 0), (INF, 0)))
    w.update(30, _h((1.0, 10), (2.0, 10), (INF, 10)))
    w.update(60, _h((1.0, 10), (2.0, 15), (INF, 15)))
    w.update(90, _h((1.0, 10), (2.0, 20), (INF, 20)))
    # (30, 90]: the scrapes at 60 and 90 (30 is on the open edge), as rate(x[60s]) takes them:
    # 5 new observations, all in (1, 2].
    assert w.quantile(0.5) == pytest.approx(1.5)
    assert dict(w.rates() or []) == pytest.approx({1.0: 0.0, 2.0: 10 / 60, INF: 10 / 60})


def test_window_with_one_scrape_inside_has_no_answer() -> None:
    w = HistogramWindow(window_s=60)
    w.update(0, _h((1.0, 0), (INF, 0)))
    w.update(100, _h((1.0, 10), (INF, 10)))
    assert w.quantile(0.5) is None  # as PromQL: rate() needs two samples in the range


def test_window_counts_across_a_reset_as_promql_does() -> None:
    w = HistogramWindow(window_s=60)
    w.update(0, _h((1.0, 50), (INF, 50)))
    assert w.update(5, _h((1.0, 2), (INF, 4))) is True  # counts went down: a restart
    # Bucket 1.0: 2 - 50 + 50 = 2; +Inf: 4 - 50 + 50 = 4; both extrapolated alike, so the
    # median's rank (2 of 4) lands on the first bucket's upper bound.
    assert w.quantile(0.5) == pytest.approx(1.0)
    w.update(10, _h((1.0, 4), (INF, 8)))
    assert w.quantile(0.5) == pytest.approx(1.0)
    # Rank 6 of 8 falls in +Inf: the largest finite bound, as histogram_quantile answers.
    assert w.quantile(0.75) == pytest.approx(1.0)
