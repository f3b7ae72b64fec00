"""What one probe measured at one rate, whoever ran it (the in-process simulator or a real
endpoint), and the SLO it is judged against (pure)."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from gpuwatch.gate.limits import REASONS
from gpuwatch.plan.stats import Spread, Verdict, judge
from gpuwatch.series import sample_quantile

# Refusals: the gate's reasons (the in-process gate says why), or a gate's 429 / 503 (a real one).
_REFUSED = frozenset((*REASONS, "429", "503"))


@dataclass(frozen=True)
class Target:
    """The SLO a request must meet, and the share of arrived requests that must meet it."""

    ttft_s: float
    itl_s: float | None = None
    goodput: float = 0.99

    def good(self, ttft: float | None, max_itl: float | None) -> bool:
        if ttft is None or ttft > self.ttft_s:
            return False
        return not (self.itl_s and max_itl is not None and max_itl > self.itl_s)


@dataclass(frozen=True)
class Outcome:
    """One request as its user felt it: served (ttft, max gap) or not (why)."""

    ttft: float | None
    max_itl: float | None
    # ok | a gate's refusal reason (simulated) | 429 | 503 | failed | <other HTTP status>
    status: str = "ok"


@dataclass
class ProbeResult:
    rate: float
    duration_s: float  # of one arrival sequence
    arrived: int
    good: int
    refused: int
    failed: int
    passed: bool | None
    low: float
    high: float
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    itl_p50_s: float | None
    itl_p99_s: float | None
    throughput: float  # completed requests per second
    kv_peak: float | None = None  # share of the KV pool, 0..1
    preemptions: int | None = None
    queue_peak: int | None = None  # the gate's queue (simulated), or the engine's waiting
    batch_p99: int | None = None  # requests in the engine (running + waiting), p99 over steps
    batch_max: int | None = None
    wall_s: float = 0.0
    # How many times it ran longer to be decided (one sequence), or how many sequences it ran
    # past the first ones (several)
    extended: int = 0
    # interval | estimate (one sequence, undecided at the cap) | bound (several sequences,
    # undecided when they ran out: judged by the lower bound, so failed)
    decided_by: str = "interval"
    refusals: dict[str, int] = field(default_factory=dict)  # by reason (or HTTP status)
    # Several independent arrival sequences at this rate: how many, each one's goodput (in
    # the order run) and their standard deviation; low / high are then the interval across
    # them (stats.judge_sequences). One sequence: 1, [], None, and low / high are Wilson's.
    sequences: int = 1
    seq_goodput: list[float] = field(default_factory=list)
    sd: float | None = None

    @property
    def attainment(self) -> float | None:
        """Goodput: the mean of the sequences' goodputs (what the interval is about), or the
        share of the one sequence's arrivals that met the SLO."""
        if self.seq_goodput:
            return statistics.fmean(self.seq_goodput)
        return self.good / self.arrived if self.arrived else None

    @property
    def worst(self) -> float | None:
        """The worst sequence's goodput (the one sequence's, with one)."""
        return min(self.seq_goodput) if self.seq_goodput else self.attainment

    def met(self, goodput: float) -> int:
        """How many of the sequences met ``goodput`` on their own."""
        shares = self.seq_goodput or ([self.attainment] if self.attainment is not None else [])
        return sum(g >= goodput for g in shares)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "attainment": self.attainment}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProbeResult:
        fields = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in fields})


def summarize(
    rate: float,
    duration_s: float,
    outcomes: list[Outcome],
    gaps: list[float],
    target: Target,
    completed_s: float,
) -> tuple[ProbeResult, Verdict]:
    """The probe's numbers from per-request outcomes; the verdict on its attainment."""
    good = sum(target.good(o.ttft, o.max_itl) for o in outcomes)
    refusals = Counter(o.status for o in outcomes if o.status in _REFUSED)
    refused = sum(refusals.values())
    served = [o for o in outcomes if o.status == "ok"]
    failed = len(outcomes) - len(served) - refused
    ttfts = sorted(o.ttft for o in served if o.ttft is not None)
    gaps = sorted(gaps)
    verdict = judge(good, len(outcomes), target.goodput)
    result = ProbeResult(
        rate=rate,
        duration_s=duration_s,
        arrived=len(outcomes),
        good=good,
        refused=refused,
        failed=failed,
        passed=verdict.passed,
        low=verdict.low,
        high=verdict.high,
        ttft_p50_s=sample_quantile(ttfts, 0.5) if ttfts else None,
        ttft_p99_s=sample_quantile(ttfts, 0.99) if ttfts else None,
        itl_p50_s=sample_quantile(gaps, 0.5) if gaps else None,
        itl_p99_s=sample_quantile(gaps, 0.99) if gaps else None,
        throughput=len(served) / completed_s if completed_s > 0 else 0.0,
        refusals=dict(sorted(refusals.items())),
    )
    return result, verdict


def combine(runs: list[ProbeResult], spread: Spread) -> ProbeResult:
    """One rate's result from its sequences (each a ``ProbeResult`` of its own): counts
    summed, peaks the highest, latency percentiles the median over the sequences of each
    one's percentile (the typical sequence's tail: pooling needs every request's numbers),
    and the verdict and interval from ``spread``."""
    first = runs[0]

    def median(values: list[float | None]) -> float | None:
        present = [v for v in values if v is not None]
        return statistics.median(present) if present else None

    def highest(values: list[Any]) -> Any:
        present = [v for v in values if v is not None]
        return max(present) if present else None

    refusals: Counter[str] = Counter()
    for r in runs:
        refusals.update(r.refusals)
    preempts = [r.preemptions for r in runs if r.preemptions is not None]
    batch_p99 = median([r.batch_p99 for r in runs])
    return ProbeResult(
        rate=first.rate,
        duration_s=first.duration_s,
        arrived=sum(r.arrived for r in runs),
        good=sum(r.good for r in runs),
        refused=sum(r.refused for r in runs),
        failed=sum(r.failed for r in runs),
        passed=spread.passed,
        low=spread.low,
        high=spread.high,
        ttft_p50_s=median([r.ttft_p50_s for r in runs]),
        ttft_p99_s=median([r.ttft_p99_s for r in runs]),
        itl_p50_s=median([r.itl_p50_s for r in runs]),
        itl_p99_s=median([r.itl_p99_s for r in runs]),
        throughput=statistics.fmean(r.throughput for r in runs),
        kv_peak=highest([r.kv_peak for r in runs]),
        preemptions=sum(preempts) if preempts else None,
        queue_peak=highest([r.queue_peak for r in runs]),
        batch_p99=None if batch_p99 is None else round(batch_p99),
        batch_max=highest([r.batch_max for r in runs]),
        wall_s=sum(r.wall_s for r in runs),
        refusals=dict(sorted(refusals.items())),
        sequences=len(runs),
        seq_goodput=[r.attainment or 0.0 for r in runs],
        sd=spread.sd,
    )
