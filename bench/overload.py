"""Overload, side by side (issue 24 point 5): four admission configurations on the same seeded
bursty arrivals at 1x, 1.5x, 2x and 4x the planner's knee, in the simulator.

Run: python bench/overload.py [--levels 1,1.5,2,4] [--minutes 3] [--time-scale 4]
                              [--only loose,plan,today,new] [--json FILE]
Quick check: python bench/overload.py --levels 1,4 --minutes 1
Goal (issue 24) for the new design at 1.5x, 2x and 4x: good requests per second at least 90% of
the knee's, p99 TTFT of the admitted requests within the target (2 s), refusals answered within
50 ms (median). The script prints the table and one PASS/FAIL line per goal.

- The knee comes from ``gpuwatch plan`` (``sweep_sim``) run in-process on the simulator's
  default profile with the planner's default traffic (gamma arrivals, burstiness 0.5, prompts
  128..1024, outputs lognormal mean 128), target p99 TTFT 2 s. Its recommended limits are (b).
- **The knee's good requests per second is defined as the knee rate itself** (every request
  arriving at the knee counted good), not measured: a fixed bar, the same in every run whatever
  is selected, and a little stricter than a measured one (at the knee a few requests miss the
  SLO). The (b) row at 1x shows what the plan's limits really give there.
- Arrivals per level: gamma gaps (burstiness 0.5) with spikes on top (2x the base rate for the
  last quarter of every 20 simulated seconds), the base set so that the *mean* rate is level x
  knee. One seed: every configuration gets the same requests at the same times at a level.
- Configurations (lane ``chat``; the dicts below, times in simulated seconds): (a) ``loose``
  static limits, (b) ``plan``: the planner's recommended static limits, (c) ``today``: the
  adaptive lane as bench/adaptive.py runs it, with the gate's code as of ``TODAY`` (a worktree
  of that commit on the gate's PYTHONPATH, bench/baseline.py), (d) ``new``: the new design,
  this checkout's gate with ``NEW`` (keys this checkout's gate does not know are left out, and
  the output says so). Each run gets a fresh simulator and gate (separate processes).
- The simulator runs ``--time-scale`` x faster than real time: every time printed is in
  simulated seconds (wall x scale), the lane's times are given to the gate / scale, and the gate
  runs its controller at ``--adaptive-pace 1/scale`` (a decision a simulated second). Except the
  time to a refusal: the gate's work is not scaled, so it is wall milliseconds. (A refusal
  after a wait in the queue, a timeout or a shed, waited wait / scale of wall time: it counts
  at its wall time, which is a lower bound of what it would take on the node.)
- Per row, over the requests planned in the level's window: requests sent per simulated
  second (the seeded draw's own mean, near level x knee); good req/s (answered 200 with TTFT
  <= 2 s, per simulated second of the window) and its share of the knee's; p99 TTFT of the
  answered; refusals (429 / 503) and their share; the median client-side latency of a refusal;
  other failures; the simulator's preemptions (``vllm:num_preemptions_total``) over the run.
- Is the row the machine's or the admission's? Every time here is the wall clock x the scale,
  so any lateness of the simulator, the gate or this client on a busy machine counts scale
  times over. Two checks per row: ``gpu busy``, the simulated GPU's utilization under load
  (under overload the engine always has work, so less than 90% is marked ``!``: the
  simulator fell behind and skipped ahead, or the gate left it idle), and for a static lane
  ``predicted``, what ``gpuwatch plan``'s simulation (the engine and the gate's own lane in
  simulated time, no processes) gives on the same arrivals. A measured row far below its
  prediction measured the machine; a lower ``--time-scale`` or a quieter machine brings it
  back.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil

from gpuwatch.gate.limits import LANE_KEYS, LaneLimits
from gpuwatch.load.runner import REFUSALS, LoadRun, Result, Shape
from gpuwatch.load.spec import LoadSpec, Pattern
from gpuwatch.plan.planner import sweep_sim
from gpuwatch.plan.probe import Target
from gpuwatch.plan.recommend import Recommendation
from gpuwatch.plan.simulate import run_probe
from gpuwatch.plan.traffic import DEFAULT_BURSTINESS, Traffic
from gpuwatch.series import sample_quantile
from gpuwatch.sim.profiles import DEFAULT_PROFILE, get_profile

sys.path.insert(0, str(Path(__file__).parent))
from adaptive import ROOT, preemptions, sim_and_gate, watch_gate
from baseline import checkout

SLO_S = 2.0
LEVELS = (1.0, 1.5, 2.0, 4.0)
# Burstiness on top of the gamma gaps: 2x the base rate for the last quarter of every 20 s.
SPIKES = Pattern(period=20.0, duty=0.25, factor=2.0)
GOOD_SHARE_GOAL = 0.90
REFUSAL_GOAL_MS = 50.0
GPU_BUSY_MIN = 0.9
# "Today's adaptive": the gate's code before issue 24.
TODAY = "710b3e0"
PLAN = "plan"  # a value taken from the planner's recommendation

# The lane configurations. Times (keys ending in _s) are simulated seconds; None leaves the key
# out (the gate's default).
CONFIGS: dict[str, dict[str, Any]] = {
    "loose": {"max_inflight": 256, "max_queue": 1024, "queue_timeout_s": 30.0},
    "plan": {"max_inflight": PLAN, "max_queue": PLAN, "queue_timeout_s": 30.0},
    # As bench/adaptive.py runs it: the target is TTFT after admission, 0.6 x the SLO (the queue
    # wait is the rest of the user's budget).
    "today": {"policy": "adaptive", "min_inflight": 4, "max_inflight": 256, "max_queue": PLAN,
              "queue_timeout_s": 30.0, "target_ttft_p99_s": 0.6 * SLO_S},
}  # fmt: skip
# (d) The new design: adjust here. The target is the user's TTFT; max_queue_wait_s None derives
# the queue-wait budget from it (minus the lane's recent prefill time).
NEW: dict[str, Any] = {
    "policy": "adaptive",
    "min_inflight": 4,
    "max_inflight": 256,
    "max_queue": 1024,
    "queue_timeout_s": 30.0,
    "target_ttft_p99_s": SLO_S,
    "max_queue_wait_s": None,
}
CONFIGS["new"] = NEW
NEW_GATE_ARGS: list[str] = []  # extra `gpuwatch gate` arguments for (d)
# Configurations whose gate runs older code: the commit.
REVS = {"today": TODAY}


@dataclass
class Run:
    config: str
    level: float
    results: list[Result]
    preemptions: float
    wall_s: float
    trace: list[tuple[float, int]]
    # CPU seconds per wall second of the simulator, the gate and this client, and the machine's
    # 1-minute load average at the end: a simulator short of CPU falls behind and skips ahead
    # (gpuwatch/sim/node.py), which takes GPU time away from the simulated node.
    cpu: dict[str, float]
    load: float
    # The simulated GPU's utilization (/sim/gpu, its last wall second) once a wall second.
    # Under overload the engine always has work, so it should read ~100%: less is simulated
    # GPU time lost to a simulator that fell behind.
    gpu_busy: list[float]


# The planner's traffic with the spikes on top; its rate is the mean before the spikes.
BURSTY = Traffic(pattern=SPIKES)
MEAN_FACTOR = (1 - SPIKES.duty) + SPIKES.duty * SPIKES.factor


def base_rate(knee: float, level: float) -> float:
    """The rate between spikes that makes the mean level x knee."""
    return level * knee / MEAN_FACTOR


def arrivals(knee: float, level: float, seconds: float, scale: float, seed: int) -> list[Shape]:
    """The level's requests (drawn as ``gpuwatch plan`` draws its probes' arrivals, so the
    prediction below sees the same ones) at planned wall times."""
    return [
        (a.t / scale, a.lane, a.prompt, a.output)
        for a in BURSTY.arrivals(base_rate(knee, level), seconds, seed)
        if a.t < seconds
    ]


def predict(lane: dict[str, Any], knee: float, level: float, seconds: float,
            seed: int) -> dict[str, Any] | None:  # fmt: skip
    """What ``gpuwatch plan``'s simulation (the engine with the gate's own admission lane in
    front, in simulated time: no processes, no wall clock) gives for a static lane on the same
    arrivals; None for an adaptive one (its controller is not in that simulation). The measured
    row should come near it on a machine with CPU to spare."""
    if lane.get("policy", "static") != "static":
        return None
    limits = LaneLimits(**{k: v for k, v in lane.items() if v is not None})
    probe = run_probe(get_profile(DEFAULT_PROFILE), BURSTY, base_rate(knee, level), seconds,
                      Target(SLO_S), limits, seed=seed)  # fmt: skip
    return {"good_share_of_knee": probe.good / seconds / knee, "p99_ttft_s": probe.ttft_p99_s}


def resolve(name: str, rec: Recommendation) -> tuple[dict[str, Any], list[str]]:
    """A configuration with the plan's values filled in (simulated seconds; None: the gate's
    default), and the keys left out because this checkout's gate does not know them."""
    lane: dict[str, Any] = {}
    dropped = []
    for key, value in CONFIGS[name].items():
        if name not in REVS and key not in LANE_KEYS:
            dropped.append(key)
        else:
            lane[key] = getattr(rec, key) if value == PLAN else value
    return lane, dropped


