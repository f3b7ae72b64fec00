"""Adaptive admission against overload, in the simulator: loose static vs tuned static vs
adaptive, on the same seeded bursty traffic with a mix change halfway.

Run: python bench/adaptive.py [--time-scale 3] [--half 60] [--controller aimd|gradient]
Goal (issue 15): adaptive has the best goodput of the three in the second half, and is within
5% of the tuned static limits in the first.

- The knee comes from ``gpuwatch plan`` run in-process on the simulator's profile with the
  first half's traffic (steady, burstiness 0.5); its recommended limits are "tuned static".
- Traffic: gamma arrivals (burstiness 0.5) at the boring rate (0.7 x knee), spiking to 3x the
  knee for the last quarter of every 20 simulated seconds; halfway, output lengths x4. The same
  seed for every configuration: the same requests at the same times.
- (a) loose static: 256 in flight, queue 1024; (b) the planner's limits; (c) adaptive: the
  effective limit between 4 and 256, target p99 TTFT after admission 0.6 x the SLO (the queue
  wait is the rest of the user's budget), the planner's queue. Every configuration runs against
  a fresh simulator and gate (separate processes), the same seed.
- The simulator runs ``--time-scale`` x faster than real time: every time printed is in
  simulated seconds (wall x scale), and the gate runs its controller at ``--adaptive-pace
  1/scale`` so it decides once a simulated second, as it would on the node simulated.
- Per half: goodput (requests with TTFT <= SLO per simulated second, refused ones are misses),
  p99 TTFT of the answered, refusals (429 / 503), failures, the simulator's preemptions.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import httpx

from gpuwatch.load.runner import LoadRun, Result, Shape
from gpuwatch.load.spec import Dist, LoadSpec, Pattern, arrival_times
from gpuwatch.plan.planner import sweep_sim
from gpuwatch.plan.probe import Target
from gpuwatch.plan.traffic import DEFAULT_BURSTINESS, DEFAULT_PROMPT, Traffic
from gpuwatch.series import sample_quantile
from gpuwatch.sim.profiles import get_profile

PROFILE = "rtx4090-llama3-8b-awq"
SLO_S = 2.0
OUTPUT = "lognormal:mean=128,sigma=0.6"
ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(args: list[str], url: str, log: Path, code: Path = ROOT) -> subprocess.Popen[bytes]:
    """``gpuwatch ARGS`` from the checkout at ``code``, once ``url``/health answers."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuwatch", *args],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        env=env,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise SystemExit(f"{args[0]} exited: {log.read_text()[-500:]}")
        time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"{args[0]} did not start: {log.read_text()[-500:]}")


def preemptions(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=3).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm:num_preemptions_total")
    )


@dataclass
class Traffic2:
    shapes: list[Shape]  # wall-clock planned times
    half_s: float  # simulated


def traffic(knee: float, half_s: float, scale: float, seed: int) -> Traffic2:
    base = 0.7 * knee
    pattern = Pattern(period=20.0, duty=0.25, factor=3 * knee / base)
    spec = LoadSpec("http://unused", base, duration_s=2 * half_s, burstiness=DEFAULT_BURSTINESS,
                    pattern=pattern, seed=seed)  # fmt: skip
    rng = random.Random(seed)
    prompt = Dist.parse(DEFAULT_PROMPT, "prompt")
    first = Dist.parse(OUTPUT, "output")
    second = Dist.parse(OUTPUT.replace("mean=128", "mean=512"), "output")
    shapes: list[Shape] = []
    for t in arrival_times(spec, rng):
        out = (first if t < half_s else second).sample(rng)
        shapes.append((t / scale, "chat", prompt.sample(rng), out))
    return Traffic2(shapes, half_s)


def gate_toml(lane: dict[str, Any]) -> str:
    lines = ["[lanes.chat]"]
    for key, value in lane.items():
        lines.append(f"{key} = {json.dumps(value)}")
    return "\n".join(lines) + "\n"


