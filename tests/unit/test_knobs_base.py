from __future__ import annotations

import math

import pytest

from gpuwatch.control.knobs.base import Knob, KnobChange, KnobConflict, same_value, show_value
from gpuwatch.errors import GpuwatchError


def test_label_and_describe() -> None:
    k = Knob("ray", "app1/LLM", "max_ongoing_requests", 8, "int", minimum=1)
    assert k.label == "ray app1/LLM max_ongoing_requests"
    assert KnobChange(k, 4).describe() == "ray app1/LLM max_ongoing_requests 8 -> 4"
    assert KnobChange(k, None).describe().endswith("8 -> none")
    f = Knob("dynamo", "llama", "active_decode_blocks_threshold", 0.85, "float")
    assert KnobChange(f, True).describe().endswith("0.85 -> true")


def test_a_hostile_target_is_clipped_in_the_label() -> None:
    k = Knob("ray", "x" * 500, "n", 1, "int")
    assert len(k.label) < 120


@pytest.mark.parametrize(
    ("knob", "value", "problem"),
    [
        (Knob("ray", "a/b", "n", 8, "int", minimum=1), 0, "must be at least 1, got 0"),
        (Knob("ray", "a/b", "n", 8, "int", maximum=10), 11, "must be at most 10, got 11"),
        (Knob("ray", "a/b", "n", 8, "int"), 2.5, "must be an integer, got 2.5"),
        (Knob("ray", "a/b", "n", 8, "int"), True, "must be a number, got true"),
        (Knob("ray", "a/b", "n", 8, "int"), None, "cannot be none (no limit)"),
        (Knob("d", "m", "f", 0.5, "float"), math.inf, "must be a finite number, got inf"),
        (Knob("d", "m", "f", 0.5, "float"), math.nan, "must be a finite number, got nan"),
        (Knob("v", "server", "paused", False, "bool"), 1, "must be true or false, got 1"),
    ],
)
def test_problem_names_what_is_wrong(knob: Knob, value: int | float | None, problem: str) -> None:
    assert knob.problem(value) == problem


@pytest.mark.parametrize(
    ("knob", "value"),
    [
        (Knob("ray", "a/b", "n", 8, "int", minimum=1, maximum=10), 10),
        (Knob("ray", "a/b", "n", 8, "int", nullable=True), None),
        (Knob("d", "m", "f", 0.5, "float", minimum=0.0, maximum=1.0), 1),  # an int is a float
        (Knob("v", "server", "paused", False, "bool"), True),
    ],
)
def test_no_problem_within_bounds(knob: Knob, value: int | float | bool | None) -> None:
    assert knob.problem(value) is None


def test_same_value_keeps_bools_and_numbers_apart() -> None:
    assert same_value(4, 4) and same_value(4, 4.0) and same_value(None, None)
    assert same_value(0.85, 0.85000000000001)
    assert not same_value(True, 1) and not same_value(0, False) and not same_value(None, 0)
    assert not same_value(0.85, 0.86)


def test_show_value() -> None:
    assert [show_value(v) for v in (None, True, 0.5, 8)] == ["none", "true", "0.5", "8"]


def test_conflict_says_what_moved_and_is_a_gpuwatch_error() -> None:
    k = Knob("ray", "app1/LLM", "max_ongoing_requests", 8, "int")
    exc = KnobConflict(k, 8, 6)
    assert isinstance(exc, GpuwatchError)
    assert (exc.shown, exc.now) == (8, 6)
    assert "changed since it was shown (8 -> 6): nothing written" in str(exc)