def for_gate(lane: dict[str, Any], scale: float) -> dict[str, Any]:
    """The lane as the gate gets it: times / scale, None keys left out."""
    return {
        key: round(value / scale, 6) if key.endswith("_s") else value
        for key, value in lane.items()
        if value is not None
    }


def run_one(name: str, lane: dict[str, Any], level: float, shapes: list[Shape],
            args: argparse.Namespace, work: Path, code: Path) -> Run:  # fmt: skip
    gate_args = NEW_GATE_ARGS if name == "new" else []
    with sim_and_gate(f"{name}-{level:g}x", lane, work, args.time_scale, args.seed, gate_args,
                      code, DEFAULT_PROFILE) as node:  # fmt: skip
        sim_url, gate_url = node.sim_url, node.gate_url
        procs = {"sim": psutil.Process(node.sim.pid), "gate": psutil.Process(node.gate.pid),
                 "client": psutil.Process()}  # fmt: skip
        cpu0 = {k: sum(p.cpu_times()[:2]) for k, p in procs.items()}
        run = LoadRun(LoadSpec(gate_url, 1.0, requests=len(shapes), seed=args.seed), shapes=shapes)
        trace: list[tuple[float, int]] = []
        before = preemptions(sim_url)

        busy: list[float] = []

        async def drive() -> None:
            until = time.monotonic() + (shapes[-1][0] if shapes else 0.0)
            watchers = [asyncio.create_task(watch_gate(gate_url, until, trace)),
                        asyncio.create_task(watch_gpu(sim_url, until, busy))]  # fmt: skip
            await run.run()
            await asyncio.gather(*watchers)

        t0 = time.perf_counter()
        asyncio.run(drive())
        wall = time.perf_counter() - t0
        cpu = {k: (sum(p.cpu_times()[:2]) - cpu0[k]) / wall for k, p in procs.items()}
        return Run(name, level, run.results, preemptions(sim_url) - before, wall, trace, cpu,
                   os.getloadavg()[0], busy)  # fmt: skip


