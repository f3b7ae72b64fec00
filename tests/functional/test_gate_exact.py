"""The gate's user-felt numbers are exact: every inference request counted once, its TTFT
what the client measured, goodput judged per request; non-inference calls kept apart."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuwatch.gate.config import GateConfig
from gpuwatch.gate.latency import LaneLatency
from gpuwatch.gate.limits import DEFAULT_LANES
from gpuwatch.gate.logsketch import ALPHA
from gpuwatch.gate.requestblocks import RAW_MAX
from gpuwatch.gate.server import start_gate
from gpuwatch.load import LoadRun, LoadSpec
from gpuwatch.load.spec import Dist
from gpuwatch.series import sample_quantile
from gpuwatch.sim.profiles import get_profile
from gpuwatch.sim.server import start_sim
from tests.functional.gatekit import rig
from tests.functional.upstreams import CountingUpstream
from tests.helpers import eventually

PROFILE = get_profile("rtx4090-llama3-8b-awq")


@asynccontextmanager
async def sim_behind_gate(tmp_path: Path, time_scale: float, seed: int) -> AsyncIterator[str]:
    """The simulator with the gate in front: the gate's URL."""
    _, sim = await start_sim(PROFILE, time_scale=time_scale, seed=seed)
    _, served = await start_gate(sim.url, GateConfig(DEFAULT_LANES), state_file=tmp_path / "s.json")
    try:
        yield served.url
    finally:
        await served.close()
        await sim.close()


async def hops(url: str, client: httpx.AsyncClient, done: asyncio.Event) -> list[float]:
    """Round trips to the gate's own /health until ``done``: the two loopback hops a client's
    TTFT has and the gate's lacks, as long as this machine makes them now (milliseconds
    when it is idle; a loaded machine can make them a good part of a second)."""
    times = []
    while not done.is_set():
        start = time.perf_counter()
        assert (await client.get(f"{url}/health")).status_code == 200
        times.append(time.perf_counter() - start)
        await asyncio.sleep(0.05)
    return times


async def test_exact_ttft_matches_what_clients_measured(tmp_path: Path) -> None:
    async with sim_behind_gate(tmp_path, 4.0, 5) as url, httpx.AsyncClient() as client:
        for _ in range(3):  # not inference: never in the users' numbers
            assert (await client.get(f"{url}/v1/models")).status_code == 200
        spec = LoadSpec(
            url=url, rate=20, requests=80, burstiness=0.5, seed=2,
            prompt_tokens=Dist("uniform", 64, 1024), output_tokens=Dist("fixed", 24),
        )  # fmt: skip
        done = asyncio.Event()
        probing = asyncio.create_task(hops(url, client, done))
        try:
            results = await LoadRun(spec).run()
        finally:
            done.set()
        hop = max(await probing)
        ok = [r for r in results if r.ok]
        assert len(ok) == 80
        status = (await client.get(f"{url}/admin/status", params={"ttft_s": "100"})).json()
        metrics = (await client.get(f"{url}/metrics")).text
    chat = status["lanes"]["chat"]
    exact = chat["latency"]["5m"]
    assert exact["requests"] == 80 and exact["ttft"]["count"] == 80
    assert exact["exact"] is True and exact["rel_error"] == ALPHA  # and it says so
    assert exact["itl"]["count"] > 0 and exact["queue_wait"]["count"] == 80
    client_ttfts = sorted(r.ttft for r in ok if r.ttft is not None)
    for name, q in (("p50", 0.5), ("p99", 0.99)):
        theirs = sample_quantile(client_ttfts, q)
        # Each request's TTFT at the gate lies within the client's: never longer. The client's
        # also has a loopback hop each way, as long as the machine made them meanwhile.
        assert exact["ttft"][name] <= theirs + 0.001, (name, exact, theirs)
        assert theirs - exact["ttft"][name] <= 0.02 * theirs + 0.005 + hop, (
            name, exact, theirs, hop,
        )  # fmt: skip
    assert exact["ttft"]["max"] <= max(client_ttfts)
    good = chat["goodput"]["5m"]
    assert good == {"ended": 80, "good": 80, "slow": 0, "refused": 0, "failed": 0, "ratio": 1.0}
    assert status["lanes"]["default"]["latency"]["5m"]["requests"] == 0
    families = {f.name: f for f in text_string_to_metric_families(metrics)}
    other = {s.labels["lane"]: s.value for s in families["gpuwatch_gate_other_requests"].samples
             if s.name.endswith("_total")}  # fmt: skip
    assert other["default"] == 4  # ours, and the load generator asking which model is served
    ttft_count = next(
        s.value
        for s in families["gpuwatch_gate_ttft_seconds"].samples
        if s.name.endswith("_count") and s.labels["lane"] == "chat"
    )
    assert ttft_count == 80


