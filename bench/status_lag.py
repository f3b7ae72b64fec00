"""Does reading /admin/status hold up the proxy, and what does a read cost, at 1,000 requests
a second? Before (``--baseline``, default 15cf11c: every record kept and walked in a worker
thread) and after (this checkout: per-second blocks and running window sums), in one run:

- a gate whose chat lane holds 300,000 ended requests of the last 5 minutes (1,000 a second,
  nine in ten refused, as a flood of refusals leaves them), written into its record in the
  gate's own process, and 1,000 more a second while the bench runs (the flood goes on);
- ``read cpu``: one status computation of a lane in the gate's process, its answer not
  cached (CPU time, median of 5), for goodput bounds asked before (as a dashboard asks the
  same every second); ``new bounds``: the same for bounds asked for the first time (median of
  3): what a poller costs the gate;
- a prober sending a proxied ``GET /v1/models`` every 20 ms to an upstream in this process:
  its latency is what every request through the gate pays. First 5 s alone (``quiet``), then
  10 s with two pollers each reading /admin/status once a second, as two dashboards do;
- inside the gate, a loop-lag probe (a 5 ms sleep, again and again: how late it wakes) and the
  gate's CPU time over the 10 s of polling (the flood's included, the same on both sides).

Each side runs ``--runs`` times (3); medians are shown. The machine's other load makes the
wall times noisy; the CPU times less so.

Run: python bench/status_lag.py [--runs 3] [--baseline REV | --skip-before]   (about 2 min)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).parent))
from baseline import REPO, checkout
from gate import free_port, wait_port

BEFORE = "15cf11c"
RATE = 1000  # requests a second in the flood
RECORDS = 300 * RATE
QUIET_S = 5.0
POLL_S = 10.0


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _one(lane: Any, arrived: float, i: int) -> None:
    """One request of the flood into the lane's record, ended (with ``end`` where the code
    has it: before this change a record was read wherever it was)."""
    record = lane.start(arrived)
    if i % 10:
        record.outcome, record.queue_wait_s, record.e2e_s = "refused", 0.0, 0.001
    else:
        record.ttft_s, record.queue_wait_s = 0.2 + (i % 97) / 100, 0.01 + (i % 13) / 1000
        record.e2e_s, record.max_itl_s = 1.5 + (i % 31) / 10, 0.02 + (i % 17) / 1000
    if hasattr(lane, "end"):
        lane.end(record)


def _read_once(lane: Any, bound: float) -> float:
    """One status computation of the lane, its answer not cached: CPU seconds."""
    cpu = time.process_time()
    if hasattr(lane, "view"):  # before: a copy on the loop, then this in a worker thread
        lane.view().report(bound, None)
    else:
        lane._cache.clear()
        lane.report(bound, None)
    return time.process_time() - cpu


async def serve(port: int, upstream: str) -> None:
    """The gate, flooded, with a loop-lag probe; prints its numbers on SIGTERM."""
    from gpuwatch.gate.config import GateConfig
    from gpuwatch.gate.limits import DEFAULT_LANES
    from gpuwatch.gate.server import start_gate

    state = Path(f"/tmp/status_lag_{port}.json")
    gate, served = await start_gate(
        upstream, GateConfig(DEFAULT_LANES), port=port, state_file=state
    )
    lane = gate.latency["chat"]
    now = time.monotonic()
    for i in range(RECORDS):
        _one(lane, now - 300 + 300 * i / RECORDS, i)
    # A question (goodput bounds) asked for the first time, then asked again, as a
    # dashboard does every second.
    first = [_read_once(lane, 1.0 + n / 100) for n in range(3)]
    reads = [_read_once(lane, 1.0) for _ in range(5)]

    async def flood() -> None:
        i = 0
        while True:
            await asyncio.sleep(0.01)
            for _ in range(RATE // 100):
                _one(lane, time.monotonic(), i)
                i += 1

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, lambda: marks.append(time.process_time()))
    marks: list[float] = []
    lags: list[tuple[float, float]] = []
    flooding = asyncio.create_task(flood())
    print("ready", flush=True)
    while not stop.is_set():
        start = loop.time()
        await asyncio.sleep(0.005)
        lags.append((time.monotonic(), loop.time() - start - 0.005))
    flooding.cancel()
    await served.close()
    state.unlink(missing_ok=True)
    cpu = marks[1] - marks[0] if len(marks) >= 2 else float("nan")
    late = [lag for _, lag in lags]
    print(json.dumps({"lags": late, "first": first, "reads": reads, "cpu": cpu}), flush=True)


async def upstream_app() -> tuple[web.AppRunner, int]:
    async def models(_: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "m"}]})

    app = web.Application()
    app.router.add_get("/v1/models", models)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, port


async def drive(port: int, pid: int) -> dict[str, list[float]]:
    url = f"http://127.0.0.1:{port}"
    quiet: list[float] = []
    polled: list[float] = []
    status: list[float] = []
    async with aiohttp.ClientSession() as s:

        async def prober(into: list[float], until: float) -> None:
            while time.monotonic() < until:
                t = time.perf_counter()
                async with s.get(f"{url}/v1/models") as r:
                    assert r.status == 200, r.status
                    await r.read()
                into.append(time.perf_counter() - t)
                await asyncio.sleep(0.02)

        async def poller(offset: float, until: float) -> None:
            await asyncio.sleep(offset)
            while time.monotonic() < until:
                t = time.perf_counter()
                async with s.get(f"{url}/admin/status", params={"ttft_s": "1"}) as r:
                    assert r.status == 200
                    await r.read()
                status.append(time.perf_counter() - t)
                await asyncio.sleep(1.0)

        await prober(quiet, time.monotonic() + QUIET_S)
        subprocess.run(["kill", "-USR1", str(pid)], check=True)
        end = time.monotonic() + POLL_S
        await asyncio.gather(poller(0.0, end), poller(0.5, end), prober(polled, end))
        subprocess.run(["kill", "-USR1", str(pid)], check=True)
    return {"quiet": quiet, "polled": polled, "status": status}


def side(tree: Path, upstream: str) -> dict[str, Any]:
    port = free_port()
    env = {"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(port), upstream],
        env=env, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        wait_port(port)
        seen = asyncio.run(drive(port, proc.pid))
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    inside = json.loads(out.strip().splitlines()[-1])
    return {**seen, **inside}


def row(label: str, runs: list[dict[str, Any]]) -> str:
    ms = 1000.0

    def med(f: Callable[[dict[str, Any]], float]) -> float:
        return float(statistics.median(f(r) for r in runs))

    return (
        f"{label:<22}"
        f"{med(lambda r: statistics.median(r['reads'])) * ms:>9.1f}ms"
        f"{med(lambda r: statistics.median(r['first'])) * ms:>9.1f}ms"
        f"{med(lambda r: statistics.median(r['status'])) * ms:>10.1f}ms"
        f"{med(lambda r: _quantile(r['quiet'], 0.99)) * ms:>10.1f}ms"
        f"{med(lambda r: _quantile(r['polled'], 0.99)) * ms:>10.1f}ms"
        f"{med(lambda r: max(r['polled'])) * ms:>9.0f}ms"
        f"{med(lambda r: max(r['lags'])) * ms:>9.0f}ms"
        f"{med(lambda r: r['cpu']):>9.2f}s"
    )


async def _with_upstream(work: Any) -> Any:
    runner, port = await upstream_app()
    try:
        return await asyncio.to_thread(work, f"http://127.0.0.1:{port}")
    finally:
        await runner.cleanup()


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--serve":
        asyncio.run(serve(int(sys.argv[2]), sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--baseline", default=BEFORE)
    parser.add_argument("--skip-before", action="store_true")
    args = parser.parse_args()
    results: dict[str, list[dict[str, Any]]] = {}
    with contextlib.ExitStack() as stack:
        trees: dict[str, Path] = {}
        if not args.skip_before:
            trees[f"before ({args.baseline})"] = stack.enter_context(checkout(args.baseline))
        trees["after (this checkout)"] = REPO
        for n in range(args.runs):  # sides interleaved: the machine's load hits both alike
            for label, tree in trees.items():
                print(f"run {n + 1}/{args.runs}: {label}", file=sys.stderr, flush=True)
                got = asyncio.run(_with_upstream(lambda up, t=tree: side(t, up)))
                results.setdefault(label, []).append(got)
    print(
        f"{RECORDS:,} requests in the chat lane's 5 minutes and {RATE:,}/s more; proxied "
        f"GET /v1/models every 20 ms, {QUIET_S:g} s alone then {POLL_S:g} s with 2 pollers "
        f"reading /admin/status each second; medians of {args.runs} runs"
    )
    print(
        f"{'':<22}{'read cpu':>11}{'new bounds':>11}{'status':>12}{'p99 quiet':>12}{'p99 polled':>12}"
        f"{'max':>11}{'lag max':>11}{'gate cpu':>10}"
    )
    for label, runs in results.items():
        print(row(label, runs))


if __name__ == "__main__":
    main()