async def watch_gpu(sim: str, until: float, busy: list[float]) -> None:
    async with httpx.AsyncClient(trust_env=False) as client:
        while time.monotonic() < until:
            await asyncio.sleep(1.0)
            try:
                r = await client.get(f"{sim}/sim/gpu", timeout=2)
                busy.append(r.json()["gpus"][0]["utilization_gpu"] / 100)
            except (httpx.HTTPError, KeyError, IndexError, ValueError):
                pass


def row(run: Run, knee: float, seconds: float, scale: float) -> dict[str, Any]:
    ok = [r for r in run.results if r.ok and r.ttft is not None]
    ttfts = sorted(r.ttft * scale for r in ok if r.ttft is not None)
    good = sum(1 for x in ttfts if x <= SLO_S)
    refused = [r for r in run.results if r.status in REFUSALS]
    refusal_ms = [r.refused_s * 1000 for r in refused if r.refused_s is not None]
    failed = [r for r in run.results if not r.ok and r.status not in REFUSALS]
    sent = len(run.results)
    return {
        "level": run.level,
        "config": run.config,
        "sent": sent,
        "sent_rps": sent / seconds,
        "good": good,
        "good_rps": good / seconds,
        "good_share_of_knee": good / seconds / knee,
        "p99_ttft_s": sample_quantile(ttfts, 0.99) if ttfts else None,
        # When the admitted requests over the SLO were sent (simulated s): an overload's onset,
        # a spike, or all along.
        "slow_sent_at_s": sorted(
            round(r.planned * scale, 1) for r in ok if r.ttft is not None and r.ttft * scale > SLO_S
        ),
        "refused": len(refused),
        "refused_share": len(refused) / sent if sent else 0.0,
        "refusal_p50_ms": statistics.median(refusal_ms) if refusal_ms else None,
        "refused_with_retry_after": sum(1 for r in refused if r.retry_after is not None),
        "failed": len(failed),
        "failed_by_status": dict(Counter(str(r.status) for r in failed)),
        "preemptions": run.preemptions,
        "wall_s": run.wall_s,
        "cpu": run.cpu,
        "load": run.load,
        "gpu_busy": statistics.fmean(run.gpu_busy) if run.gpu_busy else None,
        "effective_max_inflight": [n for _, n in run.trace],
    }


