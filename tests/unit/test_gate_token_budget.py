"""A lane's token budget (max_inflight_tokens): reservations, FIFO, the over-budget refusal,
both limits at once, release exactly once, PATCH validation, old state files."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gpuwatch.gate.admission import AdmissionLane, Refused
from gpuwatch.gate.limits import (
    MAX_TOKENS,
    LaneLimits,
    Limits,
    LimitsError,
    apply_patch,
    from_json,
)


def lane(budget: int | None = 100, inflight: int = 16, timeout: float = 30.0) -> AdmissionLane:
    return AdmissionLane("chat", LaneLimits(inflight, 64, timeout, max_inflight_tokens=budget))


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_admits_only_while_the_sum_fits_and_releases_once() -> None:
    a = lane(100)
    first = await a.admit(60)
    assert a.inflight_tokens == 60
    second = asyncio.create_task(a.admit(50))
    await settle()
    assert not second.done() and len(a.queue) == 1  # 60 + 50 > 100: waits
    first.release()
    first.release()  # a second release gives nothing back twice
    ticket = await asyncio.wait_for(second, 1)
    assert a.inflight_tokens == 50 and ticket.tokens == 50
    ticket.release()
    assert a.inflight_tokens == 0 and a.inflight == 0


async def test_fifo_the_head_waits_even_when_a_smaller_one_behind_it_fits() -> None:
    a = lane(100)
    held = await a.admit(60)
    big = asyncio.create_task(a.admit(50))
    await settle()
    small = asyncio.create_task(a.admit(30))  # 60 + 30 fits, but it is behind the big one
    await settle()
    assert not big.done() and not small.done() and len(a.queue) == 2
    held.release()
    t_big, t_small = await asyncio.wait_for(asyncio.gather(big, small), 1)
    assert a.inflight_tokens == 80
    t_big.release()
    t_small.release()
    assert a.inflight_tokens == 0


async def test_a_request_over_the_whole_budget_is_refused_at_once() -> None:
    a = lane(100)
    with pytest.raises(Refused) as info:
        await a.admit(101)
    assert info.value.reason == "over_token_budget"
    assert "101" in str(info.value) and "100" in str(info.value)
    assert not a.queue and a.rejected_total["over_token_budget"] == 1
    (await a.admit(100)).release()  # exactly the budget fits


async def test_both_limits_apply() -> None:
    by_count = lane(1000, inflight=1)
    held = await by_count.admit(10)
    waiting = asyncio.create_task(by_count.admit(10))  # tokens fit; the count does not
    await settle()
    assert not waiting.done()
    held.release()
    (await asyncio.wait_for(waiting, 1)).release()
    by_tokens = lane(100, inflight=16)
    held = await by_tokens.admit(90)
    waiting = asyncio.create_task(by_tokens.admit(20))  # a slot is free; the tokens are not
    await settle()
    assert not waiting.done()
    held.release()
    (await asyncio.wait_for(waiting, 1)).release()
    assert by_tokens.inflight_tokens == 0


async def test_no_budget_means_no_token_limit() -> None:
    a = lane(None)
    tickets = [await a.admit(MAX_TOKENS) for _ in range(3)]
    assert a.inflight_tokens == 3 * MAX_TOKENS
    for t in tickets:
        t.release()
    assert a.inflight_tokens == 0


async def test_a_lowered_budget_refuses_a_queued_head_that_can_never_fit() -> None:
    a = lane(100)
    held = await a.admit(90)
    big = asyncio.create_task(a.admit(80))
    small = asyncio.create_task(a.admit(5))
    await settle()
    a.set_limits(LaneLimits(16, 64, 30.0, max_inflight_tokens=70), False)
    with pytest.raises(Refused) as info:
        await asyncio.wait_for(big, 1)
    assert info.value.reason == "over_token_budget"
    await settle()
    assert not small.done()  # 90 + 5 is over 70: it waits for the held one
    held.release()
    (await asyncio.wait_for(small, 1)).release()
    assert a.inflight_tokens == 0 and not a.queue


async def test_a_head_that_leaves_the_queue_lets_the_next_one_in() -> None:
    a = lane(100)
    held = await a.admit(60)
    big = asyncio.create_task(a.admit(50))
    await settle()
    small = asyncio.create_task(a.admit(30))
    await settle()
    big.cancel()  # the client of the head went away
    ticket = await asyncio.wait_for(small, 1)
    assert a.inflight_tokens == 90
    ticket.release()
    held.release()
    assert a.inflight_tokens == 0


async def test_a_head_that_expires_lets_the_next_one_in() -> None:
    a = AdmissionLane("chat", LaneLimits(16, 64, 30.0, max_inflight_tokens=100))
    held = await a.admit(60)
    a.limits = LaneLimits(16, 64, 0.05, max_inflight_tokens=100)  # only the big one times out
    big = asyncio.create_task(a.admit(50))
    await settle()
    a.limits = LaneLimits(16, 64, 30.0, max_inflight_tokens=100)
    small = asyncio.create_task(a.admit(30))
    with pytest.raises(Refused):
        await asyncio.wait_for(big, 1)
    (await asyncio.wait_for(small, 1)).release()
    held.release()
    assert a.inflight_tokens == 0


def test_patch_accepts_a_budget_and_null() -> None:
    base = Limits(1, False, {"chat": LaneLimits()})
    assert LaneLimits().max_inflight_tokens is None
    after = apply_patch(base, {"lanes": {"chat": {"max_inflight_tokens": 96_000}}})
    assert after.lanes["chat"].max_inflight_tokens == 96_000
    cleared = apply_patch(after, {"lanes": {"chat": {"max_inflight_tokens": None}}})
    assert cleared.lanes["chat"].max_inflight_tokens is None


@pytest.mark.parametrize("value", [0, -1, MAX_TOKENS + 1, "1000", 1.5, True, [1], {"a": 1}])
def test_patch_refuses_a_bad_budget(value: object) -> None:
    base = Limits(1, False, {"chat": LaneLimits()})
    with pytest.raises(LimitsError) as info:
        apply_patch(base, {"lanes": {"chat": {"max_inflight_tokens": value}}})
    assert info.value.field == "lanes.chat.max_inflight_tokens"


def test_an_old_state_without_the_key_loads() -> None:
    old = {"version": 3, "paused": False, "lanes": {"chat": {"max_inflight": 8, "max_queue": 4}}}
    limits = from_json(old, {"chat": LaneLimits()})
    assert limits.lanes["chat"].max_inflight == 8
    assert limits.lanes["chat"].max_inflight_tokens is None
    saved: Any = limits.to_json()  # read back as the JSON it is
    assert saved["lanes"]["chat"]["max_inflight_tokens"] is None
    assert from_json(saved, {"chat": LaneLimits()}) == Limits(saved["version"], False, limits.lanes)
