"""How exact are the gate's user-felt numbers? Against what the clients measured.

Runs the simulator (real time) behind the gate, sends bursty load through it with
``gpuwatch load``'s library, then compares the gate's exact p50/p99 TTFT from /admin/status
with the clients' own measurements of the same requests, and shows what Prometheus'
``histogram_quantile`` makes of the gate's 25%-wide buckets and of vLLM's coarse ones. At
this rate the gate answers from the records themselves; the row ``gate, sketched`` is what it
answers for the same requests above its exact regime (over 256 a second: log buckets, 0.5%).

    python bench/gate_exact.py [--seconds 120] [--rate 6]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from gpuwatch.buckets import TTFT_BUCKETS
from gpuwatch.gate.config import GateConfig
from gpuwatch.gate.limits import DEFAULT_LANES
from gpuwatch.gate.logsketch import counted, tail
from gpuwatch.gate.server import start_gate
from gpuwatch.load import LoadRun, LoadSpec
from gpuwatch.load.spec import Dist, Pattern
from gpuwatch.series import histogram_quantile, sample_quantile
from gpuwatch.sim.profiles import get_profile
from gpuwatch.sim.server import start_sim


def bucket_estimate(ttfts: list[float], bounds: list[float], q: float) -> float | None:
    """What histogram_quantile gives for these samples in these buckets."""
    cumulative = [(b, float(sum(1 for t in ttfts if t <= b))) for b in bounds]
    cumulative.append((float("inf"), float(len(ttfts))))
    return histogram_quantile(q, cumulative)


async def main(seconds: float, rate: float) -> None:
    profile = get_profile("rtx4090-llama3-8b-awq")
    _, sim = await start_sim(profile, time_scale=1.0, seed=9)
    with tempfile.TemporaryDirectory() as tmp:
        server, gate = await start_gate(
            sim.url, GateConfig(DEFAULT_LANES), state_file=Path(tmp) / "s.json"
        )
        try:
            spec = LoadSpec(
                url=gate.url, rate=rate, duration_s=seconds, burstiness=0.5, seed=4,
                pattern=Pattern.parse("spike:period=60,duty=0.25,factor=4"),
                prompt_tokens=Dist("uniform", 128, 2048),
                output_tokens=Dist("lognormal", 250, 0.6),
            )  # fmt: skip
            print(f"load: {seconds:g} s at {rate:g} req/s, spikes x4, through {gate.url}")
            results = await LoadRun(spec).run()
            async with httpx.AsyncClient() as client:
                status = (await client.get(f"{gate.url}/admin/status")).json()
                page = (await client.get(f"{gate.url}/metrics")).text
            lane = server.latency["chat"]
            _, blocks = lane.ended.window(300, lane.clock())
            mine = [r.ttft_s for b in blocks for r in b.raw or () if r.ttft_s and r.outcome == "ok"]
            sketched = tail(counted(mine), max(mine, default=0.0))
        finally:
            await gate.close()
            await sim.close()
    ttfts = sorted(r.ttft for r in results if r.ok and r.ttft is not None)
    exact = status["lanes"]["chat"]["latency"]["5m"]["ttft"]
    buckets = [
        (float(s.labels["le"]), s.value)
        for f in text_string_to_metric_families(page)
        if f.name == "gpuwatch_gate_ttft_seconds"
        for s in f.samples
        if s.name.endswith("_bucket") and s.labels.get("lane") == "chat"
    ]
    print(f"requests answered: {len(ttfts)} (the gate counted {exact['count']})")
    print(f"{'':<34}{'p50':>10}{'p99':>10}")
    for label, p50, p99 in (
        ("clients (gpuwatch load)", sample_quantile(ttfts, 0.5), sample_quantile(ttfts, 0.99)),
        ("gate, exact (/admin/status)", exact["p50"], exact["p99"]),
        ("gate, sketched (over 256/s)", sketched.p50, sketched.p99),
        (
            "gate buckets, histogram_quantile",
            histogram_quantile(0.5, buckets),
            histogram_quantile(0.99, buckets),
        ),
        (
            "vLLM's buckets, histogram_quantile",
            bucket_estimate(ttfts, TTFT_BUCKETS, 0.5),
            bucket_estimate(ttfts, TTFT_BUCKETS, 0.99),
        ),
    ):
        print(f"{label:<34}{p50 or 0:>9.3f}s{p99 or 0:>9.3f}s")
    client_p99 = sample_quantile(ttfts, 0.99)
    print(f"gate exact p99 vs clients: {(exact['p99'] - client_p99) / client_p99:+.2%}")
    print(f"gate sketched p99 vs clients: {((sketched.p99 or 0) - client_p99) / client_p99:+.2%}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--rate", type=float, default=6.0)
    args = parser.parse_args()
    asyncio.run(main(args.seconds, args.rate))
