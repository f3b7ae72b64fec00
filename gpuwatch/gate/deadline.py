"""Queues bounded by time: a lane's queue-wait budget, and the estimate that refuses at once.

A request that waits longer than its user's TTFT target has already failed, however well it
is served afterwards; keeping it queued only delays the ones behind it. So each queued request
gets a deadline, its arrival plus the lane's queue-wait budget:

- ``max_queue_wait_s`` when the operator set one;
- else the lane's TTFT target (``target_ttft_p99_s``, or the gate's ``[slo] ttft_p99_s`` on
  the lanes it names) less the lane's recent time from admission to first token
  (``lanetimes.py``, its p99): what is left of the target once the engine has done its part;
  never more than the queue's share of the target (``1 - ENGINE_SHARE``), which is also the
  budget until the prefill time is measured;
- else none (``queue_timeout_s`` alone bounds the wait, as before).

Why a deadline per request with an admission-time estimate, and not CoDel. CoDel's rule (drop
at the head when the *minimum* sojourn time over an interval stays above a target) is made for
packets: a drop is a signal to a TCP sender, any packet will do, and the standing queue it
fights is measured, not predicted. Here every request carries its own promise (its TTFT), a
refusal is an answer to a person that should come at once, not after a wasted wait, and the
gate can predict a wait well: slots free at a rate it measures (Little's law on its own
tickets). So: at arrival, estimate the wait (the requests that will be served before this one,
over the drain rate) and refuse at once when it exceeds the budget (429 ``queue_deadline``,
``Retry-After`` when the queue ahead will have drained enough); a request admitted to the queue
is still shed at its deadline if the estimate was wrong (the same answer). This is the
deadline-ordered rule of LLM flow-control designs (llm-d's, for one), with the queue's order left
to the fair queue: priorities and tenants' turns decide who goes first, the deadline decides who
goes at all.
"""

from __future__ import annotations

import math

from gpuwatch.gate.limits import LaneLimits

RETRY_AFTER_MAX_S = 60
# The target is what users feel: queue wait and engine together. The engine's part (TTFT after
# admission, which the adaptive controller steers) is this share of it; the rest is the queue's.
# Until the lane has measured its own prefill, the queue gets the rest of this split.
ENGINE_SHARE = 0.5
MIN_ENGINE_SHARE = 0.1  # with a fixed max_queue_wait_s as long as the target itself
# Prefills in flight (admitted, streaming, no first token yet) never fewer than this.
MIN_PREFILLS = 4


def source(limits: LaneLimits, slo_s: float | None) -> str | None:
    """Where the budget comes from: ``max_queue_wait_s``, ``target_ttft_p99_s``, ``slo`` or
    None (no budget)."""
    if limits.max_queue_wait_s is not None:
        return "max_queue_wait_s"
    if limits.target_ttft_p99_s is not None:
        return "target_ttft_p99_s"
    return "slo" if slo_s is not None else None


def budget(limits: LaneLimits, slo_s: float | None, prefill_s: float | None) -> float | None:
    """The lane's queue-wait budget now, in seconds; None: no budget (queue_timeout_s alone)."""
    where = source(limits, slo_s)
    if where == "max_queue_wait_s":
        return limits.max_queue_wait_s
    target = limits.target_ttft_p99_s if where == "target_ttft_p99_s" else slo_s
    if target is None:
        return None
    share = target * (1 - ENGINE_SHARE)
    if prefill_s is None:
        return share
    # Never more than the queue's share, even when the engine is quick: a request that waited
    # its whole budget is then admitted with others that waited as long, and their prefills
    # queue behind each other. The engine's recent p99 misses those rare waves (measured:
    # 16 requests sent in one half second at 2x the knee, each 2.1-2.4 s, with the budget at
    # the target less the p99 alone); the engine's share of the target leaves them room.
    return max(0.0, min(share, target - prefill_s))


def estimated_wait(ahead: int, drain_per_s: float | None) -> float | None:
    """Seconds until a request with ``ahead`` requests to be served before it gets a slot."""
    if drain_per_s is None or drain_per_s <= 0:
        return None
    return (ahead + 1) / drain_per_s


def retry_after(ahead: int, drain_per_s: float | None, budget_s: float) -> int:
    """Whole seconds until the queue ahead has drained enough for a request sent then to start
    within the budget (at least 1: HTTP's Retry-After counts in seconds)."""
    wait = estimated_wait(ahead, drain_per_s)
    if wait is None:
        return 1
    return max(1, min(RETRY_AFTER_MAX_S, math.ceil(wait - budget_s)))


def engine_target(limits: LaneLimits, slo_s: float | None = None) -> float | None:
    """The part of the target the engine may take, TTFT after admission: the target less the
    queue's part (``max_queue_wait_s`` when set, else ``1 - ENGINE_SHARE`` of the target)."""
    target = limits.target_ttft_p99_s if limits.target_ttft_p99_s is not None else slo_s
    if target is None:
        return None
    if limits.max_queue_wait_s is not None:
        return max(target * MIN_ENGINE_SHARE, target - limits.max_queue_wait_s)
    return target * ENGINE_SHARE


def prefill_cap(
    limits: LaneLimits, slo_s: float | None, first_tokens_per_s: float | None
) -> int | None:
    """How many streaming requests may be admitted and still wait for their first token.

    The in-flight limit bounds how many requests the engine holds, not how many prefills it is
    handed at once. After a lull the lane has many free slots, and the burst that follows lands
    in the engine in one second: every prompt queued behind the others for the prefill budget,
    the last first tokens seconds later (measured at 2x the knee: 40 admitted within a second
    after a lull to 14 of 54 in flight, first tokens up to 2.7 s later against a 2 s target,
    the engine prefilling ~9 requests a second). By Little's law, prefills finish at the rate
    first tokens come out, so holding ``rate x the engine's part of the target`` in prefill keeps
    each within that part; the rest wait at the gate, where their deadline applies and a
    refusal can come at once. None: no target, or no rate measured yet (no cap)."""
    target = engine_target(limits, slo_s)
    if target is None or first_tokens_per_s is None:
        return None
    return max(MIN_PREFILLS, math.ceil(first_tokens_per_s * target))
