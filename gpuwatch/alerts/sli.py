"""Where each SLI's good and total requests are read: the histograms and counters, per stack.

One table for both evaluators: the Prometheus rules query these names, and the node reads the
same series from its scrapes, so the two count the same requests.

A histogram counts requests under each bucket bound, not under any latency: "TTFT under the
target" is read at the largest bound at or under the target (a request counted good surely met
it), and every rule and line says which bound that is.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpuwatch.buckets import GATE_LATENCY_BUCKETS, TTFT_BUCKETS
from gpuwatch.sources.dialects import DIALECTS, GATE, GATE_REFUSED_TOTAL, Dialect


@dataclass(frozen=True)
class TtftSource:
    """One stack's TTFT histogram and the bucket bounds it is exported with by default."""

    dialect: str
    histogram: str
    bounds: tuple[float, ...]


def ttft_sources() -> list[TtftSource]:
    """Every TTFT histogram a dialect reads, once each (the gate's apart: it is goodput's)."""
    seen: dict[str, TtftSource] = {}
    for dialect in DIALECTS:
        if dialect is GATE:
            continue
        for name in dialect.histograms.get("ttft", ()):
            # vLLM V1's bounds: SGLang, LMDeploy and Ray's re-export use the same list.
            seen.setdefault(name, TtftSource(dialect.name, name, tuple(TTFT_BUCKETS)))
    return list(seen.values())


GATE_TTFT = GATE.histograms["ttft"][0]
GATE_BOUNDS = tuple(GATE_LATENCY_BUCKETS)
GATE_REFUSED = GATE_REFUSED_TOTAL


def bound_at_or_under(bounds: Iterable[float], target: float) -> float | None:
    """The largest finite bucket bound at or under ``target``; None when every bound is over
    it (no request can be told to be under the target)."""
    under = [b for b in bounds if math.isfinite(b) and b <= target + 1e-12]
    return max(under) if under else None


def le_values(bound: float) -> Sequence[str]:
    """How exporters write a bound in ``le``: Python's ``1.0``, Go's and Rust's ``1``."""
    return list(dict.fromkeys((repr(float(bound)), f"{bound:g}")))


def le_regex(bound: float) -> str:
    """A PromQL regex matching ``le`` however the exporter wrote ``bound``."""
    return "|".join(v.replace(".", "\\\\.") for v in le_values(bound))


def dialect_of(name: str) -> Dialect | None:
    return next((d for d in DIALECTS if d.name == name), None)