async def test_goodput_counts_refusals_and_slow_requests_as_misses(tmp_path: Path) -> None:
    async with sim_behind_gate(tmp_path, 2.0, 6) as url, httpx.AsyncClient() as client:
        await client.patch(
            f"{url}/admin/limits",
            json={"lanes": {"chat": {"max_inflight": 1, "max_queue": 1}}},
        )
        spec = LoadSpec(
            url=url, rate=40, requests=30, seed=3,
            prompt_tokens=Dist("fixed", 256), output_tokens=Dist("fixed", 32),
        )  # fmt: skip
        results = await LoadRun(spec).run()
        refused = sum(1 for r in results if r.status == 429)
        answered = [r for r in results if r.ok]
        slo = sorted(r.ttft for r in answered if r.ttft is not None)[len(answered) // 2]
        status = (await client.get(f"{url}/admin/status", params={"ttft_s": str(slo)})).json()
        bad = await client.get(f"{url}/admin/status", params={"ttft_s": "soon"})
    assert refused > 0 and answered
    g = status["lanes"]["chat"]["goodput"]["1m"]
    assert g["ended"] == 30 and g["refused"] == refused
    assert g["good"] + g["slow"] == len(answered) and g["slow"] > 0
    assert g["ratio"] == g["good"] / 30
    assert bad.status_code == 400 and "ttft_s must be a number" in bad.text


async def test_a_request_refused_after_waiting_counts_its_wait(tmp_path: Path) -> None:
    """Regression: only admitted requests had a queue wait, so the worst waits (those that
    timed out in the queue) were missing from the queue-wait tail."""
    async with rig(tmp_path, hold=True) as r, httpx.AsyncClient(timeout=30) as client:
        await r.patch({"lanes": {"chat": {"max_inflight": 1, "queue_timeout_s": 0.3}}})
        held = asyncio.create_task(
            client.post(f"{r.url}/v1/completions", json={"prompt": "x", "tag": "held"})
        )
        await r.upstream.wait_until(lambda: r.upstream.active == 1)  # it holds the one slot
        waited = await client.post(f"{r.url}/v1/completions", json={"prompt": "y"})
        assert waited.status_code == 503
        status = (await client.get(f"{r.url}/admin/status")).json()
        r.upstream.release.release()
        assert (await held).status_code == 200
    queue = status["lanes"]["chat"]["latency"]["1m"]["queue_wait"]
    assert queue["count"] == 2 and queue["max"] >= 0.3
    assert status["lanes"]["chat"]["goodput"]["1m"]["refused"] == 1


def flood(lane: LaneLatency, count: int) -> None:
    """``count`` ended requests over the last 5 minutes, as a flood of refusals leaves them
    (one in ten answered), straight into the lane's record: what 75 s of 4,000 refusals a
    second would have put there."""
    now = time.monotonic()
    for i in range(count):
        record = lane.start(now - 290 + 290 * i / count)
        if i % 10:
            record.outcome, record.queue_wait_s, record.e2e_s = "refused", 0.0, 0.001
        else:
            record.ttft_s, record.queue_wait_s, record.e2e_s = 0.2 + i % 7 / 10, 0.01, 1.5
        lane.end(record)


async def test_a_flood_leaves_a_bounded_record_and_its_counts_exact(tmp_path: Path) -> None:
    """Regression: /admin/status sorted up to 300,000 records per lane (on the event loop,
    then in a worker thread that still held the GIL), and every request through the gate
    waited for it. Now each second of arrivals is a block summarised as its requests end: after
    a flood the lane holds at most one block a second of the last 5 minutes, none of them
    with its records one by one, and the counts in the status are still exact (the time a
    read takes is in bench/status_lag.py)."""
    async with rig(tmp_path) as r, httpx.AsyncClient() as client:
        lane = r.gate.latency["chat"]
        flood(lane, 300_000)
        lanes = (await client.get(f"{r.url}/admin/status")).json()["lanes"]
    chat = lanes["chat"]
    assert chat["latency"]["5m"]["requests"] == 300_000
    assert chat["latency"]["5m"]["ttft"]["count"] == 30_000
    assert chat["latency"]["5m"]["ttft"]["max"] == 0.8  # exact: the largest of 0.2 + i % 7 / 10
    # Sketched: the median of 0.2, 0.3 ... 0.8 (each as often) within the sketch's 0.5%.
    assert chat["latency"]["5m"]["ttft"]["p50"] == pytest.approx(0.5, rel=ALPHA)
    # ... and says so: over both windows (a minute of the flood is ~1,000 a second).
    for window in ("1m", "5m"):
        assert chat["latency"][window]["exact"] is False, window
        assert chat["latency"][window]["rel_error"] == ALPHA, window
        assert lanes["default"]["latency"][window]["exact"] is True  # a lane not flooded
    assert chat["goodput"]["5m"]["refused"] == 270_000
    assert chat["goodput"]["5m"]["ended"] == 300_000
    blocks = lane.ended.blocks.values()
    # Records one by one only in the two partial seconds at the ends of the flood.
    assert len(blocks) <= 301 and sum(len(b.raw or ()) for b in blocks) <= 2 * RAW_MAX
    assert len(lane.records) < 300_000 // 4  # one by one only for the last minute


async def _read_to_done(url: str, body: bytes) -> bytes:
    """A streaming request on a raw socket, read up to ``data: [DONE]`` and closed there, as
    GuideLLM does: the connection goes while the gate may still be writing or reading."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: gate\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    writer.write(head.encode() + body)
    seen = b""
    try:
        while b"data: [DONE]" not in seen:
            more = await asyncio.wait_for(reader.read(4096), 10)
            assert more, seen
            seen += more
    finally:
        writer.close()
    return seen


async def test_a_client_that_closes_at_done_got_a_whole_answer(tmp_path: Path) -> None:
    """Regression (issue 26, item 4): a client that closed its connection right after
    ``data: [DONE]`` was counted failed (abandoned) and dropped from the exact tails."""
    upstream = CountingUpstream(hold=False, linger=asyncio.Event())
    up_url = await upstream.start()
    _, served = await start_gate(
        up_url, GateConfig(DEFAULT_LANES), state_file=tmp_path / "state.json"
    )
    assert upstream.linger is not None
    try:
        async with httpx.AsyncClient() as client:

            async def chat(n: int) -> dict[str, Any]:
                params = {"ttft_s": "100"}
                r = await client.get(f"{served.url}/admin/status", params=params)
                lane: dict[str, Any] = r.json()["lanes"]["chat"]
                return lane if lane["goodput"]["5m"]["ended"] == n else {}

            body = json.dumps({"model": "m", "stream": True, "messages": []}).encode()
            for n in (1, 2, 3):
                seen = await _read_to_done(served.url, body)
                assert seen.startswith(b"HTTP/1.1 200")
                # the gate has let go of it (the client's close cancelled its handler) while
                # the upstream's stream is still open after [DONE]
                lane = await eventually(partial(chat, n), 10, message="not ended at the gate")
            upstream.linger.set()
            metrics = (await client.get(f"{served.url}/metrics")).text
    finally:
        upstream.linger.set()
        await served.close()
        await upstream.stop()
    good = lane["goodput"]["5m"]
    assert (good["ended"], good["good"], good["failed"]) == (3, 3, 0), good
    assert lane["latency"]["5m"]["ttft"]["count"] == 3  # in the exact tails
    broken = [
        s.value
        for f in text_string_to_metric_families(metrics)
        if f.name == "gpuwatch_gate_streams_broken"
        for s in f.samples
        if s.name.endswith("_total") and s.labels.get("side") == "client"
    ]
    assert sum(broken) == 0
