"""The dashboard's state without a terminal: status transitions, events, health."""

from __future__ import annotations

from typing import Any

from gpuwatch.adminapi import GateStatus, Limits
from gpuwatch.model import EngineSnapshot, GpuReading, GpuSample, ScrapeResult
from gpuwatch.monitor.health import Verdict
from gpuwatch.monitor.state import Monitor

URL = "http://127.0.0.1:8000/metrics"


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def ok(running: float = 1) -> ScrapeResult:
    return ScrapeResult(URL, [EngineSnapshot(URL, "vllm", "m", running=running, waiting=0)])


def test_up_stale_down_and_up_again_with_reasons() -> None:
    clock = Clock()
    m = Monitor([URL], interval_s=1.0, clock=clock, wall=clock)
    m.apply_scrape(ok())
    assert (
        m.endpoints[URL].status.state == "UP" and m.events == type(m.events)()
    )  # first UP is quiet
    clock.t = 1.0
    m.apply_scrape(ScrapeResult(URL, error="HTTP 500 Internal Server Error"))
    assert m.endpoints[URL].status.state == "UP"  # one bad answer is not yet stale
    clock.t = 3.5
    m.apply_scrape(ScrapeResult(URL, error="HTTP 500 Internal Server Error"))
    assert m.endpoints[URL].status.state == "STALE"
    assert m.events[-1].text == f"{URL} STALE: HTTP 500 Internal Server Error"
    clock.t = 4.0
    m.apply_scrape(ScrapeResult(URL, error="connection refused (127.0.0.1:8000)", unreachable=True))
    assert m.endpoints[URL].status.state == "DOWN" and m.events[-1].level == "bad"
    clock.t = 5.0
    m.apply_scrape(ok())
    assert m.endpoints[URL].status.state == "UP" and m.events[-1].text == f"{URL} UP again"


def test_gpu_errors_become_events_once() -> None:
    m = Monitor([])
    good = GpuSample(0, name="g")
    lost = GpuSample(0, name="g", error="GPU 0: GPU is lost")
    m.apply_gpus(GpuReading([good]))
    m.apply_gpus(GpuReading([lost]))
    m.apply_gpus(GpuReading([lost]))
    m.apply_gpus(GpuReading([good]))
    assert [e.text for e in m.events] == ["GPU 0: GPU is lost", "GPU 0 answers again"]
    m.apply_gpus(GpuReading([], "NVML unavailable: libnvidia-ml.so.1 not found"))
    assert m.events[-1].text == "GPUs DOWN: NVML unavailable: libnvidia-ml.so.1 not found"


def test_health_ignores_the_gate_and_takes_the_worst_engine() -> None:
    clock = Clock()
    m = Monitor([URL, "http://g/metrics"], slo={"waiting_high": 10}, clock=clock, wall=clock)
    m.apply_scrape(ScrapeResult(URL, [EngineSnapshot(URL, "vllm", "a", waiting=4),
                                      EngineSnapshot(URL, "vllm", "b", waiting=9)]))  # fmt: skip
    m.apply_scrape(
        ScrapeResult(
            "http://g/metrics", [EngineSnapshot("http://g/metrics", "gate", None, waiting=500)]
        )
    )
    assert m.signals()["waiting_high"] == 9
    m.health.hold_s = 0
    assert m.evaluate().level == "TIGHT" and "waiting 9 (90% of 10)" in m.verdict.reason


def test_no_signal_at_all_is_no_data_never_ok() -> None:
    clock = Clock()
    m = Monitor([URL], clock=clock, wall=clock)
    assert m.evaluate().level == "NO DATA"  # nothing has answered yet
    m.apply_scrape(ScrapeResult(URL, error="connection refused", unreachable=True))
    assert m.evaluate() == Verdict("NO DATA", "no serving engine answers")
    m.apply_scrape(ok())
    assert m.evaluate() == Verdict("NO DATA", "no SLO signal to judge yet")  # up, nothing judged
    m.apply_scrape(ScrapeResult(URL, [EngineSnapshot(URL, "vllm", "m", kv_cache_usage=0.1)]))
    # Data comes (and goes) at once; only load levels wait out the hold.
    assert m.evaluate().level == "OK" and m.events[-1].text.startswith("health OK")
    clock.t = 1.0
    m.apply_scrape(ScrapeResult(URL, error="connection refused", unreachable=True))
    assert m.evaluate().level == "NO DATA" and m.events[-1].text.startswith("no data")


def test_windowed_signals_say_their_window_in_the_reason() -> None:
    from gpuwatch.monitor.health import judge

    v = judge(
        {"ttft_p99_s": 2.0, "kv_usage_high": 0.95}, {"ttft_p99_s": 3.1, "kv_usage_high": 0.5}, "1m"
    )
    assert v == type(v)("OVERLOADED", "p99 TTFT 1m 3.10s > 2.00s")
    v = judge({"kv_usage_high": 0.95}, {"kv_usage_high": 0.97}, "1m")
    assert v.reason.startswith("KV 97% > ")  # a gauge: no window


