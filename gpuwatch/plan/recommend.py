"""The gate limits that hold the SLO at the chosen rate (pure), each with the reason for it.

- ``max_inflight``: what the engine may hold at once. No more than the sessions whose KV fits
  (the pool over the p99 of prompt + output tokens per request: past it the engine preempts and
  recomputes), and no more than the batch the engine held at the knee (its p99 over steps):
  more in flight adds no throughput, it only moves the wait from the gate's queue, which the
  gate can bound and refuse from, into the engine's, which it cannot.
- ``max_queue``: what drains within the TTFT budget. At the knee the engine completes about
  ``knee`` requests a second; a request behind N others waits about N / knee seconds before its
  own TTFT starts. A queue longer than knee x (TTFT bound - median TTFT at the knee) only turns
  waits into timeouts: better refuse at once (429, retry elsewhere) than answer late.
- ``max_output_tokens``: only when the output tail drives KV pressure (the pool was 80% full
  or more at the knee, or the engine preempted) and there is a tail to cut (the p99 of
  max_tokens is more than twice its median): the cap is that p99, rounded up to 64 tokens.
  Otherwise no cap (null): cutting answers that do not hurt would only hurt users.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from gpuwatch.adminapi import LimitsPatch, LimitValue
from gpuwatch.plan.probe import ProbeResult, Target
from gpuwatch.plan.traffic import Traffic

KV_PRESSURE = 0.8


@dataclass(frozen=True)
class Recommendation:
    lane: str
    max_inflight: int
    max_queue: int
    max_output_tokens: int | None
    reasons: dict[str, str] = field(default_factory=dict)

    def limits(self) -> dict[str, LimitValue]:
        return {
            "max_inflight": self.max_inflight,
            "max_queue": self.max_queue,
            "max_output_tokens": self.max_output_tokens,
        }

    def patch(self) -> LimitsPatch:
        """The one change that sets them."""
        return LimitsPatch(lanes={self.lane: self.limits()})

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Recommendation:
        return cls(
            str(data["lane"]),
            int(data["max_inflight"]),
            int(data["max_queue"]),
            None if data.get("max_output_tokens") is None else int(data["max_output_tokens"]),
            {str(k): str(v) for k, v in (data.get("reasons") or {}).items()},
        )


def recommend(
    knee: float,
    at_knee: ProbeResult,
    target: Target,
    traffic: Traffic,
    kv_tokens: int | None = None,
    max_num_seqs: int | None = None,
    lane: str = "chat",
) -> Recommendation:
    reasons: dict[str, str] = {}
    session = traffic.session_quantile(0.99)
    bounds: list[tuple[int, str]] = []
    if kv_tokens:
        fit = max(1, kv_tokens // max(session, 1))
        bounds.append((fit, f"{kv_tokens:,} KV tokens / {session:,} tokens per session (p99)"))
    if at_knee.batch_p99:
        bounds.append((at_knee.batch_p99, f"the engine held {at_knee.batch_p99} at the knee (p99)"))
    if max_num_seqs:
        bounds.append((max_num_seqs, f"the engine's max_num_seqs {max_num_seqs}"))
    if bounds:
        inflight, why = min(bounds, key=lambda b: b[0])
        others = "; ".join(text for value, text in bounds if text != why)
        reasons["max_inflight"] = why + (f" (also: {others})" if others else "")
    else:
        inflight = 16
        reasons["max_inflight"] = "nothing measured the batch: the gate's default"
    inflight = max(1, inflight)

    served_p50 = at_knee.ttft_p50_s or 0.0
    budget = max(target.ttft_s - served_p50, target.ttft_s / 4)
    queue = max(1, math.floor(knee * budget))
    reasons["max_queue"] = (
        f"drains within the TTFT budget: {knee:.2f} req/s x ({target.ttft_s:g} s - "
        f"{served_p50:.2f} s median TTFT at the knee)"
        if target.ttft_s - served_p50 >= target.ttft_s / 4
        else f"drains within a quarter of the TTFT bound: {knee:.2f} req/s x "
        f"{target.ttft_s / 4:g} s"
    )

    p50, p99 = traffic.output_quantile(0.5), traffic.output_quantile(0.99)
    pressure = (at_knee.kv_peak or 0.0) >= KV_PRESSURE or bool(at_knee.preemptions)
    kv_text = (
        f"KV peak {at_knee.kv_peak:.0%}" if at_knee.kv_peak is not None else "KV peak unknown"
    ) + f", {at_knee.preemptions or 0} preemptions at the knee"
    cap: int | None = None
    if pressure and p99 > 2 * p50:
        cap = 64 * math.ceil(p99 / 64)
        reasons["max_output_tokens"] = (
            f"the output tail drives KV pressure ({kv_text}): max_tokens p99 {p99} vs median {p50}"
        )
    elif pressure:
        reasons["max_output_tokens"] = (
            f"no cap: KV is under pressure ({kv_text}) but outputs have no tail to cut "
            f"(p99 {p99}, median {p50})"
        )
    else:
        reasons["max_output_tokens"] = f"no cap: the output tail does not drive KV ({kv_text})"
    return Recommendation(lane, inflight, queue, cap, reasons)
