"""fmt: one spelling of unknown (None, NaN, infinities) and one bound on foreign text."""

from __future__ import annotations

import math

import pytest

from gpuwatch.fmt import LINE_LIMIT, NA, clip, gib, num, pct, seconds, unit


@pytest.mark.parametrize("value", [None, math.nan, math.inf, -math.inf])
def test_every_formatter_shows_non_finite_as_unknown(value: float | None) -> None:
    assert {gib(value), pct(value), num(value), seconds(value), unit(value, "W")} == {NA}


def test_finite_values_are_formatted() -> None:
    assert (gib(2**31), pct(0.25), num(12345), seconds(0.25), unit(3, "C")) == (
        "2.0G",
        "25%",
        "12.3k",
        "250ms",
        "3C",
    )


def test_clip_bounds_length_and_marks_the_cut() -> None:
    assert clip("short") == "short"
    line = clip("x" * 8_000_000)
    assert len(line) == LINE_LIMIT and line.endswith("...")
    assert clip("abcdefghij", 8) == "abcde..."
    assert clip("abcdefgh", 8) == "abcdefgh"


def test_clip_makes_one_printable_line() -> None:
    assert clip("a\nb\r\n\tc  d") == "a b c d"
    # A terminal escape in a label value is shown, not obeyed.
    assert clip("red\x1b[31mtext\x00") == "red\\x1b[31mtext\\x00"
    assert clip(ValueError("boom\nsecond line")) == "boom second line"
