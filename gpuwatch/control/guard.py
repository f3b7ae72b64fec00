"""The one guard in front of every change: read-only mode and the confirmation policy.

Every path that changes the world (the ``limits`` command, the TUI's keys) asks ``Guard.check``
first, so read-only is enforced in exactly one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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


def lane_capacity(lane: Mapping[str, Any]) -> int:
    return int(lane.get("max_inflight", 0)) + int(lane.get("max_queue", 0))


def confirmation_reason(before: Mapping[str, Any], patch: Mapping[str, Any]) -> str | None:
    """Why a change needs the operator to confirm it, or None.

    Pausing, and any change that cuts a lane's capacity (in flight + queued) by more than half.
    """
    if patch.get("paused") is True and not before.get("paused"):
        return "pause admission: in-flight requests finish, new ones are refused"
    for name, changes in (patch.get("lanes") or {}).items():
        old = before.get("lanes", {}).get(name)
        if old is None:
            continue
        new = {**old, **changes}
        for key in ("max_inflight", "max_queue"):
            if key in changes and old[key] > 0 and new[key] < old[key] / 2:
                return f"lane {name}: {key} {old[key]} -> {new[key]} cuts it by more than half"
        if lane_capacity(old) > 0 and lane_capacity(new) < lane_capacity(old) / 2:
            return f"lane {name}: capacity {lane_capacity(old)} -> {lane_capacity(new)}"
    return None
