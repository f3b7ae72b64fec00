"""The gate's admission lane on a simulated clock (gate/offline.py), as ``plan sweep`` and the
dashboard's scenarios drive it: the lane's own decisions, step by step, with no event loop."""

from __future__ import annotations

from gpuwatch.gate.admission import AdmissionLane
from gpuwatch.gate.classes import Who
from gpuwatch.gate.limits import LaneLimits
from gpuwatch.gate.offline import OfflineLane, SimClock


def _lane(limits: LaneLimits) -> tuple[OfflineLane[str], SimClock]:
    clock = SimClock()
    return OfflineLane(AdmissionLane("chat", limits, clock=clock)), clock


def test_slots_then_the_queue_then_refusals_and_the_queue_moves_on_in_order() -> None:
    gate, _ = _lane(LaneLimits(max_inflight=2, max_queue=2, queue_timeout_s=10.0))
    assert [gate.arrive(k) for k in "abcde"] == [["a"], ["b"], [], [], []]
    assert gate.refused == [("e", "queue_full")] and gate.queued == 2
    assert gate.finished("a") == ["c"]
    assert gate.finished("c") == ["d"]
    assert gate.finished("nobody") == [] and gate.lane.inflight == 2
    assert gate.lane.rejected_total == {"queue_full": 1}
    assert gate.lane.tenants.refused[("standard", "queue_full")] == 1  # as the proxy counts
    gate.close()


def test_a_waiter_is_refused_when_its_time_in_the_queue_is_up_on_the_clock() -> None:
    gate, clock = _lane(LaneLimits(max_inflight=1, max_queue=5, queue_timeout_s=2.0))
    gate.arrive("a")
    clock.now = 1.0
    gate.arrive("b")
    clock.now = 2.5
    assert gate.tick() == [] and gate.refused == []  # b has waited 1.5 s of its 2
    clock.now = 3.0
    assert gate.tick() == [] and gate.refused == [("b", "queue_timeout")]
    assert gate.queued == 0 and gate.lane.rejected_total == {"queue_timeout": 1}
    assert gate.finished("a") == []  # nobody left to admit
    gate.close()


def test_the_token_budget_and_a_higher_class_evicting_a_sheddable_waiter() -> None:
    gate, _ = _lane(
        LaneLimits(max_inflight=10, max_queue=1, queue_timeout_s=10.0, max_inflight_tokens=100)
    )
    batch, chat = Who("t1", "sheddable", -10), Who("t2", "critical", 10)
    assert gate.arrive("a", 60, chat) == ["a"]
    assert gate.arrive("b", 60, batch) == []  # 120 > 100 tokens: it waits
    assert gate.arrive("c", 30, chat) == []  # the queue is full: b is evicted for c
    assert gate.refused == [("b", "evicted")]
    assert gate.arrive("d", 101, chat) == [] and gate.refused[-1] == ("d", "over_token_budget")
    assert gate.finished("a") == ["c"]
    gate.close()


def test_lowering_the_limits_holds_admissions_and_raising_them_admits_at_once() -> None:
    gate, _ = _lane(LaneLimits(max_inflight=1, max_queue=5, queue_timeout_s=10.0))
    gate.arrive("a")
    gate.arrive("b")
    gate.arrive("c")
    assert gate.set_limits(LaneLimits(max_inflight=3, max_queue=5, queue_timeout_s=10.0)) == [
        "b",
        "c",
    ]
    gate.close()


def test_the_wait_budget_sheds_at_the_deadline_and_refuses_at_once_when_the_wait_is_long() -> None:
    """The lane's clock is the simulation's: it learns its drain rate from the tickets the
    driver releases, and estimates, sheds and refuses on simulated time."""
    gate, clock = _lane(
        LaneLimits(max_inflight=1, max_queue=10, queue_timeout_s=30.0, max_queue_wait_s=1.5)
    )
    # Three requests served one after the other, each holding the slot 1 s: drain 1/s.
    for k in "abc":
        assert gate.arrive(k) == [k]
        gate.first_token(k)
        clock.now += 1.0
        assert gate.finished(k) == []
    assert gate.lane.drain_per_s() is None  # nothing in flight: no rate to estimate with
    assert gate.arrive("d") == ["d"]
    assert gate.lane.drain_per_s() == 1.0
    assert gate.arrive("e") == []  # one slot frees in about 1 s: within 1.5 s, it waits
    assert gate.arrive("f") == [] and gate.refused == [("f", "queue_deadline")]  # about 2 s
    clock.now += 1.5
    assert gate.tick() == [] and gate.refused[-1] == ("e", "queue_deadline")  # shed on time
    assert gate.lane.rejected_total == {"queue_deadline": 2}
    gate.close()
