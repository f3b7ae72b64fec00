"""The boring zone held at 4x overload, end to end: the simulator (its default profile) behind
a gate whose chat lane is adaptive (target p99 TTFT 2 s, in flight 16..256, queue 2, the
upstream's /metrics read), and bursty chat at four times what the node serves at its knee.
The requests admitted in the last minute meet the target at p99, the node keeps serving, and
the excess is refused with ``Retry-After``, most of it at once rather than after a wait.

The issue this closes (24) measured 28.6 s p99 here before. Time runs 4x faster in the
simulator (and the gate's controller with it), so two simulated minutes take 30 s; every time
below is in simulated seconds. ``bench/overload.py`` measures the same at 1x..4x side by side.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuwatch.load.runner import LoadRun, Result
from gpuwatch.load.spec import Dist, LoadSpec, arrival_times
from gpuwatch.plan.traffic import DEFAULT_BURSTINESS, DEFAULT_OUTPUT, DEFAULT_PROMPT
from gpuwatch.series import sample_quantile
from tests.functional.fleetkit import child

SCALE = 4.0  # simulated seconds per wall second
KNEE = 6.25  # req/s: `gpuwatch plan`'s knee for the default profile and this traffic
TARGET_S = 2.0
SECONDS = 120.0  # simulated: the first minute is the overload's onset, the second is judged


@pytest.fixture
def node(tmp_path: Path) -> Iterator[str]:
    """``gpuwatch sim`` and ``gpuwatch gate`` as an operator starts them; the gate's URL."""
    lane = {
        "policy": "adaptive",
        "target_ttft_p99_s": TARGET_S / SCALE,
        "min_inflight": 16,
        "max_inflight": 256,
        "max_queue": 2,
        "queue_timeout_s": 30 / SCALE,
    }
    config = tmp_path / "gate.toml"
    config.write_text(
        "[lanes.chat]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in lane.items())
    )
    sim, sim_url = child("sim", "--time-scale", str(SCALE), "--seed", "3")
    gate, gate_url = child(
        "gate", "--upstream", sim_url, "--config", str(config),
        "--state-file", str(tmp_path / "state.json"),
        "--upstream-metrics", f"{sim_url}/metrics", "--adaptive-pace", str(1 / SCALE),
    )  # fmt: skip
    try:
        yield gate_url
    finally:
        for proc in (gate, sim):
            proc.terminate()
            proc.wait(10)


def traffic(seed: int) -> list[tuple[float, str, int, int]]:
    """Gamma arrivals (the planner's burstiness) at 4x the knee, in wall seconds."""
    rng = random.Random(seed)
    spec = LoadSpec("http://unused", 4 * KNEE, duration_s=SECONDS, burstiness=DEFAULT_BURSTINESS,
                    seed=seed)  # fmt: skip
    prompt, output = Dist.parse(DEFAULT_PROMPT, "prompt"), Dist.parse(DEFAULT_OUTPUT, "output")
    return [(t / SCALE, "chat", prompt.sample(rng), output.sample(rng))
            for t in arrival_times(spec, rng)]  # fmt: skip


def test_four_times_the_knee_admitted_users_inside_the_target(node: str) -> None:
    shapes = traffic(seed=3)
    run = LoadRun(LoadSpec(node, 1.0, requests=len(shapes), seed=3), shapes=shapes)
    asyncio.run(run.run())

    last: list[Result] = [r for r in run.results if r.planned * SCALE >= SECONDS - 60]
    ok = [r for r in last if r.ok and r.ttft is not None]
    refused = [r for r in last if r.status in (429, 503)]
    others = [r for r in last if not r.ok and r.status not in (429, 503)]
    ttfts = sorted(r.ttft * SCALE for r in ok if r.ttft is not None)
    p99 = sample_quantile(ttfts, 0.99)
    summary = f"{len(ok)} ok, {len(refused)} refused, {len(others)} other; p99 TTFT {p99:.2f} s"

    assert not others, summary
    assert p99 <= TARGET_S, summary  # the admitted users are inside the target
    # The node kept serving near its knee: not everything refused to make the tail look good.
    assert len(ok) >= 0.5 * KNEE * 60, summary
    # Four times the knee: most of it cannot be served, and is told when to come back.
    assert len(refused) > len(ok), summary
    assert all(r.retry_after is not None and int(r.retry_after) >= 1 for r in refused), summary
