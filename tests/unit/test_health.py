"""The badge's rules (gpuwatch/monitor/health.py): the judged level and its hysteresis."""

from __future__ import annotations

from gpuwatch.monitor.health import HealthTracker

SLO = {"kv_usage_high": 0.9}
OK = {"kv_usage_high": 0.1}  # 11% of the threshold
TIGHT = {"kv_usage_high": 0.8}  # 89%: TIGHT
OVERLOADED = {"kv_usage_high": 0.99}


def shown_after(tracker: HealthTracker, now: float, signals: dict[str, float]) -> str:
    verdict, _ = tracker.update(now, signals)
    return verdict.level


def test_a_level_that_flickers_away_waits_its_whole_hold_again_when_it_returns() -> None:
    """A -> B -> A -> B with a hold: each return of B starts its hold afresh. A tracker that
    kept the pending B (and when it began) across the A in between would show the second B at
    once: the flapping the hold exists to prevent."""
    tracker = HealthTracker(SLO, hold_s=10.0)
    assert shown_after(tracker, 0.0, OK) == "OK"  # out of NO DATA at once
    for start in (1.0, 50.0, 100.0):
        assert shown_after(tracker, start, TIGHT) == "OK"  # B pending
        assert tracker.pending(start) == ("TIGHT", 10.0)
        assert shown_after(tracker, start + 5.0, OK) == "OK"  # A again: B forgotten
        assert tracker.pending(start + 5.0) is None
        # B back after longer than the hold since it first came: still a fresh hold.
        assert shown_after(tracker, start + 12.0, TIGHT) == "OK"
        assert tracker.pending(start + 12.0) == ("TIGHT", 10.0)
        assert shown_after(tracker, start + 21.9, TIGHT) == "OK"
        assert shown_after(tracker, start + 22.0, TIGHT) == "TIGHT"  # the hold, honoured
        assert tracker.pending(start + 22.0) is None
        assert shown_after(tracker, start + 23.0, OK) == "TIGHT"  # and the way back holds too
        assert shown_after(tracker, start + 24.0, TIGHT) == "TIGHT"
        assert shown_after(tracker, start + 25.0, OK) == "TIGHT"  # OK's hold starts again
        assert shown_after(tracker, start + 35.0, OK) == "OK"


def test_a_pending_level_replaced_by_another_restarts_the_hold() -> None:
    tracker = HealthTracker(SLO, hold_s=10.0)
    shown_after(tracker, 0.0, OK)
    assert shown_after(tracker, 1.0, TIGHT) == "OK"
    assert shown_after(tracker, 8.0, OVERLOADED) == "OK"  # a new candidate: its own hold
    assert tracker.pending(8.0) == ("OVERLOADED", 10.0)
    assert shown_after(tracker, 17.9, OVERLOADED) == "OK"
    verdict, changed = tracker.update(18.0, OVERLOADED)
    assert (verdict.level, changed) == ("OVERLOADED", True)
