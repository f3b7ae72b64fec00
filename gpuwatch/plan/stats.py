"""The statistics of one probe (pure): SLO attainment with a Wilson interval, and a verdict.

A probe passes when the interval's lower bound reaches the goodput target, fails when its upper
bound is below it, and is undecided otherwise (the sweep then runs it longer). The Wilson score
interval keeps its coverage near 0 and 1, where attainment targets live (0.99), unlike the
normal approximation; GuideLLM's goodput profile uses it per probe for the same reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

Z95 = 1.959963984540054  # two-sided 95%


def wilson(good: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion good / n; (0, 1) with no observation."""
    if n <= 0:
        return 0.0, 1.0
    p = good / n
    z2 = z * z
    denom = 1 + z2 / n
    center = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    low = 0.0 if good == 0 else max(0.0, center - half)
    high = 1.0 if good == n else min(1.0, center + half)  # exact at the ends, not 1 - 1e-16
    return low, high


def min_requests(target: float, z: float = Z95) -> int:
    """The fewest requests that can pass at all: every one good, lower bound >= target."""
    if target <= 0:
        return 1
    if target >= 1:
        raise ValueError("a goodput target of 1 can never be shown with finite requests")
    # all good: lower bound = n / (n + z^2) >= target  <=>  n >= z^2 target / (1 - target)
    return math.ceil(z * z * target / (1 - target))


@dataclass(frozen=True)
class Verdict:
    passed: bool | None  # None: undecided
    good: int
    n: int
    low: float
    high: float

    @property
    def attainment(self) -> float | None:
        return self.good / self.n if self.n else None


def judge(good: int, n: int, target: float) -> Verdict:
    low, high = wilson(good, n)
    passed: bool | None = None
    if n and low >= target:
        passed = True
    elif n and high < target:
        passed = False
    return Verdict(passed, good, n, low, high)
