"""The rate search (pure: the probes are passed in): find the knee, the highest rate whose SLO
attainment is shown, with 95% confidence, to meet the goodput target.

In simulated time each rate is judged over several independent arrival sequences (replicates,
``max_sequences`` > 1): what an operator faces is the next sequence of arrivals, and one
sequence's luck moved the knee by a quarter of its value from seed to seed. A rate passes when
the lower bound of its goodput's 95% interval across sequences (stats.judge_sequences) meets the
target, on all ``max_sequences`` of them; it fails as soon as the interval is wholly below the
target, or centred below it and within ``goodput_precision`` either side (``Search._sequences``).
So rates far above the knee cost ``min_sequences``, the precision asked sets how many the ones
just above it run, and the knee is the highest rate shown to hold across sequences. Sequence
``i`` has the same seed at every rate (common random numbers, as below).

With one sequence (``max_sequences`` 1, a real endpoint in real time), each probe runs long
enough for its Wilson interval to be able to pass at all (``min_requests``
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
from dataclasses import dataclass, field, replace

from gpuwatch.plan.probe import ProbeResult, Target, combine
from gpuwatch.plan.stats import judge_sequences, min_requests

# (rate, duration_s, sequence) -> the result of arrival sequence number ``sequence`` at ``rate``
Prober = Callable[[float, float, int], ProbeResult]


@dataclass(frozen=True)
class SearchSettings:
    start_rate: float = 1.0
    min_duration_s: float = 120.0
    max_duration_s: float = 960.0
    precision: float = 0.05  # stop bisecting when (fail - pass) / pass is below this
    max_probes: int = 14
    min_rate: float = 0.01
    max_rate: float = 10_000.0
    # Arrival sequences a rate runs first, and the most it runs (what a pass takes); 1 and 1:
    # one sequence, judged over its requests.
    min_sequences: int = 1
    max_sequences: int = 1
    # A rate whose mean goodput is below the target stops adding sequences once its interval
    # is within this either side; None: half the miss budget, (1 - goodput) / 2 (half a point
    # at 99%).
    goodput_precision: float | None = None

    @property
    def replicated(self) -> bool:
        return self.max_sequences > 1


# The simulator's defaults: enough sequences for Student's t to say something (t at 3 degrees
# of freedom is 3.18; at 7, 2.36), few enough that the default sweep stays within seconds
# (a rate costs up to 8 x 2 simulated minutes).
SIM_MIN_SEQUENCES = 4
SIM_MAX_SEQUENCES = 8
MAX_SEQUENCES = 500  # the most a rate may run; the checks' fresh sequences are numbered past it
CHECK_FIRST = MAX_SEQUENCES


def sequence_seed(seed: int, sequence: int) -> int:
    """Arrival sequence ``sequence`` of the sweep seeded ``seed``: sequence 0 is ``seed``
    itself, and no two (seed, sequence) pairs of small seeds share one."""
    return seed + sequence * 1_000_003


@dataclass
class Search:
    target: Target
    settings: SearchSettings = field(default_factory=SearchSettings)
    probes: list[ProbeResult] = field(default_factory=list)
    # Real time ends a search early: the caller says when the budget is spent.
    out_of_time: Callable[[], bool] = lambda: False
    on_probe: Callable[[ProbeResult], None] | None = None

    @property
    def precision(self) -> float:
        given = self.settings.goodput_precision
        return given if given is not None else (1 - self.target.goodput) / 2

    def duration_for(self, rate: float) -> float:
        """One sequence's duration: long enough that the sequences a pass is judged on hold
        together the requests an all-good result needs to pass at all, and at least
        ``min_duration_s``."""
        need = math.ceil(min_requests(self.target.goodput) * 1.25)
        s = self.settings
        return min(s.max_duration_s, max(s.min_duration_s, need / rate / s.max_sequences))

    def probe(self, prober: Prober, rate: float) -> ProbeResult:
        """One rate, judged (``measure``) and recorded as a probe of the search."""
        result = self.measure(prober, rate, self.duration_for(rate))
        self.probes.append(result)
        if self.on_probe is not None:
            self.on_probe(result)
        return result

    def measure(self, prober: Prober, rate: float, duration: float) -> ProbeResult:
        if self.settings.replicated:
            return self._sequences(prober, rate, duration)
        return self._one(prober, rate, duration)

    def _sequences(self, prober: Prober, rate: float, duration: float) -> ProbeResult:
        """``min_sequences`` first, then one more at a time until the rate is decided; the
        verdict is the interval across all of them (stats.judge_sequences).

        A fail may come early: once the interval is wholly below the target, or once its mean
        is below the target and it is within the precision asked either side (more sequences
        would only narrow it around a mean too low to pass). A pass takes all ``max_sequences``:
        near the knee most sequences meet the SLO and a few bursty ones miss it by far, so a
        handful that all happened to miss the bursts read 100% with no spread, and a bound
        taken from them (or a count chosen from their spread, as Stein's two stages would)
        passes rates the next sequences fail. Stopping early only on fails can lower the knee,
        never flatter it; rates far above the knee, clear fails, cost the fewest sequences."""
        s = self.settings
        target = self.target.goodput
        runs = [prober(rate, duration, i) for i in range(max(2, s.min_sequences))]
        while True:
            spread = judge_sequences([r.good for r in runs], [r.arrived for r in runs], target)
            if spread.passed is False or len(runs) >= s.max_sequences or self.out_of_time():
                break
            if spread.mean < target and spread.half_width <= self.precision:
                break
            runs.append(prober(rate, duration, len(runs)))
        if spread.passed and len(runs) < s.max_sequences:
            spread = replace(spread, passed=None)  # out of time before it was shown
        result = combine(runs, spread)
        if result.passed is None:
            # Not shown to hold: the knee is the highest rate whose lower bound meets the SLO.
            result.passed = False
            result.decided_by = "bound"
        result.extended = len(runs) - max(2, s.min_sequences)
        return result

    def _one(self, prober: Prober, rate: float, duration: float) -> ProbeResult:
        """One sequence, run longer until decided (or the cap); the last run is the result."""
        extended = 0
        while True:
            result = prober(rate, duration, 0)
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
