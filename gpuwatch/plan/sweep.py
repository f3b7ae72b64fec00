"""The rate search (pure: the probes are passed in): find the knee, the highest rate whose SLO
attainment is shown, with 95% confidence, to meet the goodput target.

Each probe runs long enough for its Wilson interval to be able to pass at all (``min_requests``
arrivals, and at least ``min_duration_s``); an undecided probe (the interval straddles the
target) runs again twice as long, up to ``max_duration_s``, and is then judged by its point
estimate. The search doubles the rate from ``start_rate`` until a probe fails (halving instead
when the first one fails), then bisects between the highest pass and the lowest fail until they
are within ``precision`` of each other. Every probe uses the same seed: the arrival sequence at
one rate is the same sequence, time-scaled, at another (common random numbers), so the search
compares rates, not luck.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from gpuwatch.plan.probe import ProbeResult, Target
from gpuwatch.plan.stats import min_requests

Prober = Callable[[float, float], ProbeResult]  # (rate, duration_s) -> result


@dataclass(frozen=True)
class SearchSettings:
    start_rate: float = 1.0
    min_duration_s: float = 120.0
    max_duration_s: float = 960.0
    precision: float = 0.05  # stop bisecting when (fail - pass) / pass is below this
    max_probes: int = 14
    min_rate: float = 0.01
    max_rate: float = 10_000.0


@dataclass
class Search:
    target: Target
    settings: SearchSettings = field(default_factory=SearchSettings)
    probes: list[ProbeResult] = field(default_factory=list)
    # Real time ends a search early: the caller says when the budget is spent.
    out_of_time: Callable[[], bool] = lambda: False
    on_probe: Callable[[ProbeResult], None] | None = None

    def duration_for(self, rate: float) -> float:
        need = math.ceil(min_requests(self.target.goodput) * 1.25)
        return min(self.settings.max_duration_s, max(self.settings.min_duration_s, need / rate))

    def probe(self, prober: Prober, rate: float) -> ProbeResult:
        """One rate, run longer until decided (or the cap); the last run is the result."""
        duration = self.duration_for(rate)
        extended = 0
        while True:
            result = prober(rate, duration)
            if result.passed is not None:
                break
            longer = min(duration * 2, self.settings.max_duration_s)
            if longer <= duration or self.out_of_time():
                result.passed = (result.attainment or 0.0) >= self.target.goodput
                result.decided_by = "estimate"
                break
            duration = longer
            extended += 1
        result.extended = extended
        self.probes.append(result)
        if self.on_probe is not None:
            self.on_probe(result)
        return result

    def run(self, prober: Prober) -> float | None:
        """The knee (req/s), or None when even the lowest rate tried failed."""
        s = self.settings
        passed: float | None = None
        failed: float | None = None
        rate = s.start_rate
        first = self.probe(prober, rate)
        if first.passed:
            passed = rate
            while failed is None and rate * 2 <= s.max_rate and not self._stop():
                rate *= 2
                if self.probe(prober, rate).passed:
                    passed = rate
                else:
                    failed = rate
        else:
            failed = rate
            while passed is None and rate / 2 >= s.min_rate and not self._stop():
                rate /= 2
                if self.probe(prober, rate).passed:
                    passed = rate
                else:
                    failed = rate
        if passed is None or failed is None:
            return passed
        while (failed - passed) / passed > s.precision and not self._stop():
            mid = (passed + failed) / 2
            if self.probe(prober, mid).passed:
                passed = mid
            else:
                failed = mid
        return passed

    def _stop(self) -> bool:
        return len(self.probes) >= self.settings.max_probes or self.out_of_time()

    def at(self, rate: float) -> ProbeResult | None:
        """The probe run at ``rate`` (the last one, if several)."""
        found = [p for p in self.probes if math.isclose(p.rate, rate)]
        return found[-1] if found else None
