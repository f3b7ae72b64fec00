"""Queues bounded by time, on a clock the test moves: the budget and where it comes from, the
refusal at once when the estimated wait is past it (with a Retry-After from the drain rate),
the shedding of a waiter at its deadline, and priorities kept inside it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace

import pytest

from gpuwatch.gate import deadline
from gpuwatch.gate.admission import AdmissionLane, Refused, Ticket, Waiter
from gpuwatch.gate.classes import Who
from gpuwatch.gate.lanetimes import LaneTimes
from gpuwatch.gate.limits import LaneLimits, Limits, LimitsError, apply_patch


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    # Futures are made on it, never run: the lane's step that takes no time (``enter``).
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def lane_with(clock: Clock, **limits: object) -> AdmissionLane:
    base = LaneLimits(max_inflight=2, max_queue=100, queue_timeout_s=30.0)
    return AdmissionLane("chat", replace(base, **limits), clock=clock)  # type: ignore[arg-type]


def serve(lane: AdmissionLane, clock: Clock, loop: asyncio.AbstractEventLoop, n: int,
          prefill_s: float, held_s: float) -> None:  # fmt: skip
    """``n`` requests through the lane one after another: each first token ``prefill_s`` after
    admission, each slot held ``held_s``: what the lane learns its times from."""
    for _ in range(n):
        ticket = lane.enter(0, Who(), clock.now, loop)
        assert isinstance(ticket, Ticket)
        clock.now += prefill_s
        ticket.first_token()
        clock.now += held_s - prefill_s
        ticket.release()


def test_the_budget_and_its_source() -> None:
    plain = LaneLimits()
    assert deadline.budget(plain, None, 0.4) is None and deadline.source(plain, None) is None
    assert deadline.budget(plain, 2.0, 1.4) == pytest.approx(0.6)  # the gate's SLO less prefill
    assert deadline.budget(plain, 2.0, 0.4) == 1.0  # never more than the queue's half
    assert deadline.source(plain, 2.0) == "slo"
    target = replace(plain, target_ttft_p99_s=1.5)
    assert deadline.budget(target, 2.0, 1.0) == pytest.approx(0.5)  # the lane's own target wins
    assert deadline.budget(target, 2.0, 3.0) == 0.0  # the engine alone takes it all: no queue
    assert deadline.budget(target, None, None) == 0.75  # not measured yet: the engine's share
    fixed = replace(target, max_queue_wait_s=0.25)
    assert deadline.budget(fixed, 2.0, 0.5) == 0.25 and deadline.source(fixed, 2.0) == (
        "max_queue_wait_s"
    )


def test_lane_times_prefill_and_littles_law_drain() -> None:
    times = LaneTimes()
    assert times.prefill_s(0.0) is None and times.drain_per_s(0.0, 4) is None
    for t in range(10):
        times.first_token(float(t), 0.1 * (t + 1))
        times.released(float(t), 2.0)
    assert times.prefill_s(9.0) == pytest.approx(0.991)  # p99 of 0.1 .. 1.0
    assert times.drain_per_s(9.0, 4) == pytest.approx(2.0)  # 4 held 2 s each: 2 a second
    assert times.drain_per_s(9.0, 0) is None
    assert times.prefill_s(100.0) is None  # all older than the window


def test_refused_at_once_when_the_estimate_is_past_the_budget(
    loop: asyncio.AbstractEventLoop,
) -> None:
    clock = Clock()
    lane = lane_with(clock, max_queue_wait_s=1.0)
    serve(lane, clock, loop, 5, prefill_s=0.2, held_s=1.0)
    held = [lane.enter(0, Who(), clock.now, loop) for _ in range(2)]  # both slots
    assert all(isinstance(t, Ticket) for t in held)
    # Two in flight, each held 1 s: two slots a second. The 1st and 2nd waiters start within
    # 0.5 and 1 s; a 3rd would wait 1.5 s, past the budget: refused now, not after a wait.
    first = lane.enter(0, Who(), clock.now, loop)
    second = lane.enter(0, Who(), clock.now, loop)
    assert isinstance(first, Waiter) and isinstance(second, Waiter)
    assert first.deadline == pytest.approx(clock.now + 1.0)
    with pytest.raises(Refused) as refused:
        lane.enter(0, Who(), clock.now, loop)
    assert refused.value.reason == "queue_deadline"
    assert "about 1.5 s" in str(refused.value) and "2 waiting ahead" in str(refused.value)
    assert refused.value.retry_after_s == 1  # 1.5 s of queue, 1 s of it within budget
    assert lane.rejected_total["queue_deadline"] == 1 and len(lane.queue) == 2


def test_a_higher_priority_counts_only_those_it_waits_behind(
    loop: asyncio.AbstractEventLoop,
) -> None:
    clock = Clock()
    lane = lane_with(clock, max_queue_wait_s=1.0)
    serve(lane, clock, loop, 5, prefill_s=0.2, held_s=1.0)
    for _ in range(2):
        lane.enter(0, Who(), clock.now, loop)
    sheddable = Who(klass="batch", priority=-1)
    for _ in range(2):
        assert isinstance(lane.enter(0, sheddable, clock.now, loop), Waiter)
    with pytest.raises(Refused):
        lane.enter(0, sheddable, clock.now, loop)  # behind 2: 1.5 s
    # A standard request is served before the sheddable ones: none ahead of it.
    assert isinstance(lane.enter(0, Who(), clock.now, loop), Waiter)


def test_a_waiter_past_its_deadline_is_shed_and_the_next_goes_on(
    loop: asyncio.AbstractEventLoop,
) -> None:
    clock = Clock()
    lane = lane_with(clock, max_queue_wait_s=0.5)
    held = lane.enter(0, Who(), clock.now, loop), lane.enter(0, Who(), clock.now, loop)
    waiter = lane.enter(0, Who(), clock.now, loop)  # no drain measured: queued, not refused
    assert isinstance(waiter, Waiter)
    clock.now += 0.4
    assert lane.shed_overdue() == 0
    clock.now += 0.2
    assert lane.shed_overdue() == 1
    exc = waiter.future.exception()
    assert isinstance(exc, Refused) and exc.reason == "queue_deadline"
    assert "past its queue-wait budget of 0.50 s" in str(exc) and exc.retry_after_s == 1
    assert not lane.queue
    later = lane.enter(0, Who(), clock.now, loop)
    assert isinstance(later, Waiter)
    held[0].release()  # type: ignore[union-attr]
    assert later.future.done() and isinstance(later.future.result(), Ticket)


def test_the_queue_timeout_still_bounds_a_lane_without_a_budget(
    loop: asyncio.AbstractEventLoop,
) -> None:
    clock = Clock()
    lane = lane_with(clock, max_inflight=0, queue_timeout_s=5.0)
    waiter = lane.enter(0, Who(), clock.now, loop)
    assert isinstance(waiter, Waiter) and waiter.deadline_reason == "queue_timeout"
    clock.now += 5.0
    assert lane.shed_overdue() == 1
    exc = waiter.future.exception()
    assert isinstance(exc, Refused) and exc.reason == "queue_timeout"


def test_a_zero_budget_admits_at_once_or_refuses(loop: asyncio.AbstractEventLoop) -> None:
    clock = Clock()
    lane = lane_with(clock, max_inflight=1, max_queue_wait_s=0)
    assert isinstance(lane.enter(0, Who(), clock.now, loop), Ticket)
    with pytest.raises(Refused) as refused:
        lane.enter(0, Who(), clock.now, loop)
    assert refused.value.reason == "queue_deadline" and "no free slot" in str(refused.value)


def test_the_slo_of_the_gate_gives_a_lane_its_budget(loop: asyncio.AbstractEventLoop) -> None:
    clock = Clock()
    lane = lane_with(clock)
    assert lane.wait_budget() is None
    lane.slo_ttft_s = 2.0
    serve(lane, clock, loop, 5, prefill_s=1.2, held_s=2.0)
    assert lane.wait_budget() == pytest.approx(0.8)


async def test_the_gates_timer_sheds_a_waiter_at_its_deadline() -> None:
    lane = AdmissionLane("chat", LaneLimits(max_inflight=1, max_queue=5, max_queue_wait_s=0.05))
    async with lane.slot():
        with pytest.raises(Refused) as refused:
            await asyncio.wait_for(lane.admit(), 5)
    assert refused.value.reason == "queue_deadline" and not lane.queue


def test_max_queue_wait_is_validated() -> None:
    base = Limits(1, False, {"chat": LaneLimits()})
    after = apply_patch(base, {"lanes": {"chat": {"max_queue_wait_s": 0}}})
    assert after.lanes["chat"].max_queue_wait_s == 0.0
    for bad in (-1, "1", True, float("inf"), 10**5000):
        with pytest.raises(LimitsError, match=r"lanes\.chat\.max_queue_wait_s"):
            apply_patch(base, {"lanes": {"chat": {"max_queue_wait_s": bad}}})
    cleared = apply_patch(after, {"lanes": {"chat": {"max_queue_wait_s": None}}})
    assert cleared.lanes["chat"].max_queue_wait_s is None


def test_prefills_are_capped_by_the_rate_first_tokens_come_out(
    loop: asyncio.AbstractEventLoop,
) -> None:
    """After a lull the lane's free slots would hand the engine a burst of prompts at once;
    streaming requests wait at the gate while ``rate x the engine's part of the target`` are
    still waiting for their first token. Non-streamed answers are not held to it."""
    clock = Clock()
    lane = lane_with(clock, max_inflight=100, target_ttft_p99_s=2.0)
    assert lane.prefill_cap() is None  # nothing measured: no cap
    for _ in range(5):  # first tokens 0.25 s apart: 4 a second
        ticket = lane.enter(0, Who(), clock.now, loop, streams=True)
        assert isinstance(ticket, Ticket)
        clock.now += 0.25
        ticket.first_token()
        ticket.release()
    assert lane.times.first_tokens_per_s(clock.now) == pytest.approx(4.0)
    assert deadline.engine_target(lane.limits) == 1.0
    assert lane.prefill_cap() == 4  # 4 a second x the engine's 1 s
    burst = [lane.enter(0, Who(), clock.now, loop, streams=True) for _ in range(6)]
    assert [isinstance(t, Ticket) for t in burst] == [True] * 4 + [False] * 2
    assert lane.prefilling == 4 and lane.inflight == 4
    plain = lane.enter(0, Who(), clock.now, loop)  # not streamed: not a prefill to hold
    assert isinstance(plain, Waiter)  # ... but it queues behind the streams (FIFO)
    first = burst[0]
    assert isinstance(first, Ticket)
    first.first_token()  # a prefill done (and the rate measured anew): the next go
    cap = lane.prefill_cap()
    assert cap is not None and cap >= 4
    assert all(isinstance(w, Ticket) or w.future.done() for w in burst)
    assert lane.prefilling == min(cap, 5)
    assert plain.future.done()  # the plain one was only behind them, never held to the cap
    held = [t if isinstance(t, Ticket) else t.future.result() for t in burst[1:]]
    before = lane.prefilling
    held[0].release()  # gone before its first token: its prefill is given back
    assert lane.prefilling == before - 1
    no_target = lane_with(clock, max_inflight=100)
    assert no_target.prefill_cap() is None  # no target: nothing to hold prefills to
