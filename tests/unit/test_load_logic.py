"""The load generator's pure parts: arrivals, distributions, argument parsing, the report."""

from __future__ import annotations

import itertools
import random
import statistics

import pytest

from gpuwatch.load.report import build, meets
from gpuwatch.load.runner import Result, make_prompt
from gpuwatch.load.spec import (
    Dist,
    LoadSpec,
    Pattern,
    SpecError,
    arrival_times,
    parse_lane_mix,
    parse_slo,
)
from gpuwatch.tokens import estimate_text


def gaps(spec: LoadSpec, seed: int = 42) -> list[float]:
    times = list(arrival_times(spec, random.Random(seed)))
    return [b - a for a, b in itertools.pairwise(times)]


@pytest.mark.parametrize("burstiness", [0.25, 0.5, 1.0, 4.0])
def test_arrival_gaps_fit_the_gamma_shape_and_rate(burstiness: float) -> None:
    spec = LoadSpec(url="x", rate=10.0, burstiness=burstiness, requests=40_000)
    g = gaps(spec)
    mean = statistics.fmean(g)
    cv2 = statistics.pvariance(g) / mean**2
    assert mean == pytest.approx(0.1, rel=0.03)  # rate 10/s
    assert cv2 == pytest.approx(1 / burstiness, rel=0.1)  # gamma: CV^2 = 1 / shape


def test_spike_pattern_multiplies_the_rate_inside_the_duty_window() -> None:
    spec = LoadSpec(url="x", rate=5.0, duration_s=3000, pattern=Pattern(60, 0.2, 5))
    times = list(arrival_times(spec, random.Random(1)))
    inside = sum(1 for t in times if t % 60 >= 48)
    outside = len(times) - inside
    # The last 12 s of each minute at 25/s, the 48 s before at 5/s.
    assert inside / (12 * 50) == pytest.approx(25, rel=0.05)
    assert outside / (48 * 50) == pytest.approx(5, rel=0.05)


def test_first_arrival_is_immediate_and_count_is_exact() -> None:
    times = list(arrival_times(LoadSpec(url="x", rate=1.0, requests=7), random.Random(0)))
    assert times[0] == 0.0 and len(times) == 7


def test_distributions() -> None:
    rng = random.Random(3)
    assert Dist.parse("512", "--x").sample(rng) == 512
    u = [Dist.parse("128:2048", "--x").sample(rng) for _ in range(2000)]
    assert min(u) >= 128 and max(u) <= 2048 and statistics.fmean(u) == pytest.approx(1088, rel=0.05)
    ln = [Dist.parse("lognormal:mean=800,sigma=0.6", "--x").sample(rng) for _ in range(20000)]
    assert statistics.fmean(ln) == pytest.approx(800, rel=0.03)


@pytest.mark.parametrize(
    ("text", "message"),
    [("0", "--prompt-tokens: must be at least 1"), ("9:3", "needs 1 <= low <= high"),
     ("lognormal:mean=5", "lognormal needs mean= and sigma="), ("lots", "is not N, LOW:HIGH")],
)  # fmt: skip
def test_bad_dist_names_the_argument(text: str, message: str) -> None:
    with pytest.raises(SpecError, match="--prompt-tokens") as info:
        Dist.parse(text, "--prompt-tokens")
    assert message in str(info.value)


def test_bad_slo_pattern_mix_rate() -> None:
    with pytest.raises(SpecError, match="--slo: unknown key 'ttfb'"):
        parse_slo("ttfb=2")
    with pytest.raises(SpecError, match="--slo: ttft must be a number"):
        parse_slo("ttft=fast")
    with pytest.raises(SpecError, match="--pattern"):
        Pattern.parse("wave")
    with pytest.raises(SpecError, match="--mix: unknown kind 'video'"):
        parse_lane_mix("chat=1,video=1")
    assert parse_lane_mix("chat=0.8,embed=0.2") == {"chat": 0.8, "embed": 0.2}
    assert parse_lane_mix("chat=7,embed=2,image=1") == {"chat": 0.7, "embed": 0.2, "image": 0.1}
    with pytest.raises(SpecError, match="--rate"):
        LoadSpec(url="x", rate=0.0, requests=1)


def test_prompts_have_the_requested_length_and_unique_leads() -> None:
    rng = random.Random(0)
    a, b = make_prompt(300, rng, 1), make_prompt(300, rng, 2)
    assert estimate_text(a) == estimate_text(b) == 300
    assert a[:16] != b[:16]


def _r(ttft: float, e2e: float, out: int, status: int | str = 200) -> Result:
    r = Result("chat", 0.0, status=status, ttft=ttft, e2e=e2e, output_tokens=out)
    r.itl = [(e2e - ttft) / (out - 1)] * (out - 1) if out > 1 else []
    return r


def test_goodput_counts_only_requests_meeting_every_slo() -> None:
    slo = {"ttft": 1.0, "tpot": 0.05}
    good = _r(0.5, 1.5, 21)  # tpot 0.05
    slow_start = _r(1.5, 2.0, 21)
    slow_tokens = _r(0.5, 3.5, 21)  # tpot 0.15
    assert meets(good, slo) and not meets(slow_start, slo) and not meets(slow_tokens, slo)
    spec = LoadSpec(url="x", rate=1.0, requests=4, slo=slo)
    report = build(spec, [good, slow_start, slow_tokens, _r(0.1, 0.2, 3, status=429)], duration=2.0)
    assert report["request_goodput"] == pytest.approx(0.5)  # 1 of 4 in 2 s
    assert report["completed"] == 3 and report["failed"] == 1
    assert report["failures_by_status"] == {"429": 1}
    assert report["request_throughput"] == pytest.approx(1.5)
    assert report["mean_tpot_ms"] == pytest.approx((50 + 25 + 150) / 3)
    assert report["median_ttft_ms"] == pytest.approx(500)


def test_report_has_vllm_bench_field_names() -> None:
    report = build(LoadSpec(url="x", rate=1.0, requests=1), [_r(0.2, 1.2, 11)], 1.0)
    for key in ("completed", "failed", "duration", "request_throughput", "output_throughput",
                "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms",
                "mean_itl_ms", "p99_itl_ms", "mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms",
                "request_goodput", "failures_by_status"):  # fmt: skip
        assert key in report, key
    assert report["request_goodput"] is None  # no SLO given
    assert report["p99_ttft_ms"] == pytest.approx(200)


def test_tenancy_weights_are_zipf_with_a_noisy_tenant() -> None:
    from gpuwatch.load.spec import Tenancy

    w = Tenancy(tenants=4, skew=1.0).weights()
    assert list(w) == ["t01", "t02", "t03", "t04"]
    assert w["t01"] / w["t02"] == pytest.approx(2) and w["t01"] / w["t04"] == pytest.approx(4)
    assert sum(w.values()) == pytest.approx(1)
    flat = Tenancy(tenants=3, skew=0.0).weights()
    assert list(flat.values()) == pytest.approx([1 / 3] * 3)
    noisy = Tenancy(tenants=2, skew=1.0, noisy=10.0).weights()
    assert noisy["noisy"] / noisy["t01"] == pytest.approx(10)
    assert Tenancy().weights() == {}
    with pytest.raises(SpecError, match="--noisy-tenant needs --tenants"):
        Tenancy(noisy=2.0)
