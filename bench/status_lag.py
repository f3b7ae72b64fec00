"""Does reading /admin/status after a flood hold up the proxy? Before (8ebca5e, the status
computed on the event loop) and after (in a worker thread), the same run:

- a gate whose chat lane holds 300,000 records of the last 5 minutes (what 75 s of 4,000
  refusals a second leaves; written straight into its record, in the gate's own process);
- two pollers each reading /admin/status once a second, as two dashboards do, for 10 s;
- a prober sending GET /health every 20 ms: its latency is what every request through the
  gate pays while status is read;
- inside the gate, a loop-lag probe: a 5 ms sleep, again and again, and how late it wakes.
  A blocked event loop shows as lag; a loop that only shares the GIL with the worker thread
  wakes within a few switch intervals (5 ms each). Shown: the worst wake-up, and the time the
  loop spent late by more than 50 ms at a stretch (out of the 10 s).

Run: python bench/status_lag.py    (about 40 s; prints a table, window: the 10 s of polling)
"""

from __future__ import annotations

import asyncio
import json
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).parent))
from baseline import REPO, checkout
from gate import free_port, wait_port

BEFORE = "8ebca5e"
RECORDS = 300_000
POLL_S = 10.0


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def serve(port: int) -> None:
    """The gate, flooded, with a loop-lag probe; prints the probe's numbers on SIGTERM."""
    from gpuwatch.gate.config import GateConfig
    from gpuwatch.gate.limits import DEFAULT_LANES
    from gpuwatch.gate.server import start_gate

    state = Path(f"/tmp/status_lag_{port}.json")
    gate, served = await start_gate(
        "http://127.0.0.1:9", GateConfig(DEFAULT_LANES), port=port, state_file=state
    )
    lane = gate.latency["chat"]
    now = time.monotonic()
    for i in range(RECORDS):
        record = lane.start(now - 290 + 290 * i / RECORDS)
        if i % 10:
            record.outcome, record.queue_wait_s, record.e2e_s = "refused", 0.0, 0.001
        else:
            record.ttft_s, record.queue_wait_s, record.e2e_s = 0.2 + i % 7 / 10, 0.01, 1.5
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    lags: list[float] = []
    print("ready", flush=True)
    while not stop.is_set():
        start = loop.time()
        await asyncio.sleep(0.005)
        lags.append(loop.time() - start - 0.005)
    await served.close()
    state.unlink(missing_ok=True)
    print(json.dumps({"lags": lags}), flush=True)


async def drive(port: int) -> dict[str, list[float]]:
    url = f"http://127.0.0.1:{port}"
    health: list[float] = []
    status: list[float] = []
    end = time.monotonic() + POLL_S
    async with aiohttp.ClientSession() as s:

        async def poller(offset: float) -> None:
            await asyncio.sleep(offset)
            while time.monotonic() < end:
                t = time.perf_counter()
                async with s.get(f"{url}/admin/status") as r:
                    assert r.status == 200
                    await r.read()
                status.append(time.perf_counter() - t)
                await asyncio.sleep(1.0)

        async def prober() -> None:
            while time.monotonic() < end:
                t = time.perf_counter()
                async with s.get(f"{url}/health") as r:
                    await r.read()
                health.append(time.perf_counter() - t)
                await asyncio.sleep(0.02)

        await asyncio.gather(poller(0.0), poller(0.5), prober())
    return {"health": health, "status": status}


def side(label: str, tree: Path) -> dict[str, object]:
    port = free_port()
    env = {"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(port)],
        env=env, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        wait_port(port)
        seen = asyncio.run(drive(port))
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    lags = json.loads(out.strip().splitlines()[-1])["lags"]
    return {"label": label, **seen, "lags": lags}


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        asyncio.run(serve(int(sys.argv[2])))
        return
    rows = []
    with checkout(BEFORE) as old:
        rows.append(side(f"before ({BEFORE})", old))
    rows.append(side("after (this checkout)", REPO))
    ms = 1000.0
    print(f"{RECORDS:,} records in the chat lane; 2 pollers reading /admin/status each second, "
          f"/health every 20 ms; window: {POLL_S:g} s")  # fmt: skip
    print(f"{'':<24}{'health p50':>11}{'p99':>9}{'max':>9}{'loop lag max':>14}"
          f"{'late >50ms':>12}{'status p50':>12}")  # fmt: skip
    for row in rows:
        h, lag, st = row["health"], row["lags"], row["status"]
        assert isinstance(h, list) and isinstance(lag, list) and isinstance(st, list)
        print(
            f"{row['label']:<24}{statistics.median(h) * ms:>9.1f}ms{_quantile(h, 0.99) * ms:>7.0f}ms"
            f"{max(h) * ms:>7.0f}ms{max(lag) * ms:>12.0f}ms"
            f"{sum(x for x in lag if x > 0.05):>11.2f}s{statistics.median(st) * ms:>10.0f}ms"
        )


if __name__ == "__main__":
    main()
