"""The SLOs alerted on, their error budgets, and the multi-window, multi-burn-rate tiers of the
Google SRE workbook (chapter 5, "Alerting on SLOs"), one definition for the Prometheus rules and
the node's own evaluation.

A tier fires when the error ratio over both its long and its short window is above ``factor``
times the budget: the long window says enough budget is gone to matter, the short one that it
is still going (so the alert resolves minutes after the trouble ends, not hours).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuwatch.config import AlertSettings, Slo

DAY_S = 86400.0
# The workbook's windows are for a 30-day budget; they scale with the configured period.
WORKBOOK_PERIOD_S = 30 * DAY_S


@dataclass(frozen=True)
class Tier:
    severity: str  # "critical" pages, "warning" is a ticket (the community's severities)
    factor: float  # the burn rate: 1.0 spends exactly the budget over the period
    long_s: float
    short_s: float


# (severity, burn rate, long window, short window) at a 30-day period: 14.4x for an hour spends
# 2% of the budget, 6x for 6 hours 5%, 1x for 3 days 10%.
WORKBOOK_TIERS = (
    Tier("critical", 14.4, 3600.0, 300.0),
    Tier("critical", 6.0, 6 * 3600.0, 1800.0),
    Tier("warning", 1.0, 3 * DAY_S, 6 * 3600.0),
)


@dataclass(frozen=True)
class Objective:
    """One SLI and its target: ``good / total`` must be at least ``target`` over the period."""

    sli: str  # "ttft" or "goodput": the rules' and the events' name for it
    target: float  # 0.99
    bound_s: float | None  # the latency a good request is under (TTFT), None: none
    what: str  # how the dashboard says it

    @property
    def budget(self) -> float:
        """The share of requests allowed to miss (1% for 0.99)."""
        return 1.0 - self.target


def tiers(period_s: float) -> tuple[Tier, ...]:
    """The workbook's tiers with their windows scaled to a budget period of ``period_s``."""
    scale = period_s / WORKBOOK_PERIOD_S
    return tuple(
        Tier(t.severity, t.factor, t.long_s * scale, t.short_s * scale) for t in WORKBOOK_TIERS
    )


def windows(period_s: float) -> tuple[float, ...]:
    """Every window some tier reads, shortest first (each is one recording rule)."""
    return tuple(sorted({w for t in tiers(period_s) for w in (t.long_s, t.short_s)}))


def period_s(settings: AlertSettings) -> float:
    return settings.slo_period_days * DAY_S


# A p99 target is "99% of requests under it".
P99 = 0.99


def objectives(slo: Slo) -> list[Objective]:
    """The SLOs ``[slo]`` sets (a threshold of 0 sets none): TTFT from every engine's histogram,
    and goodput from a gate's metrics."""
    out = []
    if slo.ttft_p99_s > 0:
        out.append(Objective("ttft", P99, slo.ttft_p99_s, f"TTFT under {slo.ttft_p99_s:g}s"))
    if slo.goodput_min > 0:
        bound = slo.ttft_p99_s or None
        out.append(Objective("goodput", slo.goodput_min, bound, "goodput at the gate"))
    return out


def window_text(seconds: float) -> str:
    """A PromQL duration: ``1h``, ``5m``, ``3d``, ``90s``, whole units only."""
    s = round(seconds * 1000)
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if s % size == 0:
            return f"{s // size}{unit}"
    return f"{s}ms"
