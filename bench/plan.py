"""``gpuwatch plan sweep`` in-process: its cost per simulated minute, and the done-when command.

Run: python bench/plan.py   Goal: the default sweep (rtx4090-llama3-8b-awq, ttft_p99_s=2) in
under 30 s of wall time on 2 cores.

- Cost per simulated minute, at rates around the default profile's knee, of one probe (the
  engine stepped in simulated time, with no gate as the search runs it, and behind the gate's
  own chat lane as the checks run it): wall seconds / simulated minutes. The cost grows with
  the rate (more steps carry more requests each), so it is given per rate.
- The whole sweep as the CLI runs it: probes, wall time, simulated time, the knee, the boring
  zone and the recommended limits.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import replace

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


def main() -> None:
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
    print(f"the default sweep: {wall:.2f} s wall (goal < 30 s), {len(plan.probes)} probes and "
          f"{len(plan.checks)} checks, {minutes:.1f} simulated minutes: "
          f"{wall / minutes * 1000:.0f} ms wall per simulated minute overall")  # fmt: skip
    rec = plan.recommended
    print(f"knee {plan.knee:.2f} req/s, boring zone {plan.boring:.2f} req/s; recommended "
          f"{rec.limits() if rec else None}")  # fmt: skip
    for c in plan.checks:
        print(f"check: {c.label} at {c.probe.rate:.2f} req/s: goodput "
              f"{c.probe.attainment:.1%}, passed {c.probe.passed}")  # fmt: skip


if __name__ == "__main__":
    main()
