"""limits_moved: when a gate's status says the limits shown are no longer its limits."""

from __future__ import annotations

from gpuwatch.adminapi import EffectiveLimits, GateStatus, LaneLimits, LaneStatus, Limits
from gpuwatch.polling import limits_moved

SHOWN = Limits(3, False, {"chat": LaneLimits(max_inflight=8)})


def status(version: int = 3, paused: bool = False, effective: int | None = 8) -> GateStatus:
    return GateStatus(version, paused, {"chat": LaneStatus(effective_max_inflight=effective)})


def test_the_same_version_pause_and_limits_in_force_have_not_moved() -> None:
    assert not limits_moved(SHOWN, status())
    # A gate that does not say what is in force: left to the read every LIMITS_EVERY_S.
    assert not limits_moved(SHOWN, status(effective=None))


def test_another_version_the_pause_or_a_controller_s_limit_has_moved() -> None:
    assert limits_moved(SHOWN, status(version=4))
    assert limits_moved(SHOWN, status(version=1))  # a gate restarted without its state
    assert limits_moved(SHOWN, status(paused=True))
    assert limits_moved(SHOWN, status(effective=5))  # the adaptive controller cut chat
    adaptive = Limits(3, False, SHOWN.lanes, effective={"chat": EffectiveLimits(5)})
    assert not limits_moved(adaptive, status(effective=5))
    assert limits_moved(adaptive, status(effective=6))
