"""Adaptive admission: the decisions, pure (no clock of its own, no I/O).

A lane with ``policy = "adaptive"`` has two limits: the configured ones (what the operator
set: ``max_inflight`` / ``max_inflight_tokens`` are the upper bounds, ``min_inflight`` /
``min_inflight_tokens`` the lower ones) and the effective one, which a controller moves between
them to hold ``target_ttft_p99_s``. ``adaptive_loop.py`` runs a controller once a second per
lane and applies what it decides; this module only decides.

What is measured. The engine's own signals first, read from its ``/metrics``
(``--upstream-metrics``): its waiting queue, KV usage and preemptions. They move in the first
second of an overload, before any request admitted in it has a first token, and each says the
same thing: the gate lets in more than the engine batches. Then TTFT: the gate keeps every
request (``latency.py``). The controller judges the
time to first token *after admission* (the gate's TTFT less the request's queue wait), over the
requests admitted in the last ``WINDOW_S`` and since the last decrease. That is the part the
limit controls: a lower limit makes the engine's batches smaller and its prefill queue shorter.
The user's TTFT also holds the gate's queue wait, which a *lower* limit makes longer: steering on
it would cut the limit further the more requests wait, down to the floor (a spiral). Requests
admitted but without a first token yet count with the time they have waited so far, so a stuck
engine is seen before its requests end. The queue tells whether more concurrency is wanted at
all; the upstream's preemptions (``--upstream-metrics``) say the KV cache is over-committed
before the tail shows it.

Why AIMD (and not a gradient). Envoy's adaptive concurrency and Netflix's gradient2 compare the
sampled latency with the minimum latency (``limit x minRTT / sampleRTT + headroom``): they steer
toward the least latency the service can give, and find that minimum by cutting concurrency
periodically. On an LLM engine latency grows with the batch *by design*: a bigger batch is
more throughput for somewhat more TTFT, so "as close to the minimum as possible" means small
batches and a wasted GPU, and the operator's SLO (a p99 target) is nowhere in the formula.
AIMD has the target in it: add a step (1/32 of the bounds' span) while the tail is under
target and requests wait, cut a quarter when it is over, then hold until requests admitted
under the new limit have been measured. ``Gradient`` below is the rejected alternative, kept so
``bench/adaptive.py --controller gradient`` can measure it.

Reacting at once (issue 24). An overload that arrives in one second must not fill the engine
with hundreds of requests that then clog it for minutes (preemptions, recompute), so:

- the lane starts from what is in flight when adaptive is switched on (``adaptive_loop``), not
  from its ceiling, and grows like TCP's slow start (doubling per good decision) until its
  first cut; after a cut, the additive step (the cut is the new "ssthresh");
- the engine's signals cut at once, without TTFT samples and without the hold: its waiting
  queue growing (to what it batches: the limit less those waiting there), KV at or above the
  high mark (-10%), new preemptions (-25%). At most one decision a second still holds;
- no increase while the engine has a queue of its own or its KV is at the high mark: more in
  flight would only wait there.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal, Protocol

from gpuwatch.gate import deadline
from gpuwatch.gate.latency import Record
from gpuwatch.gate.limits import LaneLimits
from gpuwatch.series import sample_quantile

# Timings, in seconds of the upstream's time. ``pace`` scales them all: 1 on a real node; 1/X
# in front of a simulator running X times faster than real time (bench/adaptive.py), so the
# controller sees the same dynamics there as it would on the node it simulates.
WINDOW_S = 10.0  # requests admitted this long ago still count (unless before a decrease)
MIN_INTERVAL_S = 1.0  # at most one decision a second
HOLD_S = 3.0  # after a decrease, no decision until this long has passed ...
MIN_SAMPLES = 3  # ... and this many requests admitted since have been measured
DECREASE = 0.75  # multiplicative cut: -25%
# Additive step: a constant per lane, 1/32 of its bounds' span (at least 1), so a lane goes from
# its floor to its ceiling in 32 good decisions whatever its size (+1 a second would take two
# minutes from 60 to 180). Constant, not a share of the current limit: AIMD's slow climb and
# fast cut are what keep it from ringing.
INCREASE_SHARE = 32
PROBE_SHARE = 0.05  # ... and 5% of the limit: see step_up
# Add only while the tail has this much room under its target. Between it and the target the
# limit holds: probing there is what overshoots (each step's wave waits in the engine's queue
# before the tail shows it), and the p99 the users get is made of those waves.
HEADROOM = 0.75
KV_HIGH = 0.95  # upstream KV usage that cuts (the gate's [slo] kv_usage_high)
KV_CUT = 0.9  # ... by this much: the KV is full, not overflowing (that is preemptions)
# Requests in the engine's own queue that are no sign of over-admission: a request that arrives
# waits a step before it is scheduled, and a scrape catches some in that step.
WAITING_SLACK = 1.0
WAITING_CUT_MAX = 0.5  # a waiting-queue cut takes at most half the limit at once
# The engine's share of the target is deadline.ENGINE_SHARE: the rest is the queue's budget,
# so that a request that waited its whole budget is still served in time.

Direction = Literal["up", "down"]


@dataclass(frozen=True)
class Measure:
    """What a lane's last window showed."""

    engine_ttft_p99_s: float | None  # TTFT after admission, p99 (see the module doc)
    queue_wait_p99_s: float | None
    samples: int  # requests behind engine_ttft_p99_s
    queued: int  # waiting now
    preemptions: float = 0.0  # upstream preemptions since the last decision
    kv_usage: float | None = None  # upstream KV cache usage, 0..1
    engine_waiting: float | None = None  # requests in the upstream's own queue
    # Refused for want of a slot (queue full, past its queue-wait budget) since the last
    # decision: demand the limit turned away. With a short queue in time it is the queue.
    turned_away: int = 0


