"""Admission under random churn: cancellations land at every await point, and the slots held
always equal the clients inside; when everyone has left, nothing is held or queued."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwatch.gate.admission import AdmissionLane, Refused
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
