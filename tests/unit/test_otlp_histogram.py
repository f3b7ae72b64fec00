"""The histograms the gate aggregates itself (``otlp.Histogram``): OTLP's bucket rule, the
figures beside the buckets, and a bounded number of attribute sets."""

from __future__ import annotations

from gpuwatch.otlp import MAX_SERIES, Histogram

A = (("gpuwatch.lane", "chat"),)
B = (("gpuwatch.lane", "embed"),)


def test_buckets_are_previous_bound_exclusive_bound_inclusive() -> None:
    h = Histogram("h", "s", "", (1.0, 2.0))
    for value in (0.5, 1.0, 1.5, 2.0, 2.5, 99.0):
        h.record(value, A)
    [(key, counts, count, total, low, high)] = h.snapshot()
    assert key == A
    assert counts == [2, 2, 2]  # (-inf, 1], (1, 2], (2, +inf)
    assert (count, total, low, high) == (6, 106.5, 0.5, 99.0)


def test_each_attribute_set_apart_and_the_snapshot_a_copy() -> None:
    h = Histogram("h", "s", "", (1.0,))
    h.record(0.1, A)
    h.record(5.0, B)
    snap = {key: counts for key, counts, *_ in h.snapshot()}
    assert snap == {A: [1, 0], B: [0, 1]}
    h.record(0.2, A)
    assert snap[A] == [1, 0]  # the export thread's copy does not move under it


def test_attribute_sets_are_bounded() -> None:
    h = Histogram("h", "s", "", ())
    for k in range(MAX_SERIES + 5):
        h.record(1.0, (("m", str(k)),))
    assert len(h.snapshot()) == MAX_SERIES and h.dropped == 5
    h.record(1.0, (("m", "0"),))  # a set already kept still counts
    assert h.dropped == 5


def test_an_empty_histogram_has_no_points() -> None:
    h = Histogram("h", "s", "", (1.0,))
    assert h.snapshot() == []
