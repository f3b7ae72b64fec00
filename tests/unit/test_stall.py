"""The stall detector (gpuwatch/stall.py), and the badge and fleet rules built on it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gpuwatch.fmt import duration
from gpuwatch.gate import state as gate_state
from gpuwatch.gate.admission import AdmissionLane, Refused, Ticket, Waiter
from gpuwatch.gate.classes import Who
from gpuwatch.gate.limits import DEFAULT_LANES, LaneLimits
from gpuwatch.gate.stallwatch import StallWatch, StreamTally
from gpuwatch.model import EngineSnapshot, ScrapeResult
from gpuwatch.monitor.figures import engine_figures
from gpuwatch.monitor.fleet import FleetState, stalled
from gpuwatch.monitor.health import DEFAULT_SLO, HealthTracker, badge_text
from gpuwatch.monitor.state import Monitor
from gpuwatch.sources import promql
from gpuwatch.sources.dialects import LLAMACPP, VLLM
from gpuwatch.sources.prometheus import FleetReading
from gpuwatch.sources.promql import FleetRow
from gpuwatch.stall import PROGRESS_FIELDS, StallDetector, progress_of


def feed(d: StallDetector, readings: list[tuple[float, float, float]]) -> list[bool]:
    """(time, tokens, running) readings; what the detector said after each."""
    return [d.update(t, (tokens,), running) for t, tokens, running in readings]


def test_busy_and_still_for_more_than_after_s_is_stalled_since_the_last_progress() -> None:
    d = StallDetector(10.0)
    said = feed(d, [(0, 100, 3), (1, 120, 3), (2, 120, 3), (11, 120, 3), (12.5, 120, 3)])
    # Progress last seen at t=1: at 11 it has been still for exactly 10 s (not more), at
    # 12.5 for 11.5 s.
    assert said == [False, False, False, False, True]
    assert d.since == 1 and d.stalled_for() == 11.5 and d.stalled_for(now=20) == 19
    assert (d.running, d.quiet_for(20)) == (3, 19)


def test_progress_ends_a_stall_at_once() -> None:
    d = StallDetector(5.0)
    feed(d, [(0, 10, 1), (6, 10, 1)])
    assert d.stalled
    assert feed(d, [(7, 11, 1)]) == [False]
    assert d.stalled_for(8) is None and d.since == 7


def test_no_request_is_idle_never_stalled_and_the_clock_starts_when_work_comes() -> None:
    d = StallDetector(5.0)
    # An hour without a token and without a request: idle.
    assert feed(d, [(0, 10, 0), (3600, 10, 0)]) == [False, False]
    assert d.since is None and d.quiet_for(3600) is None
    # Work arrives: the stall clock starts at the first busy reading, not at the last token.
    assert feed(d, [(3601, 10, 2), (3604, 10, 2)]) == [False, False]
    assert d.since == 3601
    assert feed(d, [(3606.5, 10, 2)]) == [True]


def test_requests_waiting_with_none_running_count_as_work() -> None:
    # A stuck scheduler admits nothing: every request waits, none runs, nothing moves.
    d = StallDetector(2.0)
    d.update(0, (5,), running=0, waiting=4)
    assert d.update(3, (5,), running=0, waiting=4)
    assert d.waiting == 4


def test_a_counter_reset_is_a_restart_not_a_stall() -> None:
    d = StallDetector(5.0)
    feed(d, [(0, 5000, 2), (4, 5000, 2)])
    # The server restarted: its counters start again from 0. That moved.
    assert feed(d, [(6, 0, 2)]) == [False]
    assert d.since == 6
    assert feed(d, [(10, 0, 2), (11.5, 0, 2)]) == [False, True]


def test_unknown_counts_or_progress_are_not_judged() -> None:
    d = StallDetector(1.0)
    assert not d.update(0, (None, None), running=3)
    assert not d.update(10, (None, None), running=3)
    assert not d.judged and d.since is None
    assert not d.update(20, (1.0, None), running=None)
    assert d.since is None
    # Judged again from the next readings on.
    assert not d.update(21, (1.0, None), running=1)
    assert d.update(22.5, (1.0, None), running=1)


def test_switched_off_never_stalls_but_still_knows_how_quiet_it_is() -> None:
    for off in (0, None):
        d = StallDetector(off)
        feed(d, [(0, 1, 1), (1000, 1, 1)])
        assert not d.stalled and d.quiet_for(1000) == 1000


def test_progress_of_an_engine_is_every_value_that_moves_while_it_works() -> None:
    snap = EngineSnapshot(
        "s", "llamacpp", None, running=1, generation_tokens_total=7, decode_steps_total=99
    )
    values = dict(zip(PROGRESS_FIELDS, progress_of(snap), strict=True))
    assert values["decode_steps_total"] == 99 and values["generation_tokens_total"] == 7
    assert values["kv_cache_usage"] is None
    # llama.cpp counts generated tokens when a request ends: one long answer moves only its
    # decode steps, and that is progress.
    d = StallDetector(5.0)
    d.update(0, progress_of(snap), snap.running)
    snap.decode_steps_total = 150
    assert not d.update(10, progress_of(snap), snap.running)


def test_duration_reads_at_a_glance() -> None:
    assert [duration(v) for v in (0.44, 23.9, 65, 3600 + 125, None)] == [
        "0.4s",
        "23s",
        "1m05s",
        "1h02m",
        "N/A",
    ]


def test_the_badge_says_stalled_at_once_and_recovers_at_once() -> None:
    tracker = HealthTracker(DEFAULT_SLO, hold_s=10.0)
    tracker.update(0, {"ttft_p99_s": 0.5, "stall_after_s": 1.0})
    tracker.update(20, {"ttft_p99_s": 0.5, "stall_after_s": 1.0})
    assert tracker.shown.level == "OK"
    # A stall is a fact that already held for its own stall_after_s: no hold on top.
    verdict, changed = tracker.update(21, {"ttft_p99_s": 0.5, "stall_after_s": 23.0})
    assert changed and verdict.level == "OVERLOADED" and badge_text(verdict) == "STALLED"
    assert verdict.reason.startswith("no progress for 23s > 10s")
    # It is the reason before a statistic that is worse by its own measure (what users get
    # follows from it).
    verdict, _ = tracker.update(21.5, {"ttft_p99_s": 90.0, "stall_after_s": 23.0})
    assert verdict.reason.startswith("no progress for 23s")
    verdict, changed = tracker.update(22, {"ttft_p99_s": 0.5, "stall_after_s": 0.0})
    assert changed and verdict.level == "OK" and badge_text(verdict) == "OK"
    # Any other OVERLOADED still waits out its hold, and reads OVERLOADED.
    verdict, changed = tracker.update(23, {"ttft_p99_s": 9.0, "stall_after_s": 0.0})
    assert not changed and verdict.level == "OK"
    verdict, _ = tracker.update(33, {"ttft_p99_s": 9.0, "stall_after_s": 0.0})
    assert verdict.level == "OVERLOADED" and badge_text(verdict) == "OVERLOADED"


def row(**values: float | None) -> FleetRow:
    base: dict[str, float | None] = {"running": 3.0, "gen_tps": 12.0, "running_min": 2.0}
    return FleetRow("10.0.0.1:8000", "m", "vllm", "n1", {**base, **values})


def test_a_fleet_row_running_all_through_the_window_with_no_progress_is_stalled() -> None:
    assert stalled(row()) is False
    assert stalled(row(gen_tps=0.0)) is True
    # Requests came and went inside the window: at some point none ran. Not a stall.
    assert stalled(row(gen_tps=0.0, running_min=0.0)) is False
    # llama.cpp: no token counted (a long answer), but forward passes run.
    assert stalled(row(gen_tps=0.0, steps_ps=31.0)) is False
    assert stalled(row(gen_tps=5.0, steps_ps=0.0)) is True
    assert stalled(row(gen_tps=None)) is None and stalled(row(running_min=None)) is None
    state = FleetState(DEFAULT_SLO, clock=lambda: 0.0)
    state.apply(FleetReading(0.0, rows=[row(gen_tps=0.0)]))
    verdict = state.verdict(state.rows[0])
    assert badge_text(verdict) == "STALLED"
    assert (
        verdict.reason == "no progress for 1m00s > 10s: at least 2 running all through the last 1m"
    )


def test_the_fleet_asks_for_each_engine_s_lowest_running_over_the_window() -> None:
    signals = {s.key: s for s in promql.SIGNALS}
    query = promql.signal_query(signals["running_min"], [VLLM])
    assert query is not None
    assert query.startswith(
        "label_replace((sum by (instance, node, model_name, model) (min_over_time("
        '{__name__="vllm:num_requests_running",'
    )
    assert query.count("[1m]") == 1
    # Forward passes are llama.cpp's alone: the one query leaves the others out.
    steps = promql.signal_query(signals["steps_ps"], [VLLM, LLAMACPP])
    assert steps is not None and "llamacpp:n_decode_total" in steps and "vllm" not in steps


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


URL = "http://n:8000/metrics"


def engine_page(tokens: float, running: float = 2, source: str = URL) -> ScrapeResult:
    snap = EngineSnapshot(
        source, "vllm", "org/m", running=running, waiting=0, generation_tokens_total=tokens
    )
    return ScrapeResult(source, [snap])


def test_the_dashboard_says_stalled_at_once_with_an_event_and_moving_again() -> None:
    clock = Clock()
    m = Monitor([URL], slo={"stall_after_s": 5.0}, clock=clock, wall=clock)
    for t, tokens in ((0, 10), (1, 20), (2, 20), (5, 20)):
        clock.t = t
        m.apply_scrape(engine_page(tokens))
        m.evaluate()
    assert m.verdict.level == "OK" and not any("STALLED" in e.text for e in m.events)
    clock.t = 7.5
    m.apply_scrape(engine_page(20))
    verdict = m.evaluate()
    # No progress since t=1 with 2 running: stalled for 6.5 s > 5 s, shown at once.
    assert badge_text(verdict) == "STALLED"
    assert verdict.reason == "no progress for 6.5s > 5.0s: vllm m @ n:8000, 2 running, 0 waiting"
    texts = [e.text for e in m.events]
    assert "vllm m @ n:8000 STALLED: no progress for 6.5s with 2 running, 0 waiting" in texts
    assert texts[-1].startswith("SLO STALLED: no progress for 6.5s")
    [view] = m.endpoints[URL].engines.values()
    clock.t = 9.0
    m.apply_scrape(engine_page(20))
    assert engine_figures(m.endpoints[URL], view, now=9.5).stalled_s == 8.5
    clock.t = 10.0
    m.apply_scrape(engine_page(21))
    verdict = m.evaluate()
    assert verdict.level == "OK" and engine_figures(m.endpoints[URL], view).stalled_s is None
    assert any(e.text == "vllm m @ n:8000 moving again after 9.0s stalled" for e in m.events)


async def test_the_gate_reads_the_page_first_and_the_streams_when_it_is_silent(
    tmp_path: Path,
) -> None:
    clock = Clock()
    lanes = {lane.name: AdmissionLane(lane.name, lane.limits) for lane in DEFAULT_LANES}
    state = gate_state.load(tmp_path / "s.json", {n: lane.limits for n, lane in lanes.items()})
    tally = StreamTally()
    watch = StallWatch(state, lanes, ["chat"], tally, 2.0, has_metrics=True, clock=clock)
    tally.begin()  # a stream in flight that gets nothing: a long prefill, a long answer...
    for t, tokens in ((0, 10), (1, 11), (2, 12), (3, 13), (4, 14)):
        clock.t = t
        watch.on_page(engine_page(tokens))
        # ...while the engine's counters move: its own page says it works.
        assert watch.tick() is None and lanes["chat"].shed is None
    assert watch.status().signal == "metrics"
    # The page stops answering (a stopped process): the silent stream decides.
    clock.t = 5
    watch.on_page(ScrapeResult(URL, error="timed out after 3 s"))
    entry = watch.tick()
    assert entry is not None and watch.status().now.signal == "streams"
    assert entry.change.to_json() == {"lanes": {"chat": {"shed": "upstream_stalled"}}}
    assert lanes["chat"].shed is not None and lanes["embed"].shed is None
    with pytest.raises(Refused) as refused:
        lanes["chat"].enter(0, Who(), 0.0, asyncio.get_running_loop())
    assert refused.value.reason == "upstream_stalled"
    # A chunk: it moves again.
    tally.chunk()
    clock.t = 6
    entry = watch.tick()
    assert entry is not None and entry.reason.startswith("upstream moving again after")
    assert lanes["chat"].shed is None and watch.status().last.signal == "streams"


async def test_a_stall_refuses_the_queue_at_once() -> None:
    lane = AdmissionLane("chat", LaneLimits(max_inflight=1, max_queue=4))
    loop = asyncio.get_running_loop()
    held = lane.enter(0, Who(), 0.0, loop)
    waiters = [lane.enter(0, Who(), 0.0, loop) for _ in range(2)]
    assert isinstance(held, Ticket) and all(isinstance(w, Waiter) for w in waiters)
    assert lane.refuse_queued("upstream_stalled", "stalled") == 2
    assert len(lane.queue) == 0 and lane.rejected_total["upstream_stalled"] == 2
    for w in waiters:
        assert isinstance(w, Waiter)
        with pytest.raises(Refused):
            w.future.result()
    held.release()
    assert lane.inflight == 0
