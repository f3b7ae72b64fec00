"""The node's alerts fed through a ``Monitor`` (what the dashboard, watch and record poll):
events when a tier starts and stops firing, the bell on a page, the budget line, the JSON,
and goodput from the gate's histogram and refusals."""

from __future__ import annotations

from gpuwatch.adminapi import GateStatus, LaneStatus, Limits
from gpuwatch.alerts.node import NodeAlerts, node_alerts
from gpuwatch.config import AlertSettings
from gpuwatch.model import EngineSnapshot, Histogram, ScrapeResult
from gpuwatch.monitor.state import Monitor

ENGINE = "http://127.0.0.1:8000/metrics"
GATE = "http://127.0.0.1:9000/metrics"
# A budget of 12 hours: the fast page reads 1 minute and 5 seconds.
SETTINGS = AlertSettings(slo_period_days=0.5, bell=True)


class Clock:
    def __init__(self) -> None:
        self.t = 1_000.0

    def __call__(self) -> float:
        return self.t


def vllm(good: float, total: float) -> ScrapeResult:
    hist = Histogram(((0.5, good), (1.0, good), (2.5, total), (float("inf"), total)), None, total)
    return ScrapeResult(ENGINE, [EngineSnapshot(ENGINE, "vllm", "m", histograms={"ttft": hist})])


def run(m: Monitor, alerts: NodeAlerts, clock: Clock, seconds: int, per_s: int, miss: float,
        counts: list[float]) -> list[str]:  # fmt: skip
    """``seconds`` of one scrape a second with ``per_s`` requests, ``miss`` of them late."""
    out = []
    for _ in range(seconds):
        clock.t += 1
        counts[1] += per_s
        counts[0] += per_s * (1 - miss)
        m.apply_scrape(vllm(counts[0], counts[1]))
        m.evaluate()
        out += alerts.tick()
    return out


def test_an_overload_fires_the_page_with_an_event_and_the_bell_then_resolves() -> None:
    clock = Clock()
    m = Monitor([ENGINE], clock=clock, wall=clock)
    rang: list[int] = []
    alerts = node_alerts(m, SETTINGS, bell=lambda: rang.append(1))
    counts = [0.0, 0.0]
    assert run(m, alerts, clock, 30, 10, 0.0, counts) == []
    fired = run(m, alerts, clock, 20, 10, 0.5, counts)
    fast = [t for t in fired if "(1m & 5s)" in t]
    assert len(fast) == 1 and fast[0].startswith("ALERT LLMTTFTErrorBudgetBurn critical")
    assert "TTFT under 2s" in fast[0] and "(alert at 14.4x)" in fast[0]
    assert rang, "a critical alert rings the bell when bell = true"
    assert any(e.text == fast[0] and e.level == "bad" for e in m.events)
    segments = alerts.budget_segments()
    assert segments[0].startswith("TTFT under 2s (read at 1s): ") and "left of 12h" in segments[0]
    assert segments[1].startswith("burn ") and segments[1].endswith("FIRING critical (1m)")
    assert [part.split()[-1] for part in segments[1][5:].split(" FIRING")[0].split(", ")] == [
        "5s", "30s", "1m", "6m", "72m",
    ]  # fmt: skip
    frame = alerts.to_json()["ttft"]
    assert frame["target"] == 0.99 and frame["tiers"][0]["firing"] is True
    assert frame["tiers"][0]["burn_5s"] > 14.4
    resolved = run(m, alerts, clock, 10, 10, 0.0, counts)
    assert any(t.startswith("RESOLVED LLMTTFTErrorBudgetBurn critical (1m & 5s)") for t in resolved)
    assert alerts.to_json()["ttft"]["tiers"][0]["firing"] is False


def test_no_bell_unless_configured() -> None:
    clock = Clock()
    m = Monitor([ENGINE], clock=clock, wall=clock)
    rang: list[int] = []
    alerts = node_alerts(m, AlertSettings(slo_period_days=0.5), bell=lambda: rang.append(1))
    counts = [0.0, 0.0]
    run(m, alerts, clock, 30, 10, 0.0, counts)
    assert any(run(m, alerts, clock, 20, 10, 0.9, counts))
    assert rang == []


def test_a_histogram_without_the_bound_is_not_judged() -> None:
    """An engine whose buckets have no 1 s bound gives no TTFT SLI, never a wrong one."""
    clock = Clock()
    m = Monitor([ENGINE], clock=clock, wall=clock)
    alerts = node_alerts(m, SETTINGS)
    for i in range(20):
        clock.t += 1
        hist = Histogram(((0.8, 0.0), (float("inf"), 10.0 * i)), None, 10.0 * i)
        snap = EngineSnapshot(ENGINE, "vllm", "m", histograms={"ttft": hist})
        m.apply_scrape(ScrapeResult(ENGINE, [snap]))
        assert alerts.tick() == []
    assert alerts.budget_segments() == []


def gate_status(refused: int) -> GateStatus:
    lane = LaneStatus(inflight=1, queued=0, rejected_total={"queue_full": refused})
    return GateStatus(1, False, {"chat": lane})


def test_goodput_is_the_gates_answers_in_time_over_all_that_arrived() -> None:
    clock = Clock()
    m = Monitor([GATE], clock=clock, wall=clock, admin_url="http://127.0.0.1:9000")
    alerts = node_alerts(m, SETTINGS)
    answered = refused = 0
    texts = []
    for second in range(60):
        clock.t += 1
        answered += 10
        refused += 10 if second >= 30 else 0  # half of what arrives is refused from 30 s
        hist = Histogram(((1.694, answered), (float("inf"), answered)), None, answered)
        snap = EngineSnapshot(GATE, "gate", None, histograms={"ttft": hist})
        m.apply_scrape(ScrapeResult(GATE, [snap]))
        m.apply_gate(Limits(1, False), gate_status(refused))
        texts += alerts.tick()
    assert any(t.startswith("ALERT LLMGoodputErrorBudgetBurn critical (1m & 5s)") for t in texts)
    short = alerts.to_json()["goodput"]["tiers"][0]["burn_5s"]
    assert short is not None and 45 < short < 55  # 50% missed over a 1% budget
