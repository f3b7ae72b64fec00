"""The badge's rules (gpuwatch/monitor/health.py): the judged level and its hysteresis."""

from __future__ import annotations

import math

import pytest

from gpuwatch.monitor.health import (
    SIGNALS,
    HealthTracker,
    Verdict,
    at_once,
    badge_text,
    badness,
    judge,
)

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


def test_at_the_threshold_is_tight_and_past_it_overloaded() -> None:
    assert judge({"waiting_high": 10}, {"waiting_high": 10}) == Verdict(
        "TIGHT", "waiting 10 (100% of 10)"
    )
    assert judge({"waiting_high": 10}, {"waiting_high": 10.5}).level == "OVERLOADED"
    assert judge({"waiting_high": 10}, {"waiting_high": 8}) == Verdict(
        "TIGHT", "waiting 8 (80% of 10)"
    )  # TIGHT from 80% on
    assert judge({"waiting_high": 10}, {"waiting_high": 7.9}) == Verdict("OK", "waiting 8 (of 10)")


def test_the_verdict_names_the_rule_that_spoke_at_every_level() -> None:
    slo = {"waiting_high": 10.0}
    for value, level in ((1.0, "OK"), (9.0, "TIGHT"), (20.0, "OVERLOADED")):
        verdict = judge(slo, {"waiting_high": value})
        assert (verdict.level, verdict.signal) == (level, "waiting_high")
    assert judge(slo, {}).signal is None


def test_a_windowed_signal_without_a_window_says_no_window() -> None:
    verdict = judge({"ttft_p99_s": 1.0}, {"ttft_p99_s": 0.5})
    assert verdict.reason == "p99 TTFT 500ms (of 1.00s)"
    tracker = HealthTracker({"ttft_p99_s": 1.0})
    assert tracker.update(0.0, {"ttft_p99_s": 0.5})[0].reason == verdict.reason


def test_a_rule_switched_off_or_without_a_value_is_not_judged() -> None:
    assert judge({"waiting_high": 0}, {"waiting_high": 50}).level == "NO DATA"
    assert judge({"waiting_high": None}, {"waiting_high": 50}).level == "NO DATA"
    assert judge({"waiting_high": 10}, {"waiting_high": None}).level == "NO DATA"


def test_of_two_signals_equally_bad_the_first_rule_speaks() -> None:
    verdict = judge(
        {"kv_usage_high": 0.5, "waiting_high": 10}, {"kv_usage_high": 0.4, "waiting_high": 8}
    )
    assert verdict.signal == "kv_usage_high"


def test_goodput_is_judged_on_the_share_it_may_miss() -> None:
    goodput = SIGNALS["goodput_min"]
    assert badness(goodput, 0.98, 0.99) == pytest.approx(2.0)  # missed 2% of the 1% allowed
    assert badness(goodput, 1.0, 0.99) == 0.0
    # A target of 100%: nothing may miss; any miss is past it, none is no badness at all.
    assert badness(goodput, 0.999, 1.0) == math.inf
    assert badness(goodput, 1.0, 1.0) == 0.0
    assert badness(goodput, 1.0, 1.5) == 0.0  # a nonsense target above 100%: never past it
    assert badness(goodput, 0.5, 1.5) == math.inf
    verdict = judge({"goodput_min": 0.99}, {"goodput_min": 0.9915})
    assert verdict == Verdict("TIGHT", "goodput 99.2% (near 99.0%)")


def test_a_stall_speaks_before_any_statistic_but_only_once_it_is_past() -> None:
    slo = {"stall_after_s": 30.0, "waiting_high": 10.0}
    stalled = judge(slo, {"stall_after_s": 31.0, "waiting_high": 100.0})
    assert stalled.signal == "stall_after_s" and badge_text(stalled) == "STALLED"
    # Not yet stalled (under its threshold), or at it: the worse statistic speaks.
    for quiet in (29.0, 30.0):
        verdict = judge(slo, {"stall_after_s": quiet, "waiting_high": 100.0})
        assert verdict.signal == "waiting_high" and badge_text(verdict) == "OVERLOADED"
    # A stall quieter than a statistic, both under their thresholds: the ratio decides.
    assert judge(slo, {"stall_after_s": 1.0, "waiting_high": 9.0}).signal == "waiting_high"
    assert judge(slo, {"stall_after_s": 29.0, "waiting_high": 1.0}).signal == "stall_after_s"


def test_the_badge_reads_stalled_only_for_an_overload_that_is_a_stall() -> None:
    assert badge_text(Verdict("OVERLOADED", "x", "stall_after_s")) == "STALLED"
    assert badge_text(Verdict("OVERLOADED", "x", "waiting_high")) == "OVERLOADED"
    assert badge_text(Verdict("TIGHT", "x", "stall_after_s")) == "TIGHT"
    assert badge_text(Verdict("OK", "x")) == "OK"


def test_only_a_stall_starting_or_ending_skips_the_hold() -> None:
    stall = Verdict("OVERLOADED", "x", "stall_after_s")
    busy = Verdict("OVERLOADED", "x", "waiting_high")
    ok = Verdict("OK", "x", "waiting_high")
    assert at_once(stall, ok) and at_once(ok, stall) and at_once(stall, busy)
    assert not at_once(busy, ok) and not at_once(ok, busy)
    assert not at_once(Verdict("TIGHT", "x", "stall_after_s"), ok)  # a level, not a stall
    assert not at_once(Verdict("OVERLOADED", "x"), ok)  # no rule named


def test_a_fresh_badge_waits_and_reports_changes_only_when_they_happen() -> None:
    tracker = HealthTracker(SLO)
    assert tracker.shown == Verdict("NO DATA", "waiting for the first answer")
    assert tracker.pending(0.0) is None
    assert tracker.update(0.0, OK) == (Verdict("OK", "KV 10% (of 90%)"), True)
    assert tracker.update(1.0, OK)[1] is False  # same level: no change
    assert tracker.update(2.0, TIGHT)[1] is False  # pending: not shown, no change
    assert tracker.pending(2.0) == ("TIGHT", 10.0)  # the default hold is 10 s
    assert tracker.pending(7.5) == ("TIGHT", 4.5)
    assert tracker.pending(30.0) == ("TIGHT", 0.0)  # never below nothing left
    assert tracker.update(11.9, TIGHT) == (tracker.shown, False)
    assert tracker.update(12.0, TIGHT) == (Verdict("TIGHT", "KV 80% (89% of 90%)"), True)
