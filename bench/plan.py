"""``gpuwatch plan sweep`` in-process: its cost per simulated minute, the done-when command,
and the knee across seeds before and after judging rates across arrival sequences.

Run: python bench/plan.py [--seeds N] [--before REV]   Goal: the default sweep
(rtx4090-llama3-8b-awq, ttft_p99_s=2) in under 30 s of wall time on 2 cores.

- Cost per simulated minute, at rates around the default profile's knee, of one probe (the
  engine stepped in simulated time, with no gate as the search runs it, and behind the gate's
  own chat lane as the checks run it): wall seconds / simulated minutes. The cost grows with
  the rate (more steps carry more requests each), so it is given per rate.
- The whole sweep as the CLI runs it: probes, wall time, simulated time, the knee, the boring
  zone and the recommended limits.
- With ``--seeds N``: the default sweep for seeds 0..N-1, by the code at ``--before`` (default
  e9f8b8b, one arrival sequence per rate, judged over its requests; a ``git worktree`` of it,
  bench/baseline.py) and by this checkout (several sequences, judged by the lower bound across
  them): each seed's knee, the spread, each seed's wall and CPU seconds, and whether each check
  held. Each side runs in its own process, one seed after another.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from baseline import REPO, checkout

from gpuwatch.gate.limits import LaneLimits
from gpuwatch.plan.planner import GATE_DEFAULT_CHAT, sweep_sim
from gpuwatch.plan.probe import Target
from gpuwatch.plan.simulate import run_probe
from gpuwatch.plan.traffic import Traffic
from gpuwatch.sim.profiles import get_profile

PROFILE = get_profile("rtx4090-llama3-8b-awq")
TARGET = Target(2.0, None, 0.99)


def cost_per_simulated_minute(
    rate: float, minutes: float = 5.0, repeat: int = 3, limits: LaneLimits | None = None
) -> float:
    samples = []
    for seed in range(repeat):
        t0 = time.perf_counter()
        run_probe(PROFILE, Traffic(), rate, minutes * 60, TARGET, limits, seed=seed)
        samples.append((time.perf_counter() - t0) / minutes)
    return statistics.median(samples)


# Run by each side's own interpreter, with that side's code first on the path.
_SEEDS = """
import json, sys, time
from gpuwatch.plan.planner import sweep_sim
from gpuwatch.plan.probe import Target
from gpuwatch.plan.traffic import Traffic
from gpuwatch.sim.profiles import get_profile
profile = get_profile("rtx4090-llama3-8b-awq")
for seed in range(int(sys.argv[1])):
    wall, cpu = time.perf_counter(), time.process_time()
    plan = sweep_sim(profile, Traffic(), Target(2.0, None, 0.99), seed=seed)
    print(json.dumps({"seed": seed, "knee": plan.knee, "wall": time.perf_counter() - wall,
                      "cpu": time.process_time() - cpu,
                      "sequences": sum(getattr(p, "sequences", 1) for p in plan.probes),
                      "checks": [[c.label, c.probe.rate, c.probe.passed] for c in plan.checks]}),
          flush=True)
"""


def knees_across_seeds(root: Path, seeds: int) -> list[dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, "-c", _SEEDS, str(seeds)], env=env, cwd=root,
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    return [json.loads(line) for line in out.splitlines()]


def print_seeds(name: str, runs: list[dict[str, Any]]) -> None:
    knees = [r["knee"] for r in runs]
    print(f"{name}: knees {knees}: {min(knees):.2f} to {max(knees):.2f} req/s "
          f"(spread {max(knees) - min(knees):.2f}, sd {statistics.pstdev(knees):.2f}); wall "
          f"{statistics.median(r['wall'] for r in runs):.1f} s median, "
          f"{max(r['wall'] for r in runs):.1f} max; CPU "
          f"{statistics.median(r['cpu'] for r in runs):.1f} s median")  # fmt: skip
    held: dict[str, list[bool]] = {}
    for r in runs:
        for label, _, passed in r["checks"]:
            held.setdefault(label, []).append(bool(passed))
    for label, verdicts in held.items():
        print(f"  check {label}: held for {sum(verdicts)} of {len(verdicts)} seeds")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=0, help="knees for seeds 0..N-1")
    parser.add_argument("--before", default="e9f8b8b", help="the code to compare with")
    args = parser.parse_args()
    if args.seeds:
        with checkout(args.before) as tree:
            print_seeds(f"before ({args.before})", knees_across_seeds(tree, args.seeds))
        print_seeds("after (this checkout)", knees_across_seeds(REPO, args.seeds))
        return
    print("cost per simulated minute (one probe, 5 simulated minutes, median of 3):")
    for rate in (1.0, 3.0, 4.2, 6.0, 8.0):
        print(f"  {rate:4.1f} req/s: {cost_per_simulated_minute(rate) * 1000:6.0f} ms wall")
    # The checks' case: the gate's own admission lane in front (gate/offline.py).
    gated = replace(GATE_DEFAULT_CHAT, max_inflight=99, max_queue=9)
    print("the same through the gate's chat lane (99 in flight, queue 9):")
    for rate in (4.2, 8.0):
        cost = cost_per_simulated_minute(rate, limits=gated)
        print(f"  {rate:4.1f} req/s: {cost * 1000:6.0f} ms wall")
    t0 = time.perf_counter()
    plan = sweep_sim(PROFILE, Traffic(), TARGET, seed=0)
    wall = time.perf_counter() - t0
    minutes = plan.simulated_s / 60
    print(f"the default sweep: {wall:.2f} s wall (goal < 30 s), {len(plan.probes)} rates and "
          f"{len(plan.checks)} checks, {plan.sequences_run} arrival sequences, "
          f"{minutes:.1f} simulated minutes: "
          f"{wall / minutes * 1000:.0f} ms wall per simulated minute overall")  # fmt: skip
    rec = plan.recommended
    print(f"knee {plan.knee:.2f} req/s, boring zone {plan.boring:.2f} req/s; recommended "
          f"{rec.limits() if rec else None}")  # fmt: skip
    for c in plan.checks:
        print(f"check: {c.label} at {c.probe.rate:.2f} req/s: goodput "
              f"{c.probe.attainment:.1%}, passed {c.probe.passed}")  # fmt: skip


if __name__ == "__main__":
    main()