@dataclass(frozen=True)
class Decision:
    """A change of the effective limit, and why (``-25%: p99 TTFT 2.6s > 2.0s``)."""

    direction: Direction
    inflight: int
    tokens: int | None
    reason: str


def measure(
    records: Iterable[Record],
    now: float,
    since: float,
    queued: int,
    preemptions: float = 0.0,
    kv_usage: float | None = None,
    engine_waiting: float | None = None,
    turned_away: int = 0,
) -> Measure:
    """The window from the gate's own records: those admitted after ``since``."""
    ttfts: list[float] = []
    waits: list[float] = []
    for r in records:
        wait = r.queue_wait_s
        if wait is None or r.arrived + wait <= since:
            continue
        waits.append(wait)
        if r.ttft_s is not None:
            ttfts.append(max(0.0, r.ttft_s - wait))
        elif r.e2e_s is None and r.outcome == "ok":
            ttfts.append(max(0.0, now - r.arrived - wait))  # in flight: at least this long
    ttfts.sort()
    waits.sort()
    return Measure(
        sample_quantile(ttfts, 0.99) if ttfts else None,
        sample_quantile(waits, 0.99) if waits else None,
        len(ttfts),
        queued,
        preemptions,
        kv_usage,
        engine_waiting,
        turned_away,
    )


def engine_target(limits: LaneLimits) -> float | None:
    """The p99 TTFT after admission the controller holds (``deadline.engine_target``)."""
    return deadline.engine_target(limits)


def bounds(limits: LaneLimits) -> tuple[int, int]:
    """The effective in-flight limit's bounds (the lower never above the upper)."""
    return min(limits.min_inflight, limits.max_inflight), limits.max_inflight


def clamp_inflight(limits: LaneLimits, value: int) -> int:
    low, high = bounds(limits)
    return max(low, min(high, value))


def tokens_for(limits: LaneLimits, inflight: int) -> int | None:
    """The effective token budget that goes with ``inflight``: the configured budget scaled by
    the same share of its count bound, within the token bounds (None without a budget)."""
    high = limits.max_inflight_tokens
    if high is None:
        return None
    low = limits.min_inflight_tokens or 1
    if limits.max_inflight <= 0:
        return high
    scaled = math.ceil(high * inflight / limits.max_inflight)
    return max(min(low, high), min(high, scaled))


