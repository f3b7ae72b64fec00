"""Simulator engine costs: one step with 256 running sequences, and a 10-minute fast-forward.

Run: python bench/sim.py   Goals: <= 1 ms per step at 256 running; <= 10 s wall for 10
simulated minutes of bursty traffic.
"""

from __future__ import annotations

import random
import statistics
import time

from gpuwatch.sim.engine import Engine, Request
from gpuwatch.sim.profiles import get_profile


def step_cost() -> tuple[float, float]:
    profile = get_profile("h200-llama3-70b-fp8")  # room for 256 long sequences without preemption
    engine = Engine(profile, seed=1)
    for i in range(256):
        engine.add(Request(f"r{i}", 200, 1000, 0.0))  # 256 x 1,200 tokens fit the pool
    while len(engine.running) < 256 or any(r.computed < r.prompt_len for r in engine.running):
        engine.step()
    samples = []
    for _ in range(20):
        t0 = time.perf_counter()
        for _ in range(20):
            engine.step()
        samples.append((time.perf_counter() - t0) / 20)
    assert len(engine.running) == 256
    return statistics.median(samples), min(samples)


def fast_forward(
    minutes: float = 10.0, rate: float = 2.0, burstiness: float = 0.5
) -> dict[str, float]:
    profile = get_profile("rtx4090-llama3-8b-awq")
    engine = Engine(profile, seed=7)
    rng = random.Random(7)
    horizon = minutes * 60
    arrivals: list[Request] = []
    t = 0.0
    i = 0
    while True:
        # Spikes: 5x the rate for 20% of each minute, as the demo's load does.
        r = rate * (5 if (t % 60) < 12 else 1)
        t += rng.gammavariate(burstiness, 1 / (r * burstiness))
        if t > horizon:
            break
        arrivals.append(Request(f"r{i}", rng.randint(128, 2048), rng.randint(64, 512), t))
        i += 1
    started = time.perf_counter()
    pending = arrivals[::-1]
    steps = 0
    while engine.now < horizon and (pending or not engine.idle):
        while pending and pending[-1].arrival <= engine.now:
            engine.add(pending.pop())
        if engine.idle:
            engine.now = pending[-1].arrival
            continue
        engine.step()
        steps += 1
    wall = time.perf_counter() - started
    return {"requests": len(arrivals), "steps": steps, "simulated_s": engine.now, "wall_s": wall,
            "preemptions": engine.preemptions, "running_at_end": len(engine.running),
            "waiting_at_end": len(engine.waiting)}  # fmt: skip


def main() -> None:
    median, best = step_cost()
    print(f"engine step, 256 running:   {median * 1000:.3f} ms median, {best * 1000:.3f} ms best "
          f"(goal <= 1 ms)")  # fmt: skip
    ff = fast_forward()
    print(f"fast-forward 10 sim minutes: {ff['wall_s']:.2f} s wall (goal <= 10 s); "
          f"{ff['requests']} requests, {ff['steps']} steps, {ff['preemptions']} preemptions, "
          f"{ff['simulated_s']:.0f} s simulated, {ff['running_at_end']} running and "
          f"{ff['waiting_at_end']} waiting at the end")  # fmt: skip


if __name__ == "__main__":
    main()
