"""The burn-rate alerts evaluated on the node, from what it polls: the same SLIs, windows and
factors as the Prometheus rules (``rules.py``), and the same arithmetic as PromQL's ``rate()``
(``series.extrapolated_increase``), so the node and Prometheus fire together on the same data.

Pure: counter readings in (a time, each series' good and total), alert states out.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuwatch.alerts.slo import Objective, Tier, tiers, window_text
from gpuwatch.series import _extrapolate

# Samples kept per window at the finest: the shortest window holds about this many, longer
# ones are thinned to the same spacing (a 3-day window at a 5-minute short one: ~26,000).
SAMPLES_PER_SHORT_WINDOW = 50
# The budget over the whole period is read from a coarser series of about this many points.
PERIOD_POINTS = 2000


class Cumulative:
    """One SLI's good and total requests as ever-growing counts, sampled over time: each
    series' counter resets are taken out as it is fed, so an increase is last minus first."""

    def __init__(self, keep_s: float, step_s: float) -> None:
        self.keep_s, self.step_s = keep_s, step_s
        self.t: list[float] = []
        self.good: list[float] = []
        self.total: list[float] = []

    def add(self, t: float, good: float, total: float) -> None:
        if len(self.t) >= 2 and t - self.t[-2] < self.step_s:
            # Thinned: the newest sample moves forward, so the newest reading is always in.
            self.t[-1], self.good[-1], self.total[-1] = t, good, total
        else:
            self.t.append(t)
            self.good.append(good)
            self.total.append(total)
        old = bisect.bisect_left(self.t, t - self.keep_s - self.step_s)
        if old > len(self.t) // 4:  # trimmed in batches: a list's front is costly to pop
            del self.t[:old], self.good[:old], self.total[:old]

    def increase(self, at: float, window_s: float) -> tuple[float, float] | None:
        """PromQL's ``increase()`` of good and of total over ``(at - window_s, at]``."""
        lo = bisect.bisect_right(self.t, at - window_s)
        hi = bisect.bisect_right(self.t, at)
        n = hi - lo
        if n < 2:
            return None
        start, first, last = at - window_s, lo, hi - 1
        out = []
        for values in (self.good, self.total):
            grew = values[last] - values[first]
            value = _extrapolate(grew, self.t[first], values[first], self.t[last], n, start, at)
            if value is None:
                return None
            out.append(value)
        return out[0], out[1]

    def error_ratio(self, at: float, window_s: float) -> float | None:
        """The share of requests that missed over the window; None with none counted."""
        grown = self.increase(at, window_s)
        if grown is None or grown[1] <= 0:
            return None
        return max(0.0, 1.0 - grown[0] / grown[1])

    def since(self, at: float, window_s: float) -> tuple[float, float, float] | None:
        """(good, total, seconds covered) from the first sample inside the window to the
        newest, without extrapolation (for the budget over the period)."""
        lo = bisect.bisect_right(self.t, at - window_s)
        if len(self.t) - lo < 2:
            return None
        return (
            self.good[-1] - self.good[lo],
            self.total[-1] - self.total[lo],
            self.t[-1] - self.t[lo],
        )


@dataclass
class SeriesCounts:
    """A source series' last raw (good, total) and the reset-free running totals."""

    good: float
    total: float


@dataclass
class TierState:
    tier: Tier
    firing: bool = False
    since: float | None = None
    long_ratio: float | None = None
    short_ratio: float | None = None

    @property
    def long(self) -> str:
        return window_text(self.tier.long_s)

    @property
    def short(self) -> str:
        return window_text(self.tier.short_s)


@dataclass(frozen=True)
class Change:
    """An alert that started or stopped firing at ``at``."""

    objective: Objective
    state: TierState
    firing: bool
    at: float


@dataclass
class SliBurn:
    """One objective's counts and its tiers' states."""

    objective: Objective
    period_s: float
    fine: Cumulative = field(init=False)
    coarse: Cumulative = field(init=False)
    states: list[TierState] = field(init=False)
    raw: dict[object, SeriesCounts] = field(default_factory=dict)
    good: float = 0.0
    total: float = 0.0
    started: float | None = None

    def __post_init__(self) -> None:
        ts = tiers(self.period_s)
        shortest = min(t.short_s for t in ts)
        longest = max(t.long_s for t in ts)
        self.fine = Cumulative(longest, shortest / SAMPLES_PER_SHORT_WINDOW)
        self.coarse = Cumulative(self.period_s, self.period_s / PERIOD_POINTS)
        self.states = [TierState(t) for t in ts]

    def feed(self, t: float, readings: Mapping[object, tuple[float, float]]) -> None:
        """Each series' raw cumulative (good, total) at ``t``. A series seen first adds its
        value as it is (as Prometheus' first sample of it does); one that went back reset."""
        if not readings:
            return
        first = self.started is None
        for key, (good, total) in readings.items():
            last = self.raw.get(key)
            if last is None:
                # The first reading is where the counts start (Prometheus' first sample); a
                # series that appears later is counted from its first reading, as rate() does.
                if first:
                    self.good += good
                    self.total += total
            else:
                self.good += good - last.good if good >= last.good else good
                self.total += total - last.total if total >= last.total else total
            self.raw[key] = SeriesCounts(good, total)
        if self.started is None:
            self.started = t
        self.fine.add(t, self.good, self.total)
        self.coarse.add(t, self.good, self.total)

    def evaluate(self, t: float) -> list[Change]:
        changes = []
        budget = self.objective.budget
        for s in self.states:
            s.long_ratio = self.fine.error_ratio(t, s.tier.long_s)
            s.short_ratio = self.fine.error_ratio(t, s.tier.short_s)
            limit = s.tier.factor * budget
            firing = (
                s.long_ratio is not None
                and s.short_ratio is not None
                and s.long_ratio > limit
                and s.short_ratio > limit
            )
            if firing != s.firing:
                s.firing, s.since = firing, t
                changes.append(Change(self.objective, s, firing, t))
        return changes

    def burn(self, ratio: float | None) -> float | None:
        """An error ratio as a burn rate: 1.0 spends the budget exactly over the period."""
        budget = self.objective.budget
        if ratio is None or budget <= 0:
            return None
        return ratio / budget

    def budget_left(self, t: float) -> tuple[float, float] | None:
        """(share of the period's error budget left, seconds of the period seen); None before
        two readings with requests."""
        seen = self.coarse.since(t, self.period_s)
        if seen is None or seen[1] <= 0:
            return None
        good, total, covered = seen
        missed = (total - good) / total
        budget = self.objective.budget
        if budget <= 0:
            return (0.0 if missed > 0 else 1.0), covered
        # Spent so far, as a share of the budget the whole period allows at this traffic.
        return 1.0 - missed / budget, covered
