"""The adaptive controller's decisions on synthetic windows: cut on a tail over target, and at
once on the engine's own signals (its queue growing, KV at the high mark, preemptions); slow
start until the first cut, then add while under target with a queue; hold after a TTFT cut, at
most once a second, never outside the bounds; and the measure it decides on."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gpuwatch.gate.adaptive import (
    HOLD_S,
    MIN_SAMPLES,
    Aimd,
    Gradient,
    Measure,
    engine_target,
    measure,
    tokens_for,
)
from gpuwatch.gate.latency import Record
from gpuwatch.gate.limits import LaneLimits, Limits, LimitsError, apply_patch
from gpuwatch.gate.upstream_metrics import reading_of
from gpuwatch.sources.scrape import map_page

LANE = LaneLimits(max_inflight=16, min_inflight=2, policy="adaptive", target_ttft_p99_s=2.0)


def window(
    p99: float | None,
    queued: int = 0,
    samples: int = 20,
    *,
    preemptions: float = 0.0,
    kv_usage: float | None = None,
    engine_waiting: float | None = None,
    turned_away: int = 0,
) -> Measure:
    return Measure(p99, 0.0, samples, queued, preemptions, kv_usage, engine_waiting, turned_away)


def test_over_target_cuts_a_quarter_and_says_why() -> None:
    d = Aimd().decide(10.0, LANE, 16, window(2.6))
    assert d is not None and d.direction == "down" and d.inflight == 12
    assert d.reason == "-25%: p99 TTFT 2.6s > 1.0s"  # the engine's half of the 2 s target


def after_a_cut(at: float = 0.0) -> Aimd:
    """A controller past its slow start: it cut once at ``at`` (preemptions), and its hold is
    over by ``at + HOLD_S``."""
    ctl = Aimd()
    assert ctl.decide(at, LANE, 16, window(None, samples=0, preemptions=1)) is not None
    return ctl


def test_under_target_with_a_queue_adds_one_after_the_first_cut() -> None:
    d = after_a_cut().decide(HOLD_S, LANE, 12, window(0.7, queued=5))
    assert d is not None and d.direction == "up" and d.inflight == 13
    assert d.reason == "+1: p99 TTFT 0.70s <= 1.0s, 5 queued"


def test_close_under_the_target_it_holds() -> None:
    # 0.8 s of the engine's 1.0 s: no cut, and no probing either (probing there overshoots).
    ctl = after_a_cut()
    assert ctl.decide(HOLD_S, LANE, 12, window(0.8, queued=5)) is None
    assert ctl.note == "in the zone: p99 TTFT 0.80s within 1.0s"


def test_demand_turned_away_is_demand_too() -> None:
    # A queue short in time refuses rather than queues: no one waits, yet the limit binds.
    d = after_a_cut().decide(HOLD_S, LANE, 12, window(0.7, turned_away=30))
    assert d is not None and d.reason == "+1: p99 TTFT 0.70s <= 1.0s, 30 turned away"
    ctl = after_a_cut()
    assert ctl.decide(HOLD_S, LANE, 12, window(0.7)) is None and "not binding" in ctl.note


def test_the_engine_holds_its_share_of_the_target_the_queue_the_rest() -> None:
    assert engine_target(LANE) == 1.0
    assert engine_target(replace(LANE, max_queue_wait_s=0.5)) == 1.5
    assert engine_target(replace(LANE, max_queue_wait_s=30.0)) == pytest.approx(0.2)
    assert engine_target(replace(LANE, target_ttft_p99_s=None)) is None


def test_slow_start_doubles_until_the_first_cut_then_adds() -> None:
    wide = replace(LANE, min_inflight=4, max_inflight=256)
    ctl = Aimd()
    limits = [4]
    for t in range(1, 5):
        d = ctl.decide(float(t), wide, limits[-1], window(0.5, queued=50))
        assert d is not None and d.direction == "up"
        limits.append(d.inflight)
    assert limits == [4, 8, 16, 32, 64] and ctl.note == "slow start"
    cut = ctl.decide(5.0, wide, 64, window(0.5, queued=50, preemptions=2))
    assert cut is not None and cut.inflight == 48
    # Held after the cut, then the additive step: 5% of 48, within 1/32 of the span.
    assert ctl.decide(5.0 + HOLD_S - 0.5, wide, 48, window(0.5, queued=50)) is None
    d = ctl.decide(5.0 + HOLD_S, wide, 48, window(0.5, queued=50))
    assert d is not None and d.inflight == 48 + 3 and ctl.note == "adding"


def test_the_engines_queue_growing_cuts_at_once_to_what_it_batches() -> None:
    # No TTFT sample yet (the overload's first second): the engine's own queue says it all.
    ctl = Aimd()
    d = ctl.decide(1.0, LANE, 16, window(None, queued=40, samples=0, engine_waiting=5))
    assert d is not None and d.direction == "down" and d.inflight == 11
    assert d.reason == "-31%: upstream queue growing to 5"
    # Within the hold a TTFT cut would wait; the engine's signals do not (once a second).
    assert ctl.decide(1.5, LANE, 11, window(None, samples=0, engine_waiting=9)) is None
    d = ctl.decide(2.0, LANE, 11, window(None, samples=0, engine_waiting=9))
    assert d is not None and d.inflight == 6  # at most half at once: 11 - 9 = 2 -> 5.5 -> 6
    # A queue that shrinks is the last cut working: no cut, and no increase while it lasts.
    assert ctl.decide(3.0 + HOLD_S, LANE, 6, window(0.3, queued=40, engine_waiting=4)) is None
    assert ctl.note == "upstream queue 4: not adding"


def test_a_request_waiting_a_step_upstream_is_no_sign() -> None:
    d = Aimd().decide(1.0, LANE, 8, window(0.5, queued=3, engine_waiting=1))
    assert d is not None and d.direction == "up"


def test_kv_at_the_high_mark_cuts_at_once() -> None:
    ctl = Aimd(kv_high=0.9)
    d = ctl.decide(1.0, LANE, 10, window(None, queued=3, samples=0, kv_usage=0.92))
    assert d is not None and d.inflight == 9 and "KV 92% >= 90%" in d.reason
    assert Aimd().decide(1.0, LANE, 10, window(None, queued=3, samples=0, kv_usage=0.92)) is None


def test_no_queue_no_increase() -> None:
    ctl = Aimd()
    assert ctl.decide(10.0, LANE, 8, window(0.5, queued=0)) is None
    assert "not binding" in ctl.note


def test_too_few_samples_no_increase() -> None:
    ctl = Aimd()
    assert ctl.decide(10.0, LANE, 8, window(0.5, queued=3, samples=MIN_SAMPLES - 1)) is None


def test_preemptions_cut_even_under_target() -> None:
    d = Aimd().decide(10.0, LANE, 8, window(0.5, queued=3, preemptions=4))
    assert d is not None and d.inflight == 6 and "4 preemptions" in d.reason


def test_preemptions_cut_during_a_hold() -> None:
    ctl = Aimd()
    assert ctl.decide(10.0, LANE, 16, window(3.0)) is not None  # a TTFT cut: hold
    d = ctl.decide(11.0, LANE, 12, window(3.0, preemptions=2))
    assert d is not None and d.inflight == 9


def test_never_below_the_floor_nor_above_the_ceiling() -> None:
    ctl = Aimd()
    assert ctl.decide(10.0, LANE, 2, window(9.0)) is None
    assert "floor 2" in ctl.note
    d = Aimd().decide(10.0, LANE, 3, window(9.0))
    assert d is not None and d.inflight == 2  # floor(3 * 0.75) = 2, the floor
    ctl = Aimd()
    assert ctl.decide(10.0, LANE, 16, window(0.1, queued=9)) is None
    assert "ceiling 16" in ctl.note
    # An effective limit left outside by a change of bounds is judged from inside them.
    d = Aimd().decide(10.0, LANE, 40, window(3.0))
    assert d is not None and d.inflight == 12


def test_holds_after_a_cut_and_decides_at_most_once_a_second() -> None:
    ctl = Aimd()
    assert ctl.decide(10.0, LANE, 16, window(3.0)) is not None
    assert ctl.since == 10.0  # requests admitted before the cut are not judged any more
    assert ctl.decide(10.0 + HOLD_S - 0.1, LANE, 12, window(3.0)) is None
    assert ctl.decide(10.0 + HOLD_S, LANE, 12, window(3.0)) is not None
    assert ctl.decide(10.0 + HOLD_S + 0.5, LANE, 9, window(0.1, queued=4)) is None
    assert ctl.decide(10.0 + HOLD_S + 1.0, LANE, 9, window(0.1, queued=4)) is None  # held
    up = ctl.decide(10.0 + 2 * HOLD_S, LANE, 9, window(0.1, queued=4))
    assert up is not None and up.inflight == 10
    assert ctl.decide(10.0 + 2 * HOLD_S + 0.9, LANE, 10, window(0.1, queued=4)) is None


def test_token_budget_moves_with_the_count_within_its_bounds() -> None:
    lane = replace(LANE, max_inflight_tokens=32_000, min_inflight_tokens=8_000)
    assert tokens_for(lane, 16) == 32_000
    assert tokens_for(lane, 8) == 16_000
    assert tokens_for(lane, 2) == 8_000  # 4,000 scaled, held at the floor
    assert tokens_for(LANE, 8) is None
    d = Aimd().decide(10.0, lane, 16, window(3.0))
    assert d is not None and d.tokens == 24_000


def test_measure_judges_ttft_after_admission_since_the_cut() -> None:
    records = [
        Record(arrived=0.0, queue_wait_s=1.0, ttft_s=1.5, e2e_s=2.0),  # admitted at 1: before
        Record(arrived=4.0, queue_wait_s=3.0, ttft_s=3.4, e2e_s=5.0),  # 0.4 after admission
        Record(arrived=5.0, queue_wait_s=0.0, ttft_s=0.2, e2e_s=1.0),
        Record(arrived=8.0, queue_wait_s=0.5),  # admitted at 8.5, no first token at 10
        Record(arrived=9.0, outcome="refused", queue_wait_s=0.5, e2e_s=0.5),  # timed out
        Record(arrived=9.5),  # still queued
    ]
    m = measure(records, now=10.0, since=2.0, queued=1)
    assert m.samples == 3 and m.queued == 1
    assert m.engine_ttft_p99_s == pytest.approx(1.5, rel=0.05)  # the in-flight one, 1.5 s so far
    assert m.queue_wait_p99_s is not None and m.queue_wait_p99_s <= 3.0


def test_gradient_follows_the_minimum_not_a_target() -> None:
    ctl = Gradient()
    first = ctl.decide(1.0, LANE, 8, window(1.0))
    assert first is not None and first.inflight > 8  # at the minimum: grow by the headroom
    # Twice the minimum latency, still far under the 2 s target: the gradient cuts anyway.
    d = ctl.decide(2.0, LANE, first.inflight, window(1.9))
    assert d is not None and d.direction == "down"


def test_limits_validate_an_adaptive_lane() -> None:
    base = Limits(1, False, {"chat": LaneLimits()})
    with pytest.raises(LimitsError, match="target_ttft_p99_s"):
        apply_patch(base, {"lanes": {"chat": {"policy": "adaptive"}}})
    with pytest.raises(LimitsError, match="min_inflight"):
        apply_patch(
            base,
            {"lanes": {"chat": {"policy": "adaptive", "target_ttft_p99_s": 1, "min_inflight": 20}}},
        )
    with pytest.raises(LimitsError, match="policy"):
        apply_patch(base, {"lanes": {"chat": {"policy": "auto"}}})
    with pytest.raises(LimitsError, match="target_ttft_p99_s"):
        apply_patch(base, {"lanes": {"chat": {"target_ttft_p99_s": float("nan")}}})
    after = apply_patch(
        base,
        {
            "lanes": {"chat": {"policy": "adaptive", "target_ttft_p99_s": 1, "min_inflight": 4}},
            # What GET /admin/limits answered, sent back: the effective limits are ignored.
            "effective": {"chat": {"max_inflight": 3}},
        },
    )
    chat = after.lanes["chat"]
    assert chat.policy == "adaptive" and chat.target_ttft_p99_s == 1.0 and chat.max_inflight == 16


FIXTURES = Path(__file__).parent.parent / "fixtures" / "metrics"


def test_the_upstreams_page_in_its_own_dialect() -> None:
    vllm = reading_of(map_page("u", (FIXTURES / "vllm-1.prom").read_text()))
    assert vllm is not None and vllm.kv_usage == 0.0 and vllm.preemptions_total == 0.0
    llama = reading_of(map_page("u", (FIXTURES / "llamacpp-1.prom").read_text()))
    assert llama is not None and llama.kv_usage is None  # llama.cpp exports none: unknown
    assert reading_of(map_page("u", "<html>no</html>")) is None


def test_the_step_up_is_a_share_of_the_limit_within_a_share_of_the_bounds() -> None:
    wide = replace(LANE, min_inflight=4, max_inflight=260)  # span 256: at most +8 a decision
    d = after_a_cut().decide(HOLD_S, wide, 60, window(0.5, queued=3))
    assert d is not None and d.inflight == 63 and d.reason.startswith("+3:")  # 5% of 60
    d = after_a_cut().decide(HOLD_S, wide, 200, window(0.5, queued=3))
    assert d is not None and d.inflight == 208  # 5% would be 10: the span's share caps it
    d = after_a_cut().decide(HOLD_S, wide, 257, window(0.5, queued=3))
    assert d is not None and d.inflight == 260  # never over the ceiling
    d = Aimd().decide(10.0, wide, 200, window(0.5, queued=3))
    assert d is not None and d.inflight == 260  # slow start too
