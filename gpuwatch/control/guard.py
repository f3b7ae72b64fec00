"""The one guard in front of every change: read-only mode and the confirmation policy.

Every path that changes the world (the ``limits`` command, the TUI's keys) asks ``Guard.check``
first, so read-only is enforced in exactly one place.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuwatch.adminapi import LaneLimits, Limits, LimitsPatch
from gpuwatch.errors import GpuwatchError


class ReadOnlyError(GpuwatchError):
    """A change refused because gpuwatch runs read-only."""


@dataclass
class Guard:
    read_only: bool = False
    reason: str = "read-only mode (--read-only)"

    def check(self, action: str) -> None:
        if self.read_only:
            raise ReadOnlyError(f"{action} refused: {self.reason}")


PAUSE_REASON = "pause admission: in-flight requests finish, new ones are refused"


def cut_by_more_than_half(was: float, now: float) -> bool:
    """The confirmation's rule for a limit: one that had room and loses more than half of it
    (a gate's lane here, a stack's own knob in ``control/knobs/apply.py``)."""
    return was > 0 and now < was / 2


def lane_capacity(lane: LaneLimits) -> int:
    return lane.max_inflight + lane.max_queue


def confirmation_reason(before: Limits, patch: LimitsPatch) -> str | None:
    """Why a change needs the operator to confirm it, or None.

    Pausing, and any change that cuts a lane's capacity (in flight + queued) by more than half.
    """
    if patch.paused is True and not before.paused:
        return PAUSE_REASON
    for name, changes in patch.lanes.items():
        old = before.lanes.get(name)
        if old is None:
            continue
        new = old.with_values(changes)
        for key, was, now in (
            ("max_inflight", old.max_inflight, new.max_inflight),
            ("max_queue", old.max_queue, new.max_queue),
        ):
            if key in changes and cut_by_more_than_half(was, now):
                return f"lane {name}: {key} {was} -> {now} cuts it by more than half"
        if cut_by_more_than_half(lane_capacity(old), lane_capacity(new)):
            return f"lane {name}: capacity {lane_capacity(old)} -> {lane_capacity(new)}"
    return None