def test_an_endpoint_never_useful_goes_stale_with_its_reason() -> None:
    clock = Clock()
    m = Monitor([URL], interval_s=1.0, clock=clock, wall=clock)
    m.apply_scrape(ScrapeResult(URL, error="no known serving metrics (first families: up)"))
    assert m.endpoints[URL].status.state == "WAITING"  # not yet three intervals
    clock.t = 3.5
    m.apply_scrape(ScrapeResult(URL, error="no known serving metrics (first families: up)"))
    status = m.endpoints[URL].status
    assert (
        status.state == "STALE" and status.reason == "no known serving metrics (first families: up)"
    )


def test_ttft_taken_apart_says_which_part_grew() -> None:
    from gpuwatch.model import Histogram
    from gpuwatch.monitor.figures import ttft_breakdown

    gate_url = "http://127.0.0.1:9000/metrics"
    clock = Clock()
    m = Monitor([URL, gate_url], clock=clock, wall=clock)
    inf = float("inf")

    def hist(fast: float, slow: float) -> Histogram:  # cumulative: fast <= 0.1 s, slow <= 2 s
        return Histogram(((0.1, fast), (2.0, fast + slow), (inf, fast + slow)))

    for t in range(0, 200, 1):
        clock.t = float(t)
        slow_queue = t >= 170  # at t=170 the engine queue starts to take seconds
        engine = EngineSnapshot(URL, "vllm", "m", kv_cache_usage=0.5)
        engine.histograms = {
            "ttft": hist(t * 2, t if slow_queue else 0),
            "queue": hist(t * 2, (t - 170) * 2 if slow_queue else 0),
            "prefill": hist(t * 2, 0),
            "decode": hist(0, t * 2),
        }
        gate = EngineSnapshot(gate_url, "gate", None)
        gate.histograms = {"ttft": hist(t * 2, t), "queue": hist(t * 2, 0)}
        m.apply_scrape(ScrapeResult(URL, [engine]))
        m.apply_scrape(ScrapeResult(gate_url, [gate]))
    b = ttft_breakdown(m)
    assert b is not None and b.measured_at == "gate" and b.window == "1m"
    assert [p.name for p in b.parts] == ["gate queue", "engine queue", "prefill"]
    by = {p.name: p for p in b.parts}
    assert by["gate queue"].p99 is not None and by["gate queue"].p99 < 0.1
    assert by["engine queue"].p99 is not None and by["engine queue"].p99 > 1.0
    assert b.decode_p99 is not None and b.decode_p99 > 1.0
    grew = b.grew()
    assert grew is not None and grew.name == "engine queue" and (grew.grew_s or 0) > 1.0


def apply_gate(
    m: Monitor,
    limits: dict[str, Any] | None,
    status: dict[str, Any] | None,
    error: str | None = None,
    *,
    current: bool = False,
) -> None:
    """The gate's answer as the client reads it off the wire."""
    m.apply_gate(
        None if limits is None else Limits.from_json(limits),
        None if status is None else GateStatus.from_json(status),
        error,
        current=current,
    )


def _status(good: int, slow: int, refused: int, ttft_p99: float) -> dict:
    tails = {
        "requests": good + slow + refused,
        "ttft": {"count": good + slow, "p50": 0.2, "p90": 0.5, "p99": ttft_p99, "max": ttft_p99},
        "queue_wait": {"count": good + slow, "p50": 0.0, "p90": 0.1, "p99": 0.3, "max": 0.4},
        "e2e": {"count": good + slow, "p50": 1.0, "p90": 2.0, "p99": 3.0, "max": 3.5},
        "itl": {"count": 100, "p50": 0.01, "p90": 0.02, "p99": 0.03, "max": 0.05},
    }
    goodput = {"ended": good + slow + refused, "good": good, "slow": slow,
               "refused": refused, "failed": 0}  # fmt: skip
    lane = {"inflight": 1, "queued": 0, "rejected_total": {},
            "latency": {"1m": tails, "5m": tails}, "goodput": {"1m": goodput, "5m": goodput}}  # fmt: skip
    return {"version": 1, "paused": False, "lanes": {"chat": lane}}