HEAD = (f"{'level':>5s}  {'config':6s} {'sent/s':>6s}  {'good/s':>6s} {'%knee':>6s}  "
        f"{'p99 TTFT':>8s}  {'refused':>13s}  {'refusal p50':>11s}  {'failed':>6s}  "
        f"{'preempt':>7s}  {'gpu busy':>8s}  {'load':>4s}  {'predicted':>14s}  {'wall':>4s}")  # fmt: skip


def fmt(r: dict[str, Any]) -> str:
    def opt(value: float | None, spec: str, width: int, unit: str = "") -> str:
        return f"{value:{spec}}{unit}" if value is not None else f"{'n/a':>{width}s}"

    pred = r["predicted"]
    predicted = (f"{pred['good_share_of_knee']:5.0%} {opt(pred['p99_ttft_s'], '6.2f', 7, 's')}"
                 if pred else "")  # fmt: skip
    return (f"{r['level']:4g}x  {r['config']:6s} {r['sent_rps']:6.2f}  {r['good_rps']:6.2f} "
            f"{r['good_share_of_knee']:6.1%}  {opt(r['p99_ttft_s'], '7.2f', 8, 's')}  "
            f"{r['refused']:5d} ({r['refused_share']:5.1%})  "
            f"{opt(r['refusal_p50_ms'], '8.1f', 11, ' ms')}  {r['failed']:6d}  "
            f"{r['preemptions']:7.0f}  {opt(r['gpu_busy'], '8.0%', 8)}  {r['load']:4.1f}  "
            f"{predicted:>14s}  {r['wall_s']:3.0f}s{'  !' if starved(r) else ''}")  # fmt: skip


def starved(r: dict[str, Any]) -> bool:
    """Under overload the engine always has work: a simulated GPU idle more than a tenth of the
    time was held back by the machine's CPU (the simulator fell behind and skipped ahead), or
    left without work by the gate."""
    return r["level"] > 1 and r["gpu_busy"] is not None and r["gpu_busy"] < GPU_BUSY_MIN


def goals(rows: list[dict[str, Any]]) -> list[str]:
    """One PASS/FAIL line per goal for the new design, over the overload levels run."""
    new = [r for r in rows if r["config"] == "new" and r["level"] > 1]
    if not new:
        return ["goals: not judged (the new design did not run at a level above 1x)"]
    at = " ".join(f"{r['level']:g}x" for r in new)

    def line(what: str, passed: bool, values: str) -> str:
        return f"{'PASS' if passed else 'FAIL'}  new at {at}: {what} ({values})"

    good = all(r["good_share_of_knee"] >= GOOD_SHARE_GOAL for r in new)
    p99s = [r["p99_ttft_s"] for r in new]
    # A row that answered nothing has no p99 to be within the target: it fails.
    tail = all(p is not None and p <= SLO_S for p in p99s)
    fast = all(r["refusal_p50_ms"] is None or r["refusal_p50_ms"] <= REFUSAL_GOAL_MS for r in new)
    lines = [
        line(f"good req/s >= {GOOD_SHARE_GOAL:.0%} of the knee's", good,
             ", ".join(f"{r['good_share_of_knee']:.1%}" for r in new)),
        line(f"p99 TTFT of admitted <= {SLO_S:g} s", tail,
             ", ".join("n/a" if p is None else f"{p:.2f} s" for p in p99s)),
        line(f"median time to a refusal <= {REFUSAL_GOAL_MS:g} ms (wall)", fast,
             ", ".join("no refusals" if r["refusal_p50_ms"] is None
                       else f"{r['refusal_p50_ms']:.1f} ms" for r in new)),
    ]  # fmt: skip
    doubt = [f"{r['level']:g}x" for r in new if starved(r)]
    if doubt:
        lines.append(f"      (judged on rows marked !: new at {', '.join(doubt)})")
    return lines


@contextlib.contextmanager
def code_trees(names: list[str]) -> Iterator[dict[str, Path]]:
    """Where each configuration's gate code lives: a worktree of its commit, or this one."""
    with contextlib.ExitStack() as stack:
        trees = {rev: stack.enter_context(checkout(rev)) for rev in
                 {REVS[n] for n in names if n in REVS}}  # fmt: skip
        yield {n: trees[REVS[n]] if n in REVS else ROOT for n in names}


def commit() -> str:
    out = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
                         capture_output=True, text=True)  # fmt: skip
    return out.stdout.strip() or "unknown"


