"""The burn rates on the node: the same arithmetic as PromQL, and the same alerts as the rules
``gpuwatch rules`` writes, on the same data, within one evaluation interval (promtool)."""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest

from gpuwatch.alerts.burn import Cumulative, SliBurn
from gpuwatch.alerts.payload import Alert, body_for, webhook
from gpuwatch.alerts.rules import BURN_ALERTS, render
from gpuwatch.alerts.slo import DAY_S, objectives
from gpuwatch.config import AlertSettings, Slo
from gpuwatch.series import extrapolated_increase

STEP_S = 60.0
MINUTES = 300


def ttft_series(seed: int) -> tuple[list[float], list[float]]:
    """Cumulative (under 1 s, all) per minute: 100 requests a minute, with bursts of misses."""
    rng = random.Random(seed)
    good = total = 0.0
    goods, totals = [], []
    bursts = [(rng.randint(20, 200), rng.randint(3, 40), rng.uniform(0.05, 0.8))
              for _ in range(5)]  # fmt: skip
    for minute in range(MINUTES + 1):
        missed = max((share for start, length, share in bursts
                      if start <= minute < start + length), default=0.0)  # fmt: skip
        total += 100
        good += round(100 * (1 - missed))
        goods.append(good)
        totals.append(total)
    return goods, totals


def node_states(goods: list[float], totals: list[float]) -> list[set[str]]:
    """The node's firing tiers ("1h" ...) at each minute, fed one sample a minute."""
    (objective,) = [o for o in objectives(Slo()) if o.sli == "ttft"]
    burn = SliBurn(objective, 30 * DAY_S)
    out = []
    for minute, (good, total) in enumerate(zip(goods, totals, strict=True)):
        t = minute * STEP_S
        burn.feed(t, {"engine": (good, total)})
        burn.evaluate(t)
        out.append({s.long for s in burn.states if s.firing})
    return out


def values(series: list[float]) -> str:
    return " ".join(f"{v:g}" for v in series)


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_the_node_and_prometheus_fire_together_within_one_evaluation_interval(
    tmp_path: Path,
) -> None:
    goods, totals = ttft_series(seed=3)
    states = node_states(goods, totals)
    fired = {long for state in states for long in state}
    assert fired == {"1h", "6h", "3d"}, "every tier must fire, or the test shows little"
    # Where the node's state holds for an interval either side, Prometheus must say the same:
    # a change may land one evaluation earlier or later (Prometheus 2's ranges include their
    # start sample, the node's do not), never further.
    checks = []
    for minute in range(1, MINUTES):
        here = states[minute]
        if states[minute - 1] != here or states[minute + 1] != here:
            continue
        samples = "".join(
            f"\n          - labels: '{{long=\"{long}\"}}'\n            value: 1"
            for long in sorted(here)
        )
        checks.append(
            f'      - expr: \'count by (long) (ALERTS{{alertstate="firing", '
            f'alertname="{BURN_ALERTS["ttft"]}"}})\'\n        eval_time: {minute}m\n'
            f"        exp_samples:{samples or ' []'}\n"
        )
    labels = 'job="vllm", instance="n1:8000"'
    # The TTFT SLO's rules alone: promtool evaluates every rule at every minute.
    only_ttft = Slo(goodput_min=0, kv_usage_high=0, preemptions_per_min=0, stall_after_s=0)
    (tmp_path / "rules.yml").write_text(render(only_ttft, AlertSettings()))
    (tmp_path / "agree_test.yml").write_text(
        "rule_files: [rules.yml]\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n"
        "    input_series:\n"
        f"      - series: 'vllm:time_to_first_token_seconds_count{{{labels}}}'\n"
        f"        values: '{values(totals)}'\n"
        f"      - series: 'vllm:time_to_first_token_seconds_bucket{{{labels}, le=\"1.0\"}}'\n"
        f"        values: '{values(goods)}'\n"
        "    promql_expr_test:\n" + "".join(checks)
    )
    result = subprocess.run(
        ["promtool", "test", "rules", "agree_test.yml"], cwd=tmp_path, capture_output=True,
        text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]


def test_an_increase_is_promqls_over_the_same_samples() -> None:
    rng = random.Random(7)
    c = Cumulative(keep_s=3600, step_s=1)
    samples, v = [], 0.0
    for i in range(200):
        t = i * 2.0 + rng.uniform(0, 0.5)
        v += rng.randint(0, 9)
        samples.append((t, v))
        c.add(t, v / 2, v)
    at = samples[-1][0] + 0.7
    inside = [(t, v) for t, v in samples if at - 60 < t <= at]
    expected = extrapolated_increase(inside, at - 60, at)
    got = c.increase(at, 60)
    assert got is not None and expected is not None
    assert got[1] == pytest.approx(expected)
    assert got[0] == pytest.approx(expected / 2)


def test_a_counter_reset_is_not_counted_as_misses() -> None:
    (objective,) = [o for o in objectives(Slo()) if o.sli == "ttft"]
    burn = SliBurn(objective, 30 * DAY_S / 720)  # windows of 5 s to 6 min
    t = 0.0
    for good, total in [(100, 100), (200, 200), (300, 300), (10, 10), (110, 110), (210, 210)]:
        burn.feed(t, {"e": (good, total)})
        t += 1
    assert burn.fine.error_ratio(t, 60) == 0.0
    assert not any(s.firing for s in burn.states)


def test_the_budget_left_is_what_the_misses_have_not_spent() -> None:
    (objective,) = [o for o in objectives(Slo()) if o.sli == "ttft"]
    burn = SliBurn(objective, 1000.0)
    burn.feed(0, {"e": (0, 0)})
    burn.feed(100, {"e": (995, 1000)})  # 0.5% missed: half the 1% budget
    left = burn.budget_left(100)
    assert left is not None
    assert left[0] == pytest.approx(0.5) and left[1] == 100


def test_the_webhook_payload_is_alertmanagers_version_4() -> None:
    a = Alert({"alertname": "LLMTTFTErrorBudgetBurn", "severity": "critical"},
              {"summary": "s"}, starts_at=1_700_000_000.0)  # fmt: skip
    body = webhook([a])
    assert body["version"] == "4" and body["status"] == "firing"
    assert body["groupLabels"] == {"alertname": "LLMTTFTErrorBudgetBurn"}
    assert body["alerts"][0]["startsAt"] == "2023-11-14T22:13:20Z"
    assert body["alerts"][0]["endsAt"] == "0001-01-01T00:00:00Z"
    a.ends_at = 1_700_000_060.0
    assert webhook([a])["status"] == "resolved"
    # Alertmanager's own API takes a list of alerts, endsAt marking the resolved one.
    (posted,) = body_for("http://am:9093/api/v2/alerts", [a])
    assert posted["endsAt"] == "2023-11-14T22:14:20Z" and "status" not in posted
