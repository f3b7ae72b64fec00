"""Chat's TTFT tail during an image burst, with and without an image lane: the seed's claim that
lanes keep image work from polluting the chat tail, measured on the simulator.

Run: python bench/mix.py [--seconds 60] [--images 12] [--rate 2] [--seed 0]

The simulator (RTX 4090 profile, also serving SDXL images and embeddings, real time) runs as a
child process, and for two of the three setups a gate in front of it:

- ``chat alone (no images)``: the reference, chat straight to the simulator without the burst;
- ``no gate``: the load goes straight to the simulator, which runs as many images at once as
  its image VRAM reserve holds (two at 1024x1024);
- ``gate, image lane loose``: through the gate, the image lane with max_inflight 16;
- ``gate, image lane 1``: through the gate, the image lane with max_inflight 1 and a deep queue.

Each setup gets the same seeded load from ``gpuwatch.load``: chat at ``--rate`` requests/s
(Poisson, 512-token prompts, 128 output tokens) for ``--seconds``, and ``--images`` SDXL
1024x1024 / 30-step requests sent within one second, 10 s in. Printed per setup: chat TTFT
p50 / p99 over the whole run and over the burst (requests sent while images were still
running), chat ITL mean, and the images' E2E p50 / max; all in milliseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys

from gpuwatch.demo import DEMO_GATE_TOML, start_stack
from gpuwatch.load import LoadRun, LoadSpec
from gpuwatch.load.report import percentile
from gpuwatch.load.runner import Result, Shape
from gpuwatch.load.spec import Dist, ImageShape

BURST_AT_S = 10.0

LANES = {
    "gate, image lane loose": "[lanes.image]\nmax_inflight = 16\nmax_queue = 64\n"
    "queue_timeout_s = 600.0\n",
    "gate, image lane 1": "[lanes.image]\nmax_inflight = 1\nmax_queue = 64\n"
    "queue_timeout_s = 600.0\n",
}


async def measure(
    url: str, args: argparse.Namespace, images_on: bool = True
) -> tuple[list[Result], list[Result]]:
    chat = LoadSpec(
        url=url,
        rate=args.rate,
        duration_s=args.seconds,
        prompt_tokens=Dist("fixed", 512),
        output_tokens=Dist("fixed", 128),
        seed=args.seed,
    )
    images = LoadSpec(url=url, rate=1.0, requests=args.images, lane_mix={"image": 1.0},
                      image=ImageShape(((1024, 1024),)), seed=args.seed + 1)  # fmt: skip
    shapes: list[Shape] = [
        (BURST_AT_S + i / args.images, "image", 0, 0) for i in range(args.images)
    ]
    if not images_on:
        return await LoadRun(chat).run(), []
    chat_run, image_run = LoadRun(chat), LoadRun(images, shapes=shapes)
    chat_results, image_results = await asyncio.gather(chat_run.run(), image_run.run())
    return chat_results, image_results


def ms(values: list[float], p: int) -> str:
    return f"{percentile(values, p) * 1000:9.0f}" if values else f"{'-':>9}"


def row(name: str, chat: list[Result], images: list[Result]) -> str:
    ok = [r for r in chat if r.ok and r.ttft is not None]
    done = [r.sent + (r.e2e or 0) for r in images if r.ok]
    # Without images, the same window as the bursts: from BURST_AT_S to the end of the run.
    burst_end = max(done) if done else max((r.sent for r in chat), default=BURST_AT_S)
    during = [r.ttft for r in ok if BURST_AT_S <= r.sent <= burst_end and r.ttft is not None]
    ttft = [r.ttft for r in ok if r.ttft is not None]
    itl = [g for r in ok for g in r.itl]
    e2e = [r.e2e for r in images if r.ok and r.e2e is not None]
    failed = sum(not r.ok for r in chat) + sum(not r.ok for r in images)
    itl_mean = f"{statistics.fmean(itl) * 1000:9.1f}" if itl else f"{'-':>9}"
    return (
        f"{name:<24}{ms(ttft, 50)}{ms(ttft, 99)} {ms(during, 50)} {ms(during, 99)}{itl_mean}"
        f"{ms(e2e, 50)}{max(e2e) * 1000 if e2e else 0:9.0f}{burst_end - BURST_AT_S:9.1f}"
        f"{len(ok):6d}{failed:6d}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--images", type=int, default=12)
    parser.add_argument("--rate", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(
        f"chat {args.rate:g} req/s (512 in / 128 out) for {args.seconds:g} s; {args.images} SDXL "
        f"1024x1024/30-step images at t={BURST_AT_S:g} s; rtx4090 profile, real time, "
        f"seed {args.seed}"
    )
    # TTFT over the whole run, then over the burst (sent while images ran); ITL mean; images'
    # E2E; how long the burst kept images running; chat requests done; failures (all kinds).
    print(
        f"{'setup':<24}{'TTFT p50':>9}{'TTFT p99':>9}{'burst p50':>10}{'burst p99':>10}"
        f"{'ITL mean':>9}{'img p50':>9}{'img max':>9}{'burst s':>9}{'chat':>6}{'fail':>6}"
    )
    setups: list[tuple[str, str | None]] = [("chat alone (no images)", None), ("no gate", None)]
    setups += [(name, DEMO_GATE_TOML.split("[lanes.image]")[0] + toml)
               for name, toml in LANES.items()]  # fmt: skip
    for name, toml in setups:
        stack = start_stack(None, seed=args.seed, gate_toml=toml or DEMO_GATE_TOML)
        try:
            url = stack.gate_url if toml else stack.sim_url
            chat, images = asyncio.run(measure(url, args, images_on=name != setups[0][0]))
        finally:
            stack.stop()
        print(row(name, chat, images), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
