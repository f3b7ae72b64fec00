"""Send a plan's recommended limits to a gate as one change, through the one ``Guard``.

Read-only refuses before anything is sent (not even the GET). Otherwise: the limits now in
force (a fresh GET, whose version becomes If-Match), the change described line by line, the
caller's confirmation, then one PATCH with ``X-Gpuwatch-Actor: plan`` (the gate audits it). A
change made by someone else between the GET and the PATCH is a 409, never overwritten.
"""

from __future__ import annotations

from collections.abc import Callable

from gpuwatch.adminapi import Limits
from gpuwatch.control.gate import GateClient, GateError
from gpuwatch.control.guard import Guard, confirmation_reason
from gpuwatch.plan.recommend import Recommendation

ACTOR = "plan"


def describe(before: Limits, rec: Recommendation) -> list[str]:
    """``chat.max_inflight 16 -> 99`` per limit (unchanged ones say so)."""
    lane = before.lanes.get(rec.lane)
    lines = []
    for key, new in rec.limits().items():
        old = lane.value(key) if lane else None
        shown = "null" if new is None else str(new)
        was = "null" if old is None else str(old)
        lines.append(f"{rec.lane}.{key} {was} -> {shown}" + (" (unchanged)" if old == new else ""))
    return lines


async def apply(
    admin_url: str,
    token: str | None,
    guard: Guard,
    rec: Recommendation,
    confirm: Callable[[list[str], str | None], bool],
) -> Limits | None:
    """The gate's limits after the change, or None when the operator said no."""
    guard.check(f"applying the plan's limits to {admin_url}")
    async with GateClient(admin_url, token, guard, actor=ACTOR) as client:
        before = await client.limits()
        if rec.lane not in before.lanes:
            raise GateError(None, f"the gate has no lane {rec.lane!r}")
        patch = rec.patch()
        if not confirm(describe(before, rec), confirmation_reason(before, patch)):
            return None
        return await client.patch(patch, if_match=before.version)
