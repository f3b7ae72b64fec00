"""One probe in simulated time (pure, no clock, no sockets): the simulator's engine
(``gpuwatch.sim.engine.Engine``) with a simulated gate in front, fed the sweep's traffic.

The gate is the real gate's admission model for one lane: at most ``max_inflight`` requests in
the engine, then a FIFO queue of ``max_queue``, arrivals beyond it refused at once
(``queue_full``), queued ones refused after ``queue_timeout_s`` (``queue_timeout``), and
``max_output_tokens`` clamping max_tokens. No limits (``GateLimits()``) is a server without a
gate: everything goes straight into the engine's own queue.

Per request: TTFT from its arrival at the gate to its first token (queue wait included, as the
user feels it), its largest gap between tokens, and its status. Arrivals stop at the probe's
duration; requests still in flight then are run to their end, so every arrived request counts.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

from gpuwatch.plan.probe import Outcome, ProbeResult, Target, summarize
from gpuwatch.plan.traffic import Traffic
from gpuwatch.series import sample_quantile
from gpuwatch.sim.engine import Engine, Request
from gpuwatch.sim.profiles import Profile


@dataclass(frozen=True)
class GateLimits:
    """The chat lane's limits (None: unbounded)."""

    max_inflight: int | None = None
    max_queue: int | None = None
    queue_timeout_s: float | None = None
    max_output_tokens: int | None = None


@dataclass
class _Tracked:
    at_gate: float
    first: float | None = None
    max_gap: float = 0.0
    status: str = "ok"
    counted: bool = True  # chat requests count toward goodput; embed ones only load the engine


def run_probe(
    profile: Profile,
    traffic: Traffic,
    rate: float,
    duration_s: float,
    target: Target,
    limits: GateLimits | None = None,
    seed: int = 0,
) -> ProbeResult:
    """Simulate ``duration_s`` seconds of arrivals at ``rate`` and judge them against
    ``target``."""
    wall0 = time.perf_counter()
    limits = limits or GateLimits()
    engine = Engine(profile, seed=seed)
    max_len = profile.model.max_model_len
    arrivals = deque(traffic.arrivals(rate, duration_s, seed))
    tracked: dict[str, _Tracked] = {}
    queue: deque[Request] = deque()
    inflight = 0
    gaps: list[float] = []
    batches: list[int] = []
    # Requests waiting anywhere: the gate's queue and the engine's own.
    queue_peak = kv_peak_blocks = 0
    cap_inflight = limits.max_inflight if limits.max_inflight is not None else 1 << 60
    cap_queue = limits.max_queue if limits.max_queue is not None else 1 << 60
    timeout = limits.queue_timeout_s
    last_finish = 0.0
    n = 0

    def admit(req: Request) -> None:
        nonlocal inflight
        req.arrival = engine.now
        engine.add(req)
        if tracked[req.rid].counted:
            inflight += 1

    while True:
        now = engine.now
        while arrivals and arrivals[0].t <= now:
            a = arrivals.popleft()
            prompt = min(a.prompt, max_len - 1)
            if a.lane == "embed":
                rid = f"e{n}"
                tracked[rid] = _Tracked(a.t, counted=False)
                engine.add(Request(rid, prompt, 1, engine.now))
                n += 1
                continue
            output = a.output
            if limits.max_output_tokens is not None:
                output = min(output, limits.max_output_tokens)
            output = max(1, min(output, max_len - prompt))
            rid = f"r{n}"
            n += 1
            tracked[rid] = _Tracked(a.t)
            req = Request(rid, prompt, output, a.t)
            if inflight < cap_inflight and not queue:
                admit(req)
            elif len(queue) < cap_queue:
                queue.append(req)
            else:
                tracked[rid].status = "queue_full"
        if timeout is not None:
            while queue and now - tracked[queue[0].rid].at_gate > timeout:
                tracked[queue.popleft().rid].status = "queue_timeout"
        while queue and inflight < cap_inflight:
            admit(queue.popleft())
        queue_peak = max(queue_peak, len(queue) + len(engine.waiting))
        if engine.idle:
            if not arrivals:
                break
            engine.now = arrivals[0].t
            continue
        result = engine.step()
        if result.duration == 0:
            # Nothing could be scheduled (cannot happen with a validated profile, whose pool
            # holds max_model_len): wait for the next arrival, or stop; the rest count as misses.
            if not arrivals:
                break
            engine.now = arrivals[0].t
            continue
        batches.append(len(engine.running) + len(engine.waiting))
        kv_peak_blocks = max(kv_peak_blocks, engine.used_blocks)
        for ev in result.events:
            tr = tracked.get(ev.request.rid)
            if tr is None or not tr.counted:
                continue
            if ev.kind == "token":
                if tr.first is None:
                    tr.first = ev.time
                if ev.gap is not None:
                    gaps.append(ev.gap)
                    tr.max_gap = max(tr.max_gap, ev.gap)
            elif ev.kind == "finished":
                inflight -= 1
                last_finish = ev.time
    outcomes = [
        Outcome(
            tr.first - tr.at_gate if tr.first is not None else None,
            tr.max_gap if tr.first is not None else None,
            tr.status if tr.first is not None or tr.status != "ok" else "failed",
        )
        for tr in tracked.values()
        if tr.counted
    ]
    result_, _ = summarize(rate, duration_s, outcomes, gaps, target, max(duration_s, last_finish))
    batches.sort()
    result_.kv_peak = kv_peak_blocks / engine.total_blocks if engine.total_blocks else None
    result_.preemptions = engine.preemptions
    result_.queue_peak = queue_peak
    result_.batch_p99 = round(sample_quantile(batches, 0.99)) if batches else 0
    result_.batch_max = batches[-1] if batches else 0
    result_.wall_s = time.perf_counter() - wall0
    return result_