def test_with_a_gate_the_badge_judges_what_users_get() -> None:
    clock = Clock()
    m = Monitor([URL], clock=clock, wall=clock, admin_url="http://127.0.0.1:9000")
    m.health.hold_s = 0
    limits = {"version": 1, "paused": False, "lanes": {"chat": {}}}
    # The engine is fine: the gate refuses 6% and 3% were slow, so users are not.
    m.apply_scrape(ScrapeResult(URL, [EngineSnapshot(URL, "vllm", "m", kv_cache_usage=0.3)]))
    apply_gate(m, limits, _status(good=91, slow=3, refused=6, ttft_p99=0.9))
    v = m.evaluate()
    assert v == Verdict("OVERLOADED", "goodput 1m 91.0% < 99.0%: 6% refused, 3% slow")
    # Capacity restored: every request served in time.
    apply_gate(m, limits, _status(good=100, slow=0, refused=0, ttft_p99=0.9))
    assert m.evaluate().level == "OK"
    # The users' exact p99 TTFT (queue wait included) is judged too.
    apply_gate(m, limits, _status(good=100, slow=0, refused=0, ttft_p99=2.5))
    v = m.evaluate()
    assert v.level == "OVERLOADED"
    assert v.reason == "p99 TTFT 1m 2.50s > 2.00s: users at the gate, queue wait included"


def test_limits_that_went_back_are_believed_when_the_gate_says_so_twice() -> None:
    """Regression: after a gate restart at version 1 the screen kept version 7 for good, and
    every change made on it got a 409 whose fresh limits were thrown away too."""
    clock = Clock()
    m = Monitor([], clock=clock, wall=clock, admin_url="http://127.0.0.1:9000")
    assert m.gate is not None
    apply_gate(m, {"version": 7, "paused": False, "lanes": {}}, None)
    apply_gate(m, {"version": 6, "paused": False, "lanes": {}}, None)  # a poll that raced a PATCH
    assert m.gate.limits.version == 7
    apply_gate(m, {"version": 1, "paused": True, "lanes": {}}, None)
    assert m.gate.limits.version == 7  # once: maybe a race
    apply_gate(m, {"version": 1, "paused": True, "lanes": {}}, None)
    assert m.gate.limits.version == 1 and "went back from v7 to v1" in m.events[-1].text
    apply_gate(m, {"version": 9, "paused": False, "lanes": {}}, None)
    apply_gate(m, {"version": 2, "paused": False, "lanes": {}}, None, current=True)  # a 409's
    assert m.gate.limits.version == 2
    apply_gate(m, None, None, "connection refused")
    apply_gate(m, {"version": 1, "paused": False, "lanes": {}}, None)  # back after being DOWN
    assert m.gate.limits.version == 1


def test_a_move_of_the_adaptive_controller_is_one_event() -> None:
    clock = Clock()
    m = Monitor([], clock=clock, wall=clock, admin_url="http://127.0.0.1:9000")

    def status(decision: dict | None) -> dict:
        lane = {"queued": 0, "rejected_total": {}, "adaptive": {"last_decision": decision}}
        return {"lanes": {"chat": lane}}

    cut = {"time": 5.0, "direction": "down", "from": 16, "to": 12, "reason": "-25%: p99 TTFT 3.0s > 2.0s"}  # fmt: skip
    apply_gate(m, None, status(cut))  # the first poll: a decision from before, no event
    before = len(m.events)
    apply_gate(m, None, status(cut))  # the same decision polled again: nothing new
    assert len(m.events) == before
    up = {"time": 9.0, "direction": "up", "from": 12, "to": 13, "reason": "+1: p99 TTFT 0.5s <= 2.0s, 3 queued"}  # fmt: skip
    apply_gate(m, None, status(up))
    assert len(m.events) == before + 1
    assert (
        m.events[-1].text
        == "gate chat: adaptive 12 -> 13 in flight: +1: p99 TTFT 0.5s <= 2.0s, 3 queued"
    )
    assert m.events[-1].level == "info"


def test_lanes_answering_in_one_piece_are_shown_but_not_judged_by_the_ttft_slo() -> None:
    """An image queue of 25 s is the image lane doing its job, not chat users waiting: with a
    streaming lane beside it, a lane with no token gaps is left out of the badge."""
    clock = Clock()
    m = Monitor([URL], clock=clock, wall=clock, admin_url="http://127.0.0.1:9000")
    m.health.hold_s = 0
    limits = {"version": 1, "paused": False, "lanes": {"chat": {}, "image": {}}}
    m.apply_scrape(ScrapeResult(URL, [EngineSnapshot(URL, "vllm", "m", kv_cache_usage=0.3)]))
    status = _status(good=100, slow=0, refused=0, ttft_p99=0.9)
    image = _status(good=2, slow=6, refused=0, ttft_p99=29.0)["lanes"]["chat"]
    for tails in image["latency"].values():
        tails["itl"] = {"count": 0, "p50": None, "p90": None, "p99": None, "max": None}
    status["lanes"]["image"] = image
    apply_gate(m, limits, status)
    assert m.evaluate().level == "OK"
    assert m.gate is not None
    users = m.gate.users()
    assert users is not None and set(users.tails) == {"chat", "image"}  # still on screen
    assert users.worst_lane == "chat" and users.totals["ended"] == 100
    # Without a streaming lane (a gate of embeddings only), every lane is judged as before.
    del status["lanes"]["chat"]
    apply_gate(m, limits, status)
    assert m.evaluate().level == "OVERLOADED"
