"""gpuwatch's windowed numbers equal a real Prometheus' answers on the same scrapes.

A seeded run of vLLM pages (a token counter and the TTFT histogram, with a server restart in
the middle) scraped every 1.002 s is written once as OpenMetrics with timestamps, loaded into a
real Prometheus with ``promtool tsdb create-blocks-from openmetrics``, and queried at several
instants with ``rate(x[60s])`` and ``histogram_quantile(q, rate(x_bucket[60s]))``. The same
pages go through gpuwatch's parser, dialect table and history; every answer must agree.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from gpuwatch.series import EngineHistory
from gpuwatch.sources.scrape import map_page
from tests.functional.fleetkit import start_prometheus

BOUNDS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
MODEL = "m"
STEP_MS = 1002  # scrapes 1.002 s apart: never on a window's edge at whole-second instants
SCRAPES = 260
RESTART_AT = 150  # the server restarts here: every counter starts again


@dataclass
class Scrape:
    t_ms: int
    tokens: float
    buckets: list[float]  # cumulative, one per bound, then +Inf
    total: float


def run(seed: int = 7) -> list[Scrape]:
    rng = random.Random(seed)
    start_ms = (int(time.time()) - 3 * 3600) * 1000 + 1  # inside the default retention
    tokens, counts, total = 0.0, [0.0] * (len(BOUNDS) + 1), 0.0
    out = []
    for k in range(SCRAPES):
        if k == RESTART_AT:
            tokens, counts, total = 0.0, [0.0] * (len(BOUNDS) + 1), 0.0
        tokens += rng.randint(20, 400)
        # A slow spell in the middle moves the tail, so windows see different shapes.
        slow = 90 <= k < 130
        for _ in range(rng.randint(0, 6)):
            ttft = rng.lognormvariate(0.3 if slow else -2.0, 0.8)
            total += ttft
            for i, bound in enumerate((*BOUNDS, float("inf"))):
                if ttft <= bound:
                    counts[i] += 1
        out.append(Scrape(start_ms + k * STEP_MS, tokens, list(counts), total))
    return out


def page(s: Scrape, with_timestamps: bool) -> str:
    """One scrape in the exposition format; with timestamps (seconds) for OpenMetrics."""
    ts = f" {s.t_ms / 1000:.3f}" if with_timestamps else ""
    label = f'model_name="{MODEL}"'
    lines = [f"vllm:generation_tokens_total{{{label}}} {s.tokens}{ts}"]
    for bound, count in zip((*BOUNDS, "+Inf"), s.buckets, strict=True):
        lines.append(f'vllm:time_to_first_token_seconds_bucket{{{label},le="{bound}"}} {count}{ts}')
    lines.append(f"vllm:time_to_first_token_seconds_count{{{label}}} {s.buckets[-1]}{ts}")
    lines.append(f"vllm:time_to_first_token_seconds_sum{{{label}}} {s.total}{ts}")
    return "\n".join(lines)


def openmetrics(scrapes: list[Scrape]) -> str:
    """All scrapes as one OpenMetrics file: each family's samples together, then # EOF."""
    by_family: dict[str, list[str]] = {"tokens": [], "ttft": []}
    for s in scrapes:
        for line in page(s, with_timestamps=True).splitlines():
            by_family["tokens" if line.startswith("vllm:generation") else "ttft"].append(line)
    return "\n".join(
        [
            "# TYPE vllm:generation_tokens counter",
            *by_family["tokens"],
            "# TYPE vllm:time_to_first_token_seconds histogram",
            *by_family["ttft"],
            "# EOF",
            "",
        ]
    )


def exposition(s: Scrape) -> str:
    return (
        "# TYPE vllm:generation_tokens_total counter\n"
        "# TYPE vllm:time_to_first_token_seconds histogram\n"
        + page(s, with_timestamps=False)
        + "\n"
    )


@dataclass
class Prom:
    url: str

    def query(self, expr: str, at_ms: int) -> float | None:
        r = httpx.get(
            f"{self.url}/api/v1/query", params={"query": expr, "time": f"{at_ms / 1000:.3f}"}
        )
        r.raise_for_status()
        result = r.json()["data"]["result"]
        return float(result[0]["value"][1]) if result else None


@pytest.fixture(scope="module")
def scrapes() -> list[Scrape]:
    return run()


@pytest.fixture(scope="module")
def prom(scrapes: list[Scrape], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prom]:
    for tool in ("prometheus", "promtool"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} not found: install Debian's prometheus package (.ci/run does)")
    root = tmp_path_factory.mktemp("prom")
    (root / "in.om").write_text(openmetrics(scrapes))
    subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(root / "in.om"),
         str(root / "data")],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    (root / "prometheus.yml").write_text("global: {}\n")
    proc, url = start_prometheus(root)
    yield Prom(url)
    proc.terminate()
    proc.wait(10)


def history_at(scrapes: list[Scrape], at_ms: int) -> EngineHistory:
    history = EngineHistory(window_s=60.0)
    for s in scrapes:
        if s.t_ms > at_ms:
            break
        result = map_page("http://node/metrics", exposition(s))
        assert result.error is None, result.error
        (engine,) = result.engines
        history.update(s.t_ms / 1000, engine)
    return history


# Whole seconds after the start: in steady windows, across the slow spell, across the restart.
INSTANTS_S = (75, 100, 121, 140, 155, 170, 200, 230, 259)


@pytest.mark.parametrize("after_s", INSTANTS_S)
def test_windowed_numbers_equal_prometheus(prom: Prom, scrapes: list[Scrape], after_s: int) -> None:
    at_ms = scrapes[0].t_ms - 1 + after_s * 1000
    h = history_at(scrapes, at_ms)
    ttft = h.latency["ttft"]
    tokens = h.counters["generation_tokens_total"]
    checks = {
        "rate(vllm:generation_tokens_total[60s])": tokens.rate(at=at_ms / 1000),
        "increase(vllm:generation_tokens_total[60s])": tokens.increase(at=at_ms / 1000),
    }
    for q in (0.5, 0.9, 0.99):
        expr = f"histogram_quantile({q}, rate(vllm:time_to_first_token_seconds_bucket[60s]))"
        checks[expr] = ttft.quantile(q, at=at_ms / 1000)
    for expr, ours in checks.items():
        theirs = prom.query(expr, at_ms)
        assert ours is not None and theirs is not None, (expr, ours, theirs)
        # Prometheus does its time arithmetic in integer milliseconds; ours is float seconds of
        # a Unix time (~1.7e9), good to ~1e-7 s: equal to float precision, not bit for bit.
        assert ours == pytest.approx(theirs, rel=1e-7), f"{expr} at +{after_s}s"


def test_the_window_is_60s_not_61s(prom: Prom, scrapes: list[Scrape]) -> None:
    """Keeping the scrape just before the window (the old rule) matches rate[61s], not [60s]:
    the comparison above would catch it, and here the two ranges do differ on this data."""
    at_ms = scrapes[0].t_ms - 1 + 100 * 1000
    expr = "histogram_quantile(0.99, rate(vllm:time_to_first_token_seconds_bucket[{}]))"
    assert prom.query(expr.format("60s"), at_ms) != prom.query(expr.format("61s"), at_ms)
