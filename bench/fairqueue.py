"""What the fair queue costs per request, and how the gate shares a lane among tenants.

Run: python bench/fairqueue.py   Prints:

1. The queue alone (``gate/fairqueue.py``): microseconds per request through
   append + peek + served, with 1, 100 and 10,000 tenants waiting, and with every tenant but
   the last blocked (paused or at its cap: the worst case, ``peek`` walks past them all),
   beside a plain deque's append + popleft.
2. Through the gate (real HTTP on loopback, a counting upstream that answers after 2 ms):
   one noisy tenant sending 10x each of 4 others, max_inflight 2; the share of the slots each
   got while all had work waiting, FIFO (no tenant header) against turns (with one).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from collections import Counter, deque
from pathlib import Path
from types import SimpleNamespace

import aiohttp

from gpuwatch.gate.classes import FAIRNESS_HEADER, Who
from gpuwatch.gate.config import GateConfig
from gpuwatch.gate.fairqueue import FairQueue
from gpuwatch.gate.limits import DEFAULT_LANES
from gpuwatch.gate.server import start_gate

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root, for tests/
from tests.functional.upstreams import CountingUpstream


def queue_cost(tenants: int, blocked: bool, n: int = 50_000) -> float:
    q: FairQueue[SimpleNamespace] = FairQueue()
    whos = [Who(f"t{i}", "standard", 0) for i in range(tenants)]
    last = whos[-1].tenant
    if blocked:
        q.blocked = lambda tenant: tenant != last
        for who in whos[:-1]:
            q.append(SimpleNamespace(who=who, since=0.0))  # held back the whole time
    items = [SimpleNamespace(who=whos[-1] if blocked else whos[i % tenants], since=float(i))
             for i in range(n)]  # fmt: skip
    start = time.perf_counter()
    for item in items:
        q.append(item)
        w = q.peek()
        assert w is not None
        q.served(w)
    return (time.perf_counter() - start) / n * 1e6


def deque_cost(n: int = 50_000) -> float:
    d: deque[SimpleNamespace] = deque()
    items = [SimpleNamespace(since=float(i)) for i in range(n)]
    start = time.perf_counter()
    for item in items:
        d.append(item)
        d.popleft()
    return (time.perf_counter() - start) / n * 1e6


async def shares(with_tenants: bool) -> Counter[str]:
    upstream = CountingUpstream(hold=False)
    url = await upstream.start()
    with tempfile.TemporaryDirectory() as tmp:
        _, served = await start_gate(
            url, GateConfig(DEFAULT_LANES), state_file=Path(tmp) / "s.json"
        )
        try:
            connector = aiohttp.TCPConnector(limit=0)  # every request at the gate at once
            async with aiohttp.ClientSession(connector=connector) as s:

                async def limits(chat: dict[str, int]) -> None:
                    patch = {"lanes": {"chat": chat}}
                    async with s.patch(f"{served.url}/admin/limits", json=patch):
                        pass

                async def queued() -> int:
                    async with s.get(f"{served.url}/admin/status") as r:
                        return int((await r.json())["lanes"]["chat"]["queued"])

                # Everyone queued first (0 admits nothing new), then 2 slots: the order in
                # which the lane hands them out is what is measured.
                await limits({"max_inflight": 0, "max_queue": 1000})

                async def send(tenant: str, i: int) -> None:
                    headers = {FAIRNESS_HEADER: tenant} if with_tenants else {}
                    body = {"prompt": "hi", "tag": tenant, "stream": True, "chunks": 1,
                            "gap": 0.002}  # fmt: skip
                    async with s.post(f"{served.url}/v1/completions", json=body,
                                      headers=headers) as r:  # fmt: skip
                        await r.read()

                plan = [("noisy", i) for i in range(200)]
                plan += [(f"t{k}", i) for k in range(4) for i in range(20)]
                tasks = [asyncio.create_task(send(t, i)) for t, i in plan]
                while await queued() < len(plan):
                    await asyncio.sleep(0.05)
                await limits({"max_inflight": 2})
                await asyncio.gather(*tasks)
        finally:
            await served.close()
            await upstream.stop()
    # While every tenant had work waiting: the first 100 admissions.
    return Counter(upstream.arrivals[:100])


def main() -> None:
    print("1. the queue alone, microseconds per request (append + peek + served)")
    print(f"   plain deque (append + popleft)       {deque_cost():6.2f}")
    for tenants in (1, 100, 10_000):
        print(f"   {tenants:>6} tenants                       {queue_cost(tenants, False):6.2f}")
    for tenants in (100, 1000):
        cost = statistics.median(queue_cost(tenants, True, 5000) for _ in range(3))
        print(f"   {tenants:>6} tenants, all but one blocked  {cost:6.2f}")
    print("2. through the gate: one tenant sends 200, four send 20 each, max_inflight 2")
    for label, flag in (("FIFO (no tenant header)", False), ("turns (fairness id)", True)):
        got = asyncio.run(shares(flag))
        total = sum(got.values())
        print(f"   {label:<26} first 100 admitted: noisy {got['noisy'] / total:5.1%}, "
              f"each other {min(got[f't{k}'] for k in range(4))}-"
              f"{max(got[f't{k}'] for k in range(4))}")  # fmt: skip


if __name__ == "__main__":
    main()