def step_up(limits: LaneLimits, current: int) -> int:
    """The additive step after slow start: ``PROBE_SHARE`` of the current limit, at most
    1/``INCREASE_SHARE`` of the bounds' span, at least 1. After a cut the lane sits near what
    the engine batches, so it probes above that gently: a fixed share of the span (+8 a second
    on 4..260) took a lane cut to 25 back over the engine's capacity in two seconds, and every
    such wave waited in the engine's queue (the TTFT tail it was cut for)."""
    low, high = bounds(limits)
    return max(1, min((high - low) // INCREASE_SHARE, math.ceil(current * PROBE_SHARE)))


def _s(value: float) -> str:
    return f"{value:.2f}s" if value < 1 else f"{value:.1f}s"


class Controller(Protocol):
    note: str  # why the limit did not move last time (for the dashboard)
    pace: float  # the timings' scale (see WINDOW_S)

    # Requests admitted before this are not judged any more: set after each decrease, and
    # by the loop when the configured limits change (judge only what is admitted from then).
    since: float

    def decide(
        self, now: float, limits: LaneLimits, current: int, m: Measure
    ) -> Decision | None: ...


class Aimd:
    """Slow start, then additive increase; multiplicative decrease with a hold after a cut
    made on TTFT; cuts on the engine's own signals at once (see the module doc)."""

    def __init__(self, start: float = 0.0, pace: float = 1.0, kv_high: float = KV_HIGH) -> None:
        self.pace = pace
        self.kv_high = kv_high
        self._last = -math.inf
        self._hold_until = -math.inf
        self._waiting: float | None = None  # the engine's queue at the last decision
        self._ssthresh: int | None = None  # slow start until the first cut
        self.since = start  # requests admitted before this are not judged any more
        self.note = "waiting for requests"  # why the limit did not move (for the dashboard)

    def _engine_cut(self, current: int, m: Measure) -> tuple[int, str] | None:
        """A cut the engine's own signals call for now, and why; None when they call for none."""
        waiting, before = m.engine_waiting, self._waiting
        if m.preemptions > 0:
            return math.floor(current * DECREASE), f"{m.preemptions:g} preemptions upstream"
        if m.kv_usage is not None and m.kv_usage >= self.kv_high:
            why = f"upstream KV {m.kv_usage:.0%} >= {self.kv_high:.0%}"
            return math.floor(current * KV_CUT), why
        if waiting is not None and waiting > WAITING_SLACK and waiting > (before or 0.0):
            to = max(current - math.ceil(waiting), math.ceil(current * (1 - WAITING_CUT_MAX)))
            return to, f"upstream queue growing to {waiting:g}"
        return None

    def _cut(self, now: float, low: int, current: int, to: int, why: str) -> Decision | None:
        """Cut to ``to`` (within the bounds): the new ceiling of slow start, and a hold on
        increases (and on TTFT cuts) until what was admitted under it can be judged. The
        engine's signals cut again within the hold: they are about now, not about the past."""
        cut = max(low, min(current - 1, to))
        if cut >= current:
            self.note = f"at the floor {low}: {why}"
            return None
        self._ssthresh = cut
        self._hold_until = now + HOLD_S * self.pace
        self.since = now
        self.note = f"holding after a cut: {why}"
        pct = round(100 * (current - cut) / current)
        return Decision("down", cut, None, f"-{pct}%: {why}")

    def decide(self, now: float, limits: LaneLimits, current: int, m: Measure) -> Decision | None:
        if now - self._last < MIN_INTERVAL_S * self.pace:
            return None
        target = engine_target(limits)
        if target is None:
            return None
        low, high = bounds(limits)
        current = max(low, min(high, current))
        engine = self._engine_cut(current, m)
        self._waiting = m.engine_waiting
        decision: Decision | None = None
        if engine is not None:
            self._last = now
            decision = self._cut(now, low, current, engine[0], engine[1])
        elif now < self._hold_until:
            return None
        else:
            self._last = now
            decision = self._ttft_or_more(now, limits, current, m, target)
        if decision is not None:
            decision = Decision(
                decision.direction,
                decision.inflight,
                tokens_for(limits, decision.inflight),
                decision.reason,
            )
        return decision

    def _ttft_or_more(
        self, now: float, limits: LaneLimits, current: int, m: Measure, target: float
    ) -> Decision | None:
        low, high = bounds(limits)
        p99 = m.engine_ttft_p99_s
        if p99 is not None and m.samples >= MIN_SAMPLES and p99 > target:
            why = f"p99 TTFT {_s(p99)} > {_s(target)}"
            return self._cut(now, low, current, math.floor(current * DECREASE), why)
        if m.queued <= 0 and m.turned_away <= 0:
            self.note = "no queue: the limit is not binding"
            return None
        if p99 is None or m.samples < MIN_SAMPLES:
            self.note = f"measuring ({m.samples} of {MIN_SAMPLES} requests)"
            return None
        if m.engine_waiting is not None and m.engine_waiting > WAITING_SLACK:
            self.note = f"upstream queue {m.engine_waiting:g}: not adding"
            return None
        if current >= high:
            self.note = f"at the ceiling {high}: {m.queued} queued, {m.turned_away} turned away"
            return None
        if p99 > target * HEADROOM:
            self.note = f"in the zone: p99 TTFT {_s(p99)} within {_s(target)}"
            return None
        slow = self._ssthresh is None or current < self._ssthresh
        if slow:
            up = max(current + step_up(limits, current), current * 2)
            if self._ssthresh is not None:
                up = min(up, self._ssthresh)
        else:
            up = current + step_up(limits, current)
        up = min(high, up)
        self.note = "slow start" if slow else "adding"
        demand = f"{m.queued} queued" if m.queued > 0 else f"{m.turned_away} turned away"
        return Decision(
            "up", up, None, f"+{up - current}: p99 TTFT {_s(p99)} <= {_s(target)}, {demand}"
        )


GRADIENT_BUFFER = 0.25  # Envoy's default: latency up to minRTT x 1.25 is "no worse"
MIN_RTT_WINDOW_S = 30.0  # the minimum is forgotten this often (Envoy re-measures it)


class Gradient:
    """The rejected alternative: Envoy's gradient controller on the same measure.

    ``new = limit x gradient + sqrt(limit x gradient)``, ``gradient = clamp(minRTT x (1 +
    buffer) / p99, 0.5, 2)``, the sample being the window's p99 of TTFT after admission and
    minRTT the least seen in the last ``MIN_RTT_WINDOW_S``. No target in it: see the module doc.
    """

    def __init__(self, start: float = 0.0, pace: float = 1.0, kv_high: float = KV_HIGH) -> None:
        self.pace = pace
        self._last = -math.inf
        self.since = start
        self._min_rtt: float | None = None
        self._min_rtt_at = -math.inf
        self.note = "waiting for requests"

    def decide(self, now: float, limits: LaneLimits, current: int, m: Measure) -> Decision | None:
        if now - self._last < MIN_INTERVAL_S * self.pace:
            return None
        self._last = now
        p99 = m.engine_ttft_p99_s
        if p99 is None or m.samples < MIN_SAMPLES:
            self.note = f"measuring ({m.samples} of {MIN_SAMPLES} requests)"
            return None
        if (
            self._min_rtt is None
            or p99 < self._min_rtt
            or now - self._min_rtt_at > MIN_RTT_WINDOW_S * self.pace
        ):
            self._min_rtt, self._min_rtt_at = p99, now
        gradient = max(0.5, min(2.0, self._min_rtt * (1 + GRADIENT_BUFFER) / max(p99, 1e-6)))
        scaled = current * gradient
        new = clamp_inflight(limits, math.floor(scaled + math.sqrt(scaled)))
        self.since = now
        if new == current:
            self.note = f"gradient {gradient:.2f}: no change"
            return None
        direction: Direction = "up" if new > current else "down"
        return Decision(
            direction,
            new,
            tokens_for(limits, new),
            f"x{gradient:.2f}: p99 TTFT {_s(p99)} vs min {_s(self._min_rtt)}",
        )


CONTROLLERS: dict[str, Callable[[float, float, float], Controller]] = {
    "aimd": Aimd,
    "gradient": Gradient,
}
