"""The fair queue and its lane under random churn with classes, tenants, evictions and
tenant caps: slots held equal the clients inside, every count (per tenant, per class) matches
what is live, a tenant never holds more than its cap, and when everyone has left nothing is
held, queued or remembered."""

from __future__ import annotations

import asyncio
from collections import Counter
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwatch.gate.admission import AdmissionLane, Refused
from gpuwatch.gate.classes import Who
from gpuwatch.gate.fairqueue import FairQueue
from gpuwatch.gate.limits import LaneLimits
from gpuwatch.gate.tenants import TenantLimits

WHO = [
    Who("a", "critical", 10),
    Who("a", "sheddable", -10),
    Who("b", "standard", 0),
    Who("c", "sheddable", -10),
    Who("c", "critical", 10),
]
ops = st.lists(
    st.one_of(
        st.tuples(st.just("enter"), st.integers(0, len(WHO) - 1)),
        st.tuples(st.just("cancel"), st.integers(0, 30)),
        st.tuples(st.just("finish"), st.integers(0, 30)),
        st.tuples(st.just("limit"), st.integers(0, 4)),
        st.tuples(st.just("cap"), st.integers(0, 3)),
        st.tuples(st.just("step"), st.integers(1, 3)),
        st.tuples(st.just("check"), st.integers(0, 0)),
    ),
    max_size=60,
)


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


def check(lane: AdmissionLane, inside: dict[int, Who]) -> None:
    assert lane.inflight == len(inside)
    live = Counter(w.tenant for w in inside.values())
    assert lane.tenants.inflight == live
    assert lane.tenants.classes == Counter(w.klass for w in inside.values())
    waiting = list(lane.queue)
    assert len(waiting) == len(lane.queue)
    assert lane.queue.by_tenant == Counter(w.who.tenant for w in waiting)
    assert lane.queue.by_class == Counter(w.who.klass for w in waiting)


async def play(script: list[tuple[str, int]], inflight: int, queue: int) -> None:
    lane = AdmissionLane("chat", LaneLimits(max_inflight=inflight, max_queue=queue,
                                            queue_timeout_s=0.002))  # fmt: skip
    inside: dict[int, Who] = {}
    leave: list[asyncio.Event] = []
    tasks: list[asyncio.Task[None]] = []
    cap: int | None = None
    take = lane.tenants.take

    def take_within_cap(who: Who) -> None:
        # Checked at the moment a slot is issued: tickets from before a lowered cap may remain.
        assert who.tenant != "a" or cap is None or lane.tenants.inflight["a"] < cap
        take(who)

    lane.tenants.take = take_within_cap  # type: ignore[method-assign]

    async def client(n: int, who: Who) -> None:
        try:
            ticket = await lane.admit(0, who)
        except Refused:
            return
        try:
            inside[n] = who
            await leave[n].wait()
        finally:
            inside.pop(n, None)
            ticket.release()

    for op, arg in script:
        if op == "enter":
            leave.append(asyncio.Event())
            tasks.append(asyncio.create_task(client(len(tasks), WHO[arg])))
        elif op == "cancel" and tasks:
            tasks[arg % len(tasks)].cancel()
        elif op == "finish" and tasks:
            leave[arg % len(tasks)].set()
        elif op == "limit":
            lane.set_limits(LaneLimits(max_inflight=arg, max_queue=queue,
                                       queue_timeout_s=0.002), lane.paused)  # fmt: skip
        elif op == "cap":
            cap = arg if arg < 3 else None
            lane.tenants.limits = {"a": TenantLimits(max_inflight=cap)} if cap is not None else {}
            lane.pump()
        elif op == "step":
            for _ in range(arg):
                await asyncio.sleep(0)
        elif op == "check":
            await settle()
            check(lane, inside)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await settle()
    assert lane.inflight == 0 and not lane.queue and not inside
    assert not lane.tenants.inflight and not lane.tenants.classes
    assert not lane.queue.by_tenant and not lane.queue.by_class


@settings(max_examples=300, deadline=None)
@given(script=ops, inflight=st.integers(0, 3), queue=st.integers(0, 5))
def test_accounting_holds_under_random_churn_with_classes_and_tenants(
    script: list[tuple[str, int]], inflight: int, queue: int
) -> None:
    asyncio.run(play(script, inflight, queue))


def waiter(tenant: str, klass: str, priority: int, since: float) -> SimpleNamespace:
    return SimpleNamespace(who=Who(tenant, klass, priority), since=since)


def drain(q: FairQueue[SimpleNamespace]) -> list[str]:
    order = []
    while (w := q.peek()) is not None:
        q.served(w)
        order.append(f"{w.who.tenant}{w.since:g}")
    return order


def test_priority_first_then_turns_across_tenants_fifo_within_one() -> None:
    q: FairQueue[SimpleNamespace] = FairQueue()
    for i in range(4):
        q.append(waiter("n", "standard", 0, i))
    q.append(waiter("a", "standard", 0, 10))
    q.append(waiter("b", "standard", 0, 11))
    q.append(waiter("c", "critical", 10, 12))
    q.append(waiter("a", "standard", 0, 13))
    assert drain(q) == ["c12", "n0", "a10", "b11", "n1", "a13", "n2", "n3"]
    assert not q.by_tenant and not q.by_class and len(q) == 0


def test_blocked_tenants_are_skipped_and_victims_are_sheddable_only() -> None:
    q: FairQueue[SimpleNamespace] = FairQueue()
    q.append(waiter("a", "standard", 0, 1))
    q.append(waiter("b", "standard", 0, 2))
    q.blocked = lambda tenant: tenant == "a"
    assert (head := q.peek()) is not None and head.since == 2
    assert q.victim(10) is None  # nobody sheddable
    q.append(waiter("s", "sheddable", -10, 3))
    q.append(waiter("s", "sheddable", -10, 4))
    assert q.victim(-10) is None  # not for an equal class
    assert (victim := q.victim(0)) is not None and victim.since == 4  # the lowest class's newest
    assert q.oldest_since() == 1


def test_a_full_queue_takes_places_from_the_tenant_holding_the_most() -> None:
    """Review 2: the newest of the biggest tenant at the arrival's priority, only while it
    holds two more places than the arrival's tenant; never across priorities."""
    q: FairQueue[SimpleNamespace] = FairQueue()
    for i in range(3):
        q.append(waiter("n", "standard", 0, i))
    q.append(waiter("a", "standard", 0, 9))
    hog = q.hog(Who("b", "standard", 0))
    assert hog is not None and hog[0].since == 2 and hog[1] == 3
    assert q.hog(Who("a", "standard", 0)) is not None  # 3 >= 1 + 2
    q.append(waiter("a", "standard", 0, 10))
    assert q.hog(Who("a", "standard", 0)) is None  # 3 < 2 + 2: no closer after a swap
    assert q.hog(Who("n", "standard", 0)) is None  # never from itself
    assert q.hog(Who("b", "critical", 10)) is None  # other priorities: the class rule's job
