"""Admission under random churn: cancellations land at every await point, and the slots held
always equal the clients inside; when everyone has left, nothing is held or queued."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwatch.adminapi import TenantLimits
from gpuwatch.gate.admission import AdmissionLane, Refused, Ticket, Waiter
from gpuwatch.gate.classes import Who
from gpuwatch.gate.limits import LaneLimits

ops = st.lists(
    st.one_of(
        st.tuples(st.just("enter"), st.integers(0, 0)),
        st.tuples(st.just("cancel"), st.integers(0, 30)),
        st.tuples(st.just("finish"), st.integers(0, 30)),
        st.tuples(st.just("limit"), st.integers(0, 4)),
        st.tuples(st.just("pause"), st.integers(0, 1)),
        st.tuples(st.just("step"), st.integers(1, 3)),
        st.tuples(st.just("drain"), st.integers(0, 0)),
    ),
    max_size=60,
)


async def drain() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


async def play(script: list[tuple[str, int]], inflight: int, queue: int) -> None:
    lane = AdmissionLane("chat", LaneLimits(max_inflight=inflight, max_queue=queue,
                                            queue_timeout_s=0.002))  # fmt: skip
    inside: set[int] = set()
    leave: list[asyncio.Event] = []
    tasks: list[asyncio.Task[None]] = []

    async def client(n: int) -> None:
        try:
            ticket = await lane.admit()
        except Refused:
            return
        try:
            inside.add(n)
            await leave[n].wait()
        finally:
            inside.discard(n)
            ticket.release()

    for op, arg in script:
        if op == "enter":
            leave.append(asyncio.Event())
            tasks.append(asyncio.create_task(client(len(tasks))))
        elif op == "cancel" and tasks:
            tasks[arg % len(tasks)].cancel()
        elif op == "finish" and tasks:
            leave[arg % len(tasks)].set()
        elif op == "limit":
            lane.set_limits(LaneLimits(max_inflight=arg, max_queue=queue,
                                       queue_timeout_s=0.002), lane.paused)  # fmt: skip
        elif op == "pause":
            lane.set_limits(lane.limits, bool(arg))
        elif op == "step":
            for _ in range(arg):
                await asyncio.sleep(0)
        elif op == "drain":
            await drain()
            assert lane.inflight == len(inside), (lane.inflight, inside)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await drain()
    assert lane.inflight == 0 and not lane.queue and not inside


@settings(max_examples=300, deadline=None)
@given(script=ops, inflight=st.integers(0, 3), queue=st.integers(0, 5))
def test_slots_held_equal_clients_inside_under_random_cancellation(
    script: list[tuple[str, int]], inflight: int, queue: int
) -> None:
    asyncio.run(play(script, inflight, queue))


async def test_slot_context_gives_the_slot_back_on_every_exit() -> None:
    lane = AdmissionLane("chat", LaneLimits(max_inflight=1, max_queue=1))
    async with lane.slot() as ticket:
        assert lane.inflight == 1 and not ticket.released
    assert lane.inflight == 0 and ticket.released
    try:
        async with lane.slot():
            raise KeyError("boom")
    except KeyError:
        pass
    assert lane.inflight == 0


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def full_lane(clock: Clock, queue: int = 2) -> AdmissionLane:
    return AdmissionLane(
        "chat", LaneLimits(max_inflight=0, max_queue=queue, queue_timeout_s=30.0), clock=clock
    )


async def test_a_full_queue_evicts_the_newest_sheddable_waiter_and_says_why() -> None:
    clock = Clock()
    lane = full_lane(clock)
    loop = asyncio.get_running_loop()
    batch = Who("t1", "batch", -1)
    old = lane.enter(0, batch, clock(), loop)
    new = lane.enter(0, batch, clock(), loop)
    assert isinstance(old, Waiter) and isinstance(new, Waiter)
    assert lane.oldest_queued_s() == 0.0
    clock.t += 2.5
    assert lane.oldest_queued_s() == 2.5 and lane.oldest_queued_s(now=101.0) == 1.0
    critical = lane.enter(0, Who("t2", "critical", 10), clock(), loop)
    assert isinstance(critical, Waiter) and len(lane.queue) == 2
    assert not old.future.done()
    refused = new.future.exception()
    assert isinstance(refused, Refused) and refused.reason == "evicted"
    assert str(refused) == (
        "evicted from lane 'chat''s full queue for a critical request (class batch is sheddable)"
    )
    assert lane.rejected_total["evicted"] == 1
    # A standard request (priority 0) also outranks the batch one left; then none is left.
    standard = lane.enter(0, Who("t3", "standard", 0), clock(), loop)
    assert isinstance(standard, Waiter)
    assert str(old.future.exception()) == (
        "evicted from lane 'chat''s full queue for a standard request (class batch is sheddable)"
    )
    with pytest.raises(Refused) as full:
        lane.enter(0, Who("t4", "standard", 0), clock(), loop)
    assert full.value.reason == "queue_full"
    assert str(full.value) == "lane 'chat' is full: 0 in flight, 2 queued (max_queue 2)"
    assert lane.refuse_queued("stalled", "upstream stalled") == 2
    assert str(standard.future.exception()) == "upstream stalled"
    assert str(critical.future.exception()) == "upstream stalled"
    assert len(lane.queue) == 0 and lane.oldest_queued_s() == 0.0
    assert lane.rejected_total["stalled"] == 2 and lane.refuse_queued("stalled", "x") == 0


async def test_a_tenant_holding_the_queue_gives_up_its_newest_place() -> None:
    clock = Clock()
    lane = full_lane(clock, queue=3)
    loop = asyncio.get_running_loop()
    hog = [lane.enter(0, Who("hog"), clock(), loop) for _ in range(3)]
    other = lane.enter(0, Who("other"), clock(), loop)
    assert isinstance(other, Waiter)
    evicted = hog[-1].future.exception()  # type: ignore[union-attr]
    assert str(evicted) == (
        "evicted from lane 'chat''s full queue for another tenant's request "
        "(tenant 'hog' held 3 of 3 places)"
    )
    assert not hog[0].future.done()  # type: ignore[union-attr]


async def test_a_waiter_past_its_timeout_is_refused_with_how_long_it_waited() -> None:
    clock = Clock()
    lane = full_lane(clock)
    waiter = lane.enter(0, Who(), clock(), asyncio.get_running_loop())
    assert isinstance(waiter, Waiter)
    clock.t += 30.0
    assert lane.shed_overdue() == 1
    refused = waiter.future.exception()
    assert isinstance(refused, Refused) and refused.reason == "queue_timeout"
    assert str(refused) == "waited 30 s in lane 'chat''s queue"
    assert lane.rejected_total["queue_timeout"] == 1


async def test_a_paused_lane_refuses_at_once_and_says_why() -> None:
    clock = Clock()
    lane = full_lane(clock)
    lane.set_limits(lane.limits, paused=True)
    assert lane.paused is True
    with pytest.raises(Refused) as refused:
        lane.enter(0, Who(), clock(), asyncio.get_running_loop())
    assert (refused.value.reason, str(refused.value)) == (
        "paused",
        "admission is paused (the node is draining)",
    )
    assert lane.rejected_total["paused"] == 1 and len(lane.queue) == 0


def measured_lane(clock: Clock, **limits: float | None) -> AdmissionLane:
    """Two slots held, each of the last five requests held 1 s: two a second drain."""
    lane = AdmissionLane(
        "chat",
        LaneLimits(max_inflight=2, max_queue=4, queue_timeout_s=30.0, **limits),  # type: ignore[arg-type]
        clock=clock,
    )
    for _ in range(5):
        lane.times.released(clock(), 1.0)
    return lane


async def test_a_refusal_past_the_budget_or_a_full_queue_says_when_to_come_back() -> None:
    clock = Clock()
    loop = asyncio.get_running_loop()
    lane = measured_lane(clock, max_queue_wait_s=1.0)
    for _ in range(2):
        lane.enter(0, Who(), clock(), loop)
    waiters = [lane.enter(0, Who(), clock(), loop) for _ in range(2)]  # 0.5 and 1 s away
    assert all(isinstance(w, Waiter) and w.deadline == 101.0 for w in waiters)
    assert all(w.deadline_reason == "queue_deadline" and w.budget_s == 1.0 for w in waiters)  # type: ignore[union-attr]
    with pytest.raises(Refused) as late:
        lane.enter(0, Who(), clock(), loop)
    assert str(late.value) == (
        "lane 'chat' cannot start this request within its queue-wait budget of 1.00 s: "
        "about 1.5 s (2 waiting ahead, 2 in flight)"
    )
    assert late.value.retry_after_s == 1
    # Without a budget: queued up to max_queue, then refused with the queue's drain time.
    lane = measured_lane(clock)
    for _ in range(6):
        lane.enter(0, Who(), clock(), loop)
    with pytest.raises(Refused) as full:
        lane.enter(0, Who(), clock(), loop)
    assert full.value.reason == "queue_full" and full.value.retry_after_s == 3  # 5 / 2 a s
    assert str(full.value) == "lane 'chat' is full: 2 in flight, 4 queued (max_queue 4)"


async def test_a_budget_as_long_as_the_timeout_leaves_the_timeout_in_charge() -> None:
    clock = Clock()
    loop = asyncio.get_running_loop()
    lane = measured_lane(clock, max_queue_wait_s=30.0)
    for _ in range(2):
        lane.enter(0, Who(), clock(), loop)
    waiter = lane.enter(0, Who(), clock(), loop)
    assert isinstance(waiter, Waiter)
    assert (waiter.deadline, waiter.deadline_reason) == (130.0, "queue_timeout")


async def test_a_waiter_shed_at_its_budget_says_how_long_it_waited() -> None:
    clock = Clock()
    loop = asyncio.get_running_loop()
    lane = measured_lane(clock, max_queue_wait_s=3.0)
    for _ in range(2):
        lane.enter(0, Who(), clock(), loop)
    waiters = [lane.enter(0, Who(), clock(), loop) for _ in range(4)]  # 0.5 .. 2 s away
    clock.t += 3.25
    for _ in range(5):  # two a second again, measured since
        lane.times.released(clock(), 1.0)
    assert lane.shed_overdue() == 4
    first = waiters[0].future.exception()  # type: ignore[union-attr]
    assert isinstance(first, Refused) and first.reason == "queue_deadline"
    assert str(first) == (
        "waited 3.25 s in lane 'chat''s queue, past its queue-wait budget of 3.00 s"
    )
    # Shed first, with three still queued behind it: 2 s to drain them, within the budget.
    assert first.retry_after_s == 1
    assert lane.rejected_total["queue_deadline"] == 4 and not lane.queue


async def test_a_cancel_that_lands_as_the_slot_is_handed_over_gives_the_slot_back() -> None:
    lane = AdmissionLane("chat", LaneLimits(max_inflight=1, max_queue=4))
    held = await lane.admit()
    task = asyncio.create_task(lane.admit())
    await asyncio.sleep(0)  # queued
    held.release()  # the waiter's ticket is handed over ...
    task.cancel()  # ... and its client leaves before it runs
    with pytest.raises(asyncio.CancelledError):
        await task
    assert lane.inflight == 0 and not lane.queue
    assert isinstance(await lane.admit(), type(held))  # the slot is free again


async def test_a_head_that_leaves_lets_the_next_waiter_that_fits_in() -> None:
    lane = AdmissionLane("chat", LaneLimits(max_inflight=4, max_queue=4, max_inflight_tokens=100))
    held = await lane.admit(60)
    big = asyncio.create_task(lane.admit(50))
    await asyncio.sleep(0)
    small = asyncio.create_task(lane.admit(30))
    await asyncio.sleep(0)
    assert len(lane.queue) == 2  # the small one waits behind the big one
    big.cancel()
    with pytest.raises(asyncio.CancelledError):
        await big
    ticket = await asyncio.wait_for(small, 5)
    assert ticket.tokens == 30 and lane.inflight_tokens == 90
    held.release()
    ticket.release()


async def test_a_waiter_over_a_lowered_budget_is_refused_and_the_next_admitted() -> None:
    lane = AdmissionLane("chat", LaneLimits(max_inflight=1, max_queue=4, max_inflight_tokens=100))
    held = await lane.admit(10)
    big = asyncio.create_task(lane.admit(80))
    small = asyncio.create_task(lane.admit(20))
    await asyncio.sleep(0)
    lane.set_limits(LaneLimits(max_inflight=1, max_queue=4, max_inflight_tokens=50), False)
    with pytest.raises(Refused) as over:
        await big
    assert over.value.reason == "over_token_budget"
    assert str(over.value) == (
        "request needs 80 tokens (prompt + max output); lane 'chat''s budget in flight is 50"
    )
    assert not small.done()  # the slot is still held
    held.release()
    assert (await asyncio.wait_for(small, 5)).tokens == 20
    # A request exactly at the budget is admitted; one over it refused at once.
    lane2 = AdmissionLane("chat", LaneLimits(max_inflight=2, max_inflight_tokens=50))
    (await lane2.admit(50)).release()
    with pytest.raises(Refused):
        await lane2.admit(51)


async def test_a_streamed_answer_holds_a_prefill_until_its_first_token() -> None:
    lane = AdmissionLane("chat", LaneLimits(max_inflight=4))
    streamed = await lane.admit(streams=True)
    plain = await lane.admit()
    assert lane.prefilling == 1
    plain.first_token()
    assert lane.prefilling == 1  # not a streamed one
    streamed.first_token()
    streamed.first_token()  # once
    assert lane.prefilling == 0 and streamed.first_at is not None
    streamed.release()
    assert lane.prefilling == 0
    gone = await lane.admit(streams=True)
    gone.release()  # released before its first token: its prefill is given back
    gone.first_token()
    assert lane.prefilling == 0 and lane.inflight == 1
    plain.release()
    plain.release()
    assert lane.inflight == 0 and lane.admitted_total == 3


async def test_a_paused_tenant_is_refused_at_once_and_the_others_admitted() -> None:
    lane = AdmissionLane("chat", LaneLimits(max_inflight=4))
    lane.tenants.limits = {"alice": TenantLimits(paused=True)}
    with pytest.raises(Refused) as refused:
        await lane.admit(who=Who("alice"))
    assert (refused.value.reason, str(refused.value)) == (
        "tenant_paused",
        "tenant 'alice' is paused",
    )
    assert lane.rejected_total["tenant_paused"] == 1
    (await lane.admit(who=Who("bob"))).release()


async def test_a_ticket_says_how_long_it_waited_and_reserves_no_token_unasked() -> None:
    clock = Clock()
    loop = asyncio.get_running_loop()
    lane = AdmissionLane("chat", LaneLimits(max_inflight=1, max_inflight_tokens=10), clock=clock)
    held = lane.enter(0, Who(), clock(), loop)
    waiter = lane.enter(0, Who(), clock(), loop)
    assert isinstance(held, Ticket) and isinstance(waiter, Waiter) and held.queue_wait_s == 0.0
    clock.t += 2.5
    held.release()
    assert waiter.future.result().queue_wait_s == 2.5
    waiter.future.result().release()
    ticket = await lane.admit()  # no tokens asked: none reserved
    assert lane.inflight_tokens == 0
    ticket.release()


async def test_cancelled_waiters_at_the_head_are_skipped_for_the_next() -> None:
    lane = AdmissionLane("chat", LaneLimits(max_inflight=1, max_queue=4))
    held = await lane.admit()
    gone = asyncio.create_task(lane.admit())
    await asyncio.sleep(0)
    staying = asyncio.create_task(lane.admit())
    await asyncio.sleep(0)
    gone.cancel()  # its future is cancelled now; its handler runs after the release below
    held.release()  # the cancelled head is dropped, the next one gets the slot
    with pytest.raises(asyncio.CancelledError):
        await gone  # leaving a queue it was already dropped from is no error
    ticket = await asyncio.wait_for(staying, 5)
    assert lane.inflight == 1 and not lane.queue
    ticket.release()


async def test_a_waiter_refused_under_a_lowered_budget_lets_the_next_that_fits_in() -> None:
    lane = AdmissionLane("chat", LaneLimits(max_inflight=4, max_queue=4, max_inflight_tokens=100))
    held = await lane.admit(30)
    big = asyncio.create_task(lane.admit(80))
    await asyncio.sleep(0)
    small = asyncio.create_task(lane.admit(20))
    await asyncio.sleep(0)
    assert len(lane.queue) == 2
    lane.set_limits(LaneLimits(max_inflight=4, max_queue=4, max_inflight_tokens=60), False)
    with pytest.raises(Refused):
        await big
    assert small.done() and lane.inflight_tokens == 50  # admitted in the same pump
    (await small).release()
    held.release()


async def test_a_waiter_shed_at_its_budget_is_told_when_the_queue_behind_it_drains() -> None:
    clock = Clock()
    loop = asyncio.get_running_loop()
    lane = AdmissionLane(
        "chat", LaneLimits(max_inflight=2, max_queue=10, max_queue_wait_s=0.5), clock=clock
    )
    for _ in range(2):
        lane.enter(0, Who(), clock(), loop)
    waiters = [lane.enter(0, Who(), clock(), loop) for _ in range(6)]  # nothing measured yet
    for _ in range(5):
        lane.times.released(clock(), 1.0)  # since: two slots a second
    clock.t += 0.6
    lane.shed_overdue()
    first = waiters[0].future.exception()  # type: ignore[union-attr]
    assert isinstance(first, Refused)
    assert first.retry_after_s == 3  # five still queued: 3 s to drain, less the 0.5 s budget


async def test_the_gate_s_slo_caps_prefills_on_a_lane_without_a_target() -> None:
    clock = Clock()
    loop = asyncio.get_running_loop()
    lane = AdmissionLane("chat", LaneLimits(max_inflight=100), clock=clock)
    for _ in range(5):  # first tokens 0.25 s apart: 4 a second
        ticket = lane.enter(0, Who(), clock(), loop, streams=True)
        assert isinstance(ticket, Ticket)
        clock.t += 0.25
        ticket.first_token()
        ticket.release()
    assert lane.prefill_cap() is None
    lane.slo_ttft_s = 2.0
    assert lane.prefill_cap() is not None
