"""Where the fleet's badges change, for ``{`` / ``}`` on the fleet in the past.

Prometheus keeps no badges: a badge at an instant is the health rules judged on that instant's
answers (the fleet in the past judges each instant on its own, with no hold). So a change is
found by reading: steps of ``step_s`` away from the cursor until the badges differ, then halving
the last step down to ``resolution_s``. A change shorter than a step can be stepped over; the
step is the price of not reading every second of half an hour (say so where it is shown).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Mapping

from gpuwatch.monitor.fleet import signals_of
from gpuwatch.monitor.health import judge
from gpuwatch.sources.prometheus import FleetReading
from gpuwatch.sources.promql import WINDOW

STEP_S = 15.0
MAX_STEPS = 120  # half an hour of 15 s steps each way
RESOLUTION_S = 1.0

Badges = dict[Hashable, str]


def badges_of(reading: FleetReading, slo: Mapping[str, float | None]) -> Badges:
    """Each row's level judged on this reading alone."""
    return {row.key: judge(slo, signals_of(row), WINDOW).level for row in reading.rows}


async def find_change(
    read: Callable[[float], Awaitable[Badges]],
    start: float,
    direction: int,
    lo: float,
    hi: float,
    step_s: float = STEP_S,
    max_steps: int = MAX_STEPS,
    resolution_s: float = RESOLUTION_S,
) -> float | None:
    """The instant the badges change next after ``start`` (``direction`` 1), or the instant
    the badges in force just before ``start`` began (-1): the first instant, to
    ``resolution_s``, whose badges differ from those at the instant before it. None when no
    change is found within ``max_steps`` steps or the bounds ``lo`` .. ``hi``."""
    # Backwards, the reference is the state just before the cursor: from the instant a state
    # began, `{` then finds where the previous one began (not the same instant again).
    same_at = start if direction > 0 else max(lo, start - resolution_s)
    reference = await read(same_at)
    for _ in range(max_steps):
        probe = same_at + direction * step_s
        probe = min(hi, probe) if direction > 0 else max(lo, probe)
        if probe == same_at:
            return None
        if await read(probe) != reference:
            return await _boundary(read, same_at, probe, reference, resolution_s)
        same_at = probe
    return None


async def _boundary(
    read: Callable[[float], Awaitable[Badges]],
    same: float,
    other: float,
    reference: Badges,
    resolution_s: float,
) -> float:
    """Halve the span between ``same`` (badges as ``reference``) and ``other`` (badges not)
    down to ``resolution_s``; the later of the two instants around the change: forwards the
    first instant of the new badges, backwards the first instant of ``reference``'s."""
    while abs(other - same) > resolution_s:
        middle = (same + other) / 2
        if await read(middle) == reference:
            same = middle
        else:
            other = middle
    return max(same, other)