def halves(results: list[Result], t: Traffic2, scale: float) -> list[dict[str, Any]]:
    out = []
    for lo, hi in ((0.0, t.half_s), (t.half_s, 2 * t.half_s)):
        rs = [r for r in results if lo <= r.planned * scale < hi]
        ok = [r for r in rs if r.ok and r.ttft is not None]
        ttfts = sorted(r.ttft * scale for r in ok if r.ttft is not None)
        good = sum(1 for x in ttfts if x <= SLO_S)
        out.append(
            {
                "requests": len(rs),
                "goodput_rps": good / t.half_s,
                "good_share": good / len(rs) if rs else None,
                "p99_ttft_s": sample_quantile(ttfts, 0.99) if ttfts else None,
                "refused": sum(1 for r in rs if r.status in (429, 503)),
                "failed": sum(1 for r in rs if not r.ok and r.status not in (429, 503)),
            }
        )
    return out


async def watch_gate(admin: str, until: float, trace: list[tuple[float, int]]) -> None:
    async with httpx.AsyncClient(trust_env=False) as client:
        t0 = time.monotonic()
        while time.monotonic() < until:
            try:
                r = await client.get(f"{admin}/admin/status", timeout=2)
                trace.append(
                    (time.monotonic() - t0, r.json()["lanes"]["chat"]["effective_max_inflight"])
                )
            except (httpx.HTTPError, KeyError, ValueError):
                pass
            await asyncio.sleep(1.0)


class Node(NamedTuple):
    sim_url: str
    gate_url: str
    sim: subprocess.Popen[bytes]
    gate: subprocess.Popen[bytes]


@contextlib.contextmanager
def sim_and_gate(
    label: str,
    lane: dict[str, Any],
    work: Path,
    time_scale: float,
    seed: int,
    gate_args: Sequence[str] = (),
    code: Path = ROOT,
    profile: str = PROFILE,
) -> Iterator[Node]:
    """A fresh simulator (this checkout's) and a gate with ``lane`` as its chat lane in front of
    it (the code at ``code``), each its own process on a free port, both stopped on the way
    out."""
    sim_port, gate_port = free_port(), free_port()
    sim_url, gate_url = f"http://127.0.0.1:{sim_port}", f"http://127.0.0.1:{gate_port}"
    (work / f"{label}.toml").write_text(gate_toml(lane))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.append(start(["sim", "--profile", profile, "--listen", f"127.0.0.1:{sim_port}",
                            "--time-scale", str(time_scale), "--seed", str(seed)],
                           sim_url, work / f"{label}-sim.log"))  # fmt: skip
        procs.append(start(["gate", "--upstream", sim_url, "--listen", f"127.0.0.1:{gate_port}",
                            "--config", str(work / f"{label}.toml"), "--state-file",
                            str(work / f"{label}-state.json"),
                            "--upstream-metrics", f"{sim_url}/metrics",
                            "--adaptive-pace", str(1 / time_scale), *gate_args],
                           gate_url, work / f"{label}-gate.log", code))  # fmt: skip
        yield Node(sim_url, gate_url, *procs)
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def run_one(label: str, lane: dict[str, Any], t: Traffic2, args: argparse.Namespace,
            work: Path) -> dict[str, Any]:  # fmt: skip
    gate_args = ["--controller", args.controller]
    with sim_and_gate(label, lane, work, args.time_scale, args.seed, gate_args) as node:
        sim_url, gate_url = node.sim_url, node.gate_url
        spec = LoadSpec(gate_url, 1.0, requests=len(t.shapes), seed=args.seed)
        run = LoadRun(spec, shapes=t.shapes)
        wall_half = t.half_s / args.time_scale
        trace: list[tuple[float, int]] = []
        pre: list[float] = [preemptions(sim_url)]

        async def drive() -> None:
            async def at_half() -> None:
                await asyncio.sleep(wall_half)
                pre.append(await asyncio.to_thread(preemptions, sim_url))

            watcher = asyncio.create_task(
                watch_gate(gate_url, time.monotonic() + 2 * wall_half, trace)
            )
            half = asyncio.create_task(at_half())
            await run.run()
            await half
            await watcher

        t0 = time.perf_counter()
        asyncio.run(drive())
        wall = time.perf_counter() - t0
        pre.append(preemptions(sim_url))
        rows = halves(run.results, t, args.time_scale)
        rows[0]["preemptions"], rows[1]["preemptions"] = pre[1] - pre[0], pre[2] - pre[1]
        return {"label": label, "halves": rows, "wall_s": wall, "trace": trace}