def csv(kind: type, choices: tuple[Any, ...] | None = None) -> Any:
    def parse(text: str) -> list[Any]:
        values = [kind(v.strip().rstrip("x")) for v in text.split(",") if v.strip()]
        bad = [v for v in values if choices is not None and v not in choices]
        if bad or not values:
            raise argparse.ArgumentTypeError(f"expected a comma list of {choices}, got {text!r}")
        return values

    return parse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--levels", type=csv(float), default=list(LEVELS),
                        help="x the knee's rate, e.g. 1,1.5,2,4")  # fmt: skip
    parser.add_argument("--minutes", type=float, default=3.0, help="simulated minutes a level")
    parser.add_argument("--time-scale", type=float, default=4.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", type=csv(str, tuple(CONFIGS)), default=list(CONFIGS),
                        help=f"configurations, a comma list of {', '.join(CONFIGS)}")  # fmt: skip
    parser.add_argument("--json", type=Path, help="write every number here")
    args = parser.parse_args()
    if any(level <= 0 for level in args.levels) or args.minutes <= 0 or args.time_scale <= 0:
        parser.error("--levels, --minutes and --time-scale must be above 0")

    t0 = time.perf_counter()
    profile = get_profile(DEFAULT_PROFILE)
    traffic = Traffic()
    plan = sweep_sim(profile, traffic, Target(SLO_S), seed=args.seed, check=False)
    if plan.knee is None or plan.recommended is None:
        raise SystemExit("the planner found no knee")
    knee, rec = plan.knee, plan.recommended
    seconds = args.minutes * 60
    names = [n for n in CONFIGS if n in args.only]
    rev = commit()
    print(f"plan ({time.perf_counter() - t0:.1f} s wall): knee {knee:.2f} req/s on "
          f"{DEFAULT_PROFILE} ({traffic.describe()}), target p99 TTFT {SLO_S:g} s; recommended "
          f"max_inflight {rec.max_inflight}, max_queue {rec.max_queue}")  # fmt: skip
    print(f"the knee's good req/s: the knee rate itself, {knee:.2f}/s (not measured); "
          f"%knee = good req/s / {knee:.2f}")  # fmt: skip
    print(f"arrivals: gamma (burstiness {DEFAULT_BURSTINESS:g}), {SPIKES.factor:g}x spikes for "
          f"the last {SPIKES.duty:.0%} of every {SPIKES.period:g} s, mean level x knee; "
          f"{seconds:g} simulated s a level, seed {args.seed}, time x{args.time_scale:g} "
          f"(times in simulated s, refusal latency in wall ms); bench at {rev}")  # fmt: skip
    lanes: dict[str, dict[str, Any]] = {}
    for name in names:
        lanes[name], dropped = resolve(name, rec)
        where = f"code at {REVS[name]}" if name in REVS else f"this checkout, {rev}"
        note = f"; left out, unknown to this gate: {', '.join(dropped)}" if dropped else ""
        print(f"  {name:6s} ({where}) {json.dumps(lanes[name])}{note}")

    rows: list[dict[str, Any]] = []
    print(HEAD)
    with tempfile.TemporaryDirectory(prefix="bench-overload-") as tmp, code_trees(names) as code:
        for level in args.levels:
            shapes = arrivals(knee, level, seconds, args.time_scale, args.seed)
            for name in names:
                gate_lane = for_gate(lanes[name], args.time_scale)
                run = run_one(name, gate_lane, level, shapes, args, Path(tmp), code[name])
                predicted = predict(lanes[name], knee, level, seconds, args.seed)
                rows.append({**row(run, knee, seconds, args.time_scale), "predicted": predicted})
                print(fmt(rows[-1]), flush=True)
    if any(starved(r) for r in rows):
        print(f"! the simulated GPU was busy < {GPU_BUSY_MIN:.0%} of the time under overload: the "
              "machine's CPU held the simulator back (it skips ahead when it falls behind), or "
              "the gate left it without work; for a static lane compare with 'predicted'")  # fmt: skip
    for line in goals(rows):
        print(line)
    if args.json:
        args.json.write_text(json.dumps(
            {"commit": rev, "profile": DEFAULT_PROFILE, "knee_rps": knee,
             "reference": "the knee rate", "slo_ttft_s": SLO_S, "seconds_per_level": seconds,
             "time_scale": args.time_scale, "seed": args.seed,
             "lanes": {n: {**lanes[n], "code": REVS.get(n, rev)} for n in names},
             "recommended": {"max_inflight": rec.max_inflight, "max_queue": rec.max_queue},
             "rows": rows}, indent=1))  # fmt: skip
    print(f"total {time.perf_counter() - t0:.0f} s wall")


if __name__ == "__main__":
    main()
