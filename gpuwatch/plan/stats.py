"""The statistics of a probe (pure): SLO attainment with a confidence interval, and a verdict.

One arrival sequence (``judge``): a Wilson interval over its requests. A probe passes when the
interval's lower bound reaches the goodput target, fails when its upper bound is below it, and
is undecided otherwise (the sweep then runs it longer). The Wilson score interval keeps its
coverage near 0 and 1, where attainment targets live (0.99), unlike the normal approximation;
GuideLLM's goodput profile uses it per probe for the same reason.

Several independent arrival sequences (``judge_sequences``): the requests of one sequence are
not independent (one burst makes many of them late together), so a Wilson interval over them
says how well that one sequence was measured, not what the next sequence will do; at the knee
one seed read 6.0 req/s and another 7.0. What an operator faces is the variation *between*
sequences, so each sequence gives one observation, its goodput, and the interval is Student's
t over those (the method of independent replications of simulation output analysis: each
sequence's goodput is an average over hundreds of requests, so it is near normal even where
single requests are not). A bootstrap would need far more sequences than the sweep can afford
to cover its tails (with 4 to 10 values its percentile interval is too narrow). When every
sequence reads the same (all 100%) the t interval has zero width, which only says the sequences
agreed, not that the next 1% would; the pooled Wilson interval over all their requests is then
the floor, so the interval is the wider of the two at each end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

Z95 = 1.959963984540054  # two-sided 95%
# Student's t, two-sided 95% (0.975 quantile), by degrees of freedom 1..30.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)  # fmt: skip


def t975(df: int) -> float:
    """Student's t two-sided 95% quantile; past 30 degrees of freedom the Cornish-Fisher
    expansion around the normal (within 0.001 of the table there)."""
    if df < 1:
        raise ValueError("a t interval needs at least two observations")
    if df <= len(_T975):
        return _T975[df - 1]
    z = Z95
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df * df)


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


@dataclass(frozen=True)
class Spread:
    """Goodput across arrival sequences: the mean of each sequence's goodput, its 95% interval
    (the wider of Student's t over the sequences and the pooled Wilson interval), the sample
    standard deviation and the worst and best sequences."""

    passed: bool | None  # None: the interval straddles the target
    mean: float
    low: float
    high: float
    sd: float
    worst: float
    best: float
    sequences: int

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2


def judge_sequences(goods: list[int], ns: list[int], target: float) -> Spread:
    """The verdict on a rate from several independent sequences: ``goods[i]`` of ``ns[i]``
    requests met the SLO in sequence ``i``. Passes when the lower bound reaches ``target``,
    fails when the upper bound is below it, undecided otherwise."""
    shares = [g / n if n else 0.0 for g, n in zip(goods, ns, strict=True)]
    k = len(shares)
    mean = sum(shares) / k
    sd = math.sqrt(sum((x - mean) ** 2 for x in shares) / (k - 1)) if k > 1 else 0.0
    half = t975(k - 1) * sd / math.sqrt(k) if k > 1 else 1.0
    pooled_low, pooled_high = wilson(sum(goods), sum(ns))
    low = max(0.0, min(mean - half, pooled_low))
    high = min(1.0, max(mean + half, pooled_high))
    passed: bool | None = None
    if low >= target:
        passed = True
    elif high < target:
        passed = False
    return Spread(passed, mean, low, high, sd, min(shares), max(shares), k)
