"""What one probe measured at one rate, whoever ran it (the in-process simulator or a real
endpoint), and the SLO it is judged against (pure)."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from gpuwatch.gate.limits import REASONS
from gpuwatch.plan.stats import Verdict, judge
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
    duration_s: float
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
    extended: int = 0  # how many times it ran longer to be decided
    decided_by: str = "interval"  # interval | estimate (undecided at the cap)
    refusals: dict[str, int] = field(default_factory=dict)  # by reason (or HTTP status)

    @property
    def attainment(self) -> float | None:
        return self.good / self.arrived if self.arrived else None

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
