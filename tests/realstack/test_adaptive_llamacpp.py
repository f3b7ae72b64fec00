"""Adaptive admission in front of a real llama-server (``-np 2``): with a target no request
can meet, the controller cuts the effective limit step by step to its floor and settles there
(decisions audited by ``adaptive``, the upstream's own /metrics read in its llama.cpp dialect),
and every request completes."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import aiohttp

from gpuwatch.gate.config import GateConfig
from gpuwatch.gate.limits import DEFAULT_LANES
from gpuwatch.gate.server import start_gate
from tests.helpers import eventually


async def test_adaptive_settles_at_its_floor_and_requests_complete(
    llama_server: str, tmp_path: Path
) -> None:
    chat = replace(
        DEFAULT_LANES[0],
        limits=replace(
            DEFAULT_LANES[0].limits,
            # Below llama-server's HTTP threads (np + 2 = 4 on 2 cores), one left for /metrics.
            max_inflight=3,
            max_queue=64,
            queue_timeout_s=120.0,
            max_queue_wait_s=120.0,  # the test is about the in-flight limit, not queue time
            target_ttft_p99_s=0.0001,  # tight: no request meets it
            min_inflight=1,
        ),
    )
    gate, served = await start_gate(
        llama_server,
        GateConfig((chat, *DEFAULT_LANES[1:])),
        state_file=tmp_path / "s.json",
        upstream_metrics=f"{llama_server}/metrics",
    )
    statuses: list[int] = []
    stop = asyncio.Event()

    async def client(s: aiohttp.ClientSession) -> None:
        body = {"prompt": "the node is in its boring zone", "max_tokens": 24, "ignore_eos": True}
        while not stop.is_set():
            async with s.post(f"{served.url}/v1/completions", json=body) as r:
                await r.read()
                statuses.append(r.status)

    def settled() -> bool:
        status = gate.adaptive.status("chat")
        assert status is not None
        last = [n for _, n in status.history[-4:]]
        return len(last) == 4 and set(last) == {1}  # at the floor for 4 rounds

    try:
        # A request that never ends fails the test with a status, not a hang.
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as s:
            clients = [asyncio.create_task(client(s)) for _ in range(5)]
            # Switched on with the lane full: adaptive starts from the 3 in flight.
            await eventually(lambda: gate.lanes["chat"].inflight == 3, timeout=60)
            async with s.patch(
                f"{served.url}/admin/limits", json={"lanes": {"chat": {"policy": "adaptive"}}}
            ) as r:
                assert r.status == 200, await r.text()
                # What was in flight at that instant (3, or 2 if one just ended).
                start = (await r.json())["effective"]["chat"]["max_inflight"]
            assert start in (2, 3)
            # The upstream's page is read in its own dialect (llama.cpp exports no KV usage).
            reading = await eventually(gate.upstream_metrics.latest, timeout=60)  # type: ignore[union-attr]
            assert reading.kv_usage is None
            await eventually(settled, timeout=180, message="the effective limit never settled")
            stop.set()
            await asyncio.gather(*clients)
            async with s.get(f"{served.url}/admin/audit") as r:
                entries = (await r.json())["entries"]
            async with s.get(f"{served.url}/admin/status") as r:
                lane = (await r.json())["lanes"]["chat"]
    finally:
        await served.close()

    cuts = [e for e in entries if e["actor"] == "adaptive"]
    steps = [e["change"]["lanes"]["chat"]["effective_max_inflight"] for e in reversed(cuts)]
    # -25% a step, floored, never under the bound: 3 -> 2 -> 1 (or 2 -> 1).
    assert steps == [2, 1][3 - start :]
    assert all(e["version"] == 2 and "p99 TTFT" in e["reason"] for e in cuts)
    assert lane["max_inflight"] == 3 and lane["effective_max_inflight"] == 1
    assert "floor 1" in lane["adaptive"]["note"]
    assert statuses and all(code == 200 for code in statuses)
    assert lane["inflight"] == 0 and lane["queued"] == 0
