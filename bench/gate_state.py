"""What hardening costs and saves, in numbers: PATCH latency against the audit trail's length,
and the gate's memory while clients send large bodies.

- PATCH /admin/limits latency (median of 40) with an audit trail of 10, 1,000 and 20,000
  entries (a schema-1 state file is written with them; a gate that keeps the trail in a log
  migrates it at start). Goal: the same at every length.
- Gate RSS (peak, sampled) while 8 clients at once send 60 MiB bodies, then 4 MiB bodies.
  Goal: bounded by the lane's max_body, not by what clients send.

Run: python bench/gate_state.py
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import psutil

sys.path.insert(0, str(Path(__file__).parent))
from gate import free_port, wait_port

LIMITS = {"version": 1, "paused": False, "lanes": {}}


def entry(n: int) -> dict[str, object]:
    lanes = {
        name: {"max_inflight": 16, "max_queue": 64, "queue_timeout_s": 30.0,
               "max_prompt_tokens": None, "max_output_tokens": None,
               "output_tokens_policy": "clamp"}
        for name in ("chat", "embed", "image", "default")
    }  # fmt: skip
    snapshot = {"version": n, "paused": False, "lanes": lanes}
    return {"time": 1.7e9 + n, "actor": f"op{n}@box", "version": n + 1,
            "change": {"lanes": {"chat": {"max_inflight": 16}}},
            "before": snapshot, "after": snapshot}  # fmt: skip


def start_gate(state: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuwatch", "gate", "--upstream", "http://127.0.0.1:9",
         "--listen", f"127.0.0.1:{port}", "--state-file", str(state)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    wait_port(port, timeout=60)
    return proc, f"http://127.0.0.1:{port}"


async def patch_latency(url: str, n: int = 40) -> float:
    times = []
    async with aiohttp.ClientSession() as s:
        for i in range(n):
            t0 = time.perf_counter()
            body = {"lanes": {"chat": {"max_queue": 64 + i % 2}}}
            async with s.patch(f"{url}/admin/limits", json=body) as r:
                assert r.status == 200, await r.text()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


async def big_bodies(url: str, proc: psutil.Process, size: int, clients: int = 8) -> int:
    peak: int = proc.memory_info().rss  # psutil has no type information
    done = asyncio.Event()

    async def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, proc.memory_info().rss)
            await asyncio.sleep(0.01)

    async def one(s: aiohttp.ClientSession) -> None:
        async def chunks() -> AsyncIterator[bytes]:
            piece = b"x" * (1 << 20)
            for _ in range(size >> 20):
                yield piece

        headers = {"Content-Type": "application/json", "Content-Length": str(size)}
        try:
            async with s.post(f"{url}/v1/completions", data=chunks(), headers=headers) as r:
                await r.read()
        except aiohttp.ClientError:
            pass  # refused and closed before the whole body went out

    sampler = asyncio.create_task(sample())
    async with aiohttp.ClientSession() as s:
        await asyncio.gather(*(one(s) for _ in range(clients)))
    done.set()
    await sampler
    return peak


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        print("PATCH /admin/limits median latency by audit trail length:")
        for n in (10, 1000, 20000):
            state = Path(tmp) / f"state-{n}.json"
            audit = [entry(i) for i in range(n, 0, -1)]
            state.write_text(json.dumps({"schema": 1, "limits": LIMITS, "audit": audit}))
            proc, url = start_gate(state)
            try:
                latency = await patch_latency(url)
            finally:
                proc.terminate()
                proc.wait(10)
            print(f"  {n:>6} entries: {latency * 1000:6.1f} ms")
        proc, url = start_gate(Path(tmp) / "state-mem.json")
        try:
            p = psutil.Process(proc.pid)
            base = p.memory_info().rss
            print(f"gate RSS at rest: {base / 2**20:.0f} MiB")
            for size in (60 << 20, 4 << 20):
                peak = await big_bodies(url, p, size)
                print(f"  peak with 8 clients sending {size >> 20} MiB bodies: "
                      f"{peak / 2**20:.0f} MiB")  # fmt: skip
        finally:
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    asyncio.run(main())
