"""``{`` / ``}`` on the fleet in the past: where the badges change, found by reading."""

from __future__ import annotations

from gpuwatch.monitor.badgechanges import Badges, find_change

# A history: OK until 100.0, TIGHT from 100 until 137.0, OVERLOADED from 137 on; a row that
# only exists from 20 on.


def badges_at(t: float) -> Badges:
    if t < 20:
        return {}
    level = "OK" if t < 100 else "TIGHT" if t < 137 else "OVERLOADED"
    return {("a", "m", "vllm"): level}


async def read(t: float) -> Badges:
    reads.append(t)
    return badges_at(t)


reads: list[float] = []


async def test_forward_lands_on_the_first_second_of_the_new_badges() -> None:
    found = await find_change(read, 50.0, 1, 0.0, 1000.0)
    assert found is not None and 100.0 <= found < 101.0
    assert badges_at(found) != badges_at(found - 1.0)
    again = await find_change(read, found, 1, 0.0, 1000.0)  # from there: the next change
    assert again is not None and 137.0 <= again < 138.0


async def test_backward_finds_where_the_badges_in_force_began_then_the_ones_before() -> None:
    found = await find_change(read, 120.0, -1, 0.0, 1000.0)
    assert found is not None and 100.0 <= found < 101.0
    earlier = await find_change(read, found, -1, 0.0, 1000.0)  # not the same instant again
    assert earlier is not None and 20.0 <= earlier < 21.0
    assert badges_at(earlier - 1.0) == {}


async def test_no_change_within_the_steps_or_the_bounds_is_none() -> None:
    assert await find_change(read, 200.0, 1, 0.0, 1000.0) is None  # OVERLOADED to the end
    assert await find_change(read, 30.0, 1, 0.0, 1000.0, max_steps=2) is None  # 30 s of OK
    reads.clear()
    assert await find_change(read, 995.0, 1, 0.0, 1000.0) is None  # stops at now
    assert max(reads) == 1000.0
