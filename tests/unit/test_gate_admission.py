"""Admission under random churn: cancellations land at every await point, and the slots held
always equal the clients inside; when everyone has left, nothing is held or queued."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwatch.gate.admission import AdmissionLane, Refused, Waiter
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
