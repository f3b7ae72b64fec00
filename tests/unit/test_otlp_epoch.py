"""Monotonic readings to the epoch times spans carry (``otlp.epoch_offset_ns``): right, and
one offset for every span of a second, so spans made in one process (the gate's, the
simulator's) compare exactly, whatever thread switches fall between the clocks' reads."""

from __future__ import annotations

import time

from gpuwatch.otlp import _EpochOffset


def test_the_offset_maps_monotonic_to_epoch_time() -> None:
    offset = _EpochOffset()()
    before = time.time_ns()
    mapped = time.monotonic_ns() + offset
    after = time.time_ns()
    # Between the wall clock's reads either side (NTP's slew within a second: microseconds).
    assert before - 1_000_000 <= mapped <= after + 1_000_000


def test_one_offset_is_kept_for_a_second_then_read_again() -> None:
    clock = _EpochOffset()
    first = clock()
    read_at, _ = clock._held
    assert all(clock() == first for _ in range(100))  # every span of the second alike
    clock._held = (read_at - _EpochOffset.KEEP_NS, first + 12345)  # a second old, say
    assert clock() != first + 12345  # read again