def fmt(row: dict[str, Any]) -> str:
    p99 = f"{row['p99_ttft_s']:6.2f}s" if row["p99_ttft_s"] is not None else "    n/a"
    return (f"goodput {row['goodput_rps']:5.2f}/s ({row['good_share']:5.1%})  p99 TTFT {p99}  "
            f"refused {row['refused']:4d}  failed {row['failed']:3d}  "
            f"preempt {row['preemptions']:5.0f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--time-scale", type=float, default=3.0)
    parser.add_argument("--half", type=float, default=60.0, help="simulated seconds per half")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--controller", choices=("aimd", "gradient"), default="aimd")
    parser.add_argument("--only", choices=("loose", "tuned", "adaptive"), action="append")
    parser.add_argument("--json", type=Path, help="write every number here")
    args = parser.parse_args()

    t0 = time.perf_counter()
    profile = get_profile(PROFILE)
    first_half = Traffic(output_tokens=Dist.parse(OUTPUT, "output"))
    plan = sweep_sim(profile, first_half, Target(SLO_S), seed=args.seed, check=False)
    if plan.knee is None or plan.recommended is None:
        raise SystemExit("the planner found no knee")
    rec = plan.recommended
    print(f"plan ({time.perf_counter() - t0:.1f} s): knee {plan.knee:.2f} req/s, recommended "
          f"max_inflight {rec.max_inflight}, max_queue {rec.max_queue}")  # fmt: skip
    t = traffic(plan.knee, args.half, args.time_scale, args.seed)
    print(f"traffic: {len(t.shapes)} requests over {2 * args.half:g} simulated s "
          f"(base {0.7 * plan.knee:.2f}/s, spikes {3 * plan.knee:.2f}/s, output x4 at "
          f"{args.half:g} s), time x{args.time_scale:g}, SLO TTFT {SLO_S:g} s")  # fmt: skip
    timeout = 30.0 / args.time_scale
    configs = {
        "loose": {"max_inflight": 256, "max_queue": 1024, "queue_timeout_s": timeout},
        "tuned": {"max_inflight": rec.max_inflight, "max_queue": rec.max_queue,
                  "queue_timeout_s": timeout},
        "adaptive": {"max_inflight": 256, "max_queue": rec.max_queue, "queue_timeout_s": timeout,
                     "policy": "adaptive", "min_inflight": 4,
                     "target_ttft_p99_s": round(0.6 * SLO_S / args.time_scale, 4)},
    }  # fmt: skip
    out = []
    with tempfile.TemporaryDirectory(prefix="bench-adaptive-") as tmp:
        for label, lane in configs.items():
            if args.only and label not in args.only:
                continue
            name = f"{label}/{args.controller}" if label == "adaptive" else label
            res = run_one(label, lane, t, args, Path(tmp))
            out.append(res)
            print(f"{name:17s} wall {res['wall_s']:5.1f} s")
            for i, row in enumerate(res["halves"]):
                print(f"  half {i + 1}: {fmt(row)}")
            if label == "adaptive":
                eff = [n for _, n in res["trace"]]
                print(f"  effective max_inflight per wall second: {eff}")
    if args.json:
        args.json.write_text(json.dumps({"plan_knee": plan.knee, "runs": out}, indent=1))
    print(f"total {time.perf_counter() - t0:.0f} s wall")


if __name__ == "__main__":
    main()
