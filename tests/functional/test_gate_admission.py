"""Slots under churn: clients that leave at any moment never take a slot with them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import random
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gpuwatch.gate.config import GateConfig
from gpuwatch.gate.limits import DEFAULT_LANES
from gpuwatch.gate.server import start_gate
from tests.functional.gatekit import rig
from tests.functional.upstreams import CountingUpstream
from tests.helpers import eventually

CONFIG = GateConfig(DEFAULT_LANES)


@pytest.fixture
async def gate(tmp_path: Path) -> AsyncIterator[tuple[str, CountingUpstream]]:
    upstream = CountingUpstream()
    up_url = await upstream.start()
    _, served = await start_gate(up_url, CONFIG, state_file=tmp_path / "state.json")
    yield served.url, upstream
    await served.close()
    await upstream.stop()


async def status(url: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as s, s.get(f"{url}/admin/status") as r:
        chat: dict[str, Any] = (await r.json())["lanes"]["chat"]
        return chat


async def wait_status(url: str, inflight: int, queued: int, timeout: float = 5.0) -> None:
    seen: dict[str, Any] = {}

    async def reached() -> bool:
        seen.update(await status(url))
        return (seen["inflight"], seen["queued"]) == (inflight, queued)

    await eventually(
        reached, timeout, message=lambda: f"stuck at {seen}, wanted {inflight}/{queued}"
    )


async def raw_request(
    url: str, body: dict[str, Any]
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    data = json.dumps(body).encode()
    writer.write(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(data)}\r\n\r\n".encode()
        + data
    )
    await writer.drain()
    return reader, writer


@pytest.mark.parametrize("holder_first", [True, False])
async def test_clients_leaving_together_give_every_slot_back(
    gate: tuple[str, CountingUpstream], holder_first: bool
) -> None:
    """Regression: the queued clients' futures were cancelled before their handlers ran; the
    in-flight one's release handed its slot to one of them, which counted it in flight and
    then failed on set_result: the slot was never given back (inflight 1 forever)."""
    url, upstream = gate
    patch = {"lanes": {"chat": {"max_inflight": 1}}}
    async with aiohttp.ClientSession() as s, s.patch(f"{url}/admin/limits", json=patch) as r:
        assert r.status == 200
    streaming = await raw_request(url, {"prompt": "x", "stream": True})
    await upstream.wait_until(lambda: upstream.active == 1)
    queued = []
    for n in range(5):
        queued.append(await raw_request(url, {"prompt": "x", "tag": n}))
        await wait_status(url, 1, n + 1)
    leaving = [streaming, *queued] if holder_first else [*queued, streaming]
    for _, writer in leaving:  # all in one go: the gate sees them in one loop iteration
        writer.transport.abort()
    await wait_status(url, 0, 0)
    upstream.hold = False
    body = {"prompt": "y", "tag": "after"}
    async with aiohttp.ClientSession() as s, s.post(f"{url}/v1/completions", json=body) as r:
        assert r.status == 200
    assert (await status(url))["inflight"] == 0


async def test_churn_of_impatient_clients_leaks_no_slot(gate: tuple[str, CountingUpstream]) -> None:
    """The reported scenario: 24 clients with 0.05-0.6 s timeouts against max_inflight 4 (it
    leaked every slot in the field; here the root cause is pinned by the test above)."""
    url, upstream = gate
    upstream.hold = False
    patch = {"lanes": {"chat": {"max_inflight": 4, "max_queue": 64, "queue_timeout_s": 1}}}
    async with aiohttp.ClientSession() as s, s.patch(f"{url}/admin/limits", json=patch) as r:
        assert r.status == 200
    rng = random.Random(11)
    stop_at = time.monotonic() + 3

    async def impatient() -> None:
        async with aiohttp.ClientSession() as s:
            while time.monotonic() < stop_at:
                body = {"prompt": "x", "stream": True, "chunks": 20, "gap": 0.01}
                timeout = aiohttp.ClientTimeout(total=rng.uniform(0.05, 0.6))
                with contextlib.suppress(asyncio.TimeoutError, aiohttp.ClientError):
                    async with s.post(f"{url}/v1/completions", json=body, timeout=timeout) as r:
                        await r.read()

    await asyncio.gather(*(impatient() for _ in range(24)))
    await wait_status(url, 0, 0)
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"{url}/v1/completions", json={"prompt": "y"}) as r,
    ):
        assert r.status == 200


async def test_a_queue_bounded_by_time_over_http(tmp_path: Path) -> None:
    """The queue-wait budget through the whole gate. Once the lane has measured how fast its
    slots free up, it queues only what it expects to start within the budget and refuses the
    rest at once (429 ``queue_deadline``, ``Retry-After``); those it queued on an estimate that
    proves wrong (the slots never free) are shed at the budget with the same answer. The
    budget and its parts are in /admin/status and /metrics."""
    async with rig(tmp_path, hold=True) as r:
        status, _ = await r.patch({"lanes": {"chat": {"max_inflight": 2, "max_queue_wait_s": 2.0}}})
        assert status == 200
        lane = r.gate.lanes["chat"]

        def send(**extra: object) -> Any:
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}
            return r.request("POST", "/v1/chat/completions", json.dumps(body).encode())

        # Three answers streamed in ~0.15 s each: what the lane learns its drain rate from.
        for _ in range(3):
            r.upstream.release.release()
            assert (await send(stream=True, gap=0.05)).status == 200
        held = [asyncio.create_task(send()) for _ in range(2)]  # both slots, never freed
        await r.upstream.wait_until(lambda: r.upstream.active == 2)
        drain = lane.drain_per_s()
        assert drain is not None
        fits = math.floor(2.0 * drain)  # the k-th waiter starts in about k / drain seconds
        waiting = [asyncio.create_task(send()) for _ in range(fits)]
        await eventually(lambda: len(lane.queue) == fits)
        at_once = await send()
        assert at_once.status == 429 and at_once.json()["error"]["code"] == "queue_deadline"
        assert "cannot start this request within" in at_once.json()["error"]["message"]
        assert int(at_once.headers["retry-after"]) >= 1
        assert len(lane.queue) == fits  # refused, not queued
        async with aiohttp.ClientSession() as s, s.get(f"{r.url}/admin/status") as resp:
            chat = (await resp.json())["lanes"]["chat"]
        assert chat["queue_wait"]["budget_s"] == 2.0
        assert chat["queue_wait"]["source"] == "max_queue_wait_s"
        assert chat["queue_wait"]["drain_per_s"] is not None
        # The slots never free: every one queued is shed at its deadline, before it starts.
        for reply in await asyncio.gather(*waiting):
            assert reply.status == 429 and reply.json()["error"]["code"] == "queue_deadline"
            assert "past its queue-wait budget of 2.00 s" in reply.json()["error"]["message"]
            assert int(reply.headers["retry-after"]) >= 1
        assert r.upstream.active == 2 and len(r.upstream.bodies) == 5  # none reached it
        async with aiohttp.ClientSession() as s, s.get(f"{r.url}/metrics") as resp:
            metrics = await resp.text()
        assert 'gpuwatch_gate_queue_wait_budget_seconds{lane="chat"} 2.0' in metrics
        refused = (
            f'gpuwatch_gate_rejected_total{{lane="chat",reason="queue_deadline"}} {fits + 1}.0'
        )
        assert refused in metrics
        for _ in range(2):
            r.upstream.release.release()
        assert [reply.status for reply in await asyncio.gather(*held)] == [200, 200]
