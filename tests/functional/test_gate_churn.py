"""Clients that leave at random moments (mid-headers, mid-body, queued, waiting for the first
byte, mid-stream) while limits change: afterwards nothing is held or queued, and the lane
admits. Hypothesis picks the moments; the gate and its upstream are real, on loopback."""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

import aiohttp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuwatch.gate.config import GateConfig
from gpuwatch.gate.limits import DEFAULT_LANES
from gpuwatch.gate.server import start_gate
from tests.functional.upstreams import CountingUpstream
from tests.helpers import eventually

STAGES = ("headers", "body", "whole")
clients = st.lists(
    st.tuples(st.sampled_from(STAGES), st.floats(0, 0.05), st.booleans()), min_size=1, max_size=12
)
limits = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4)), max_size=4)


async def leave(port: int, stage: str, after: float, stream: bool) -> None:
    body = json.dumps({"prompt": "x", "stream": stream, "chunks": 50, "gap": 0.002}).encode()
    head = (
        b"POST /v1/completions HTTP/1.1\r\nHost: g\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n".encode()
    )
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    if stage == "headers":
        writer.write(head)  # the blank line never comes
    elif stage == "body":
        writer.write(head + b"\r\n" + body[: len(body) // 2])
    else:
        writer.write(head + b"\r\n" + body)
    await asyncio.sleep(after)
    writer.transport.abort()


async def play(script: list[tuple[str, float, bool]], changes: list[tuple[int, int]]) -> None:
    upstream = CountingUpstream(hold=False)
    up_url = await upstream.start()
    with tempfile.TemporaryDirectory() as tmp:
        gate, served = await start_gate(
            up_url, GateConfig(DEFAULT_LANES), state_file=Path(tmp) / "s.json"
        )
        port = int(served.url.rsplit(":", 1)[1])
        try:
            async with aiohttp.ClientSession() as s:

                async def change() -> None:
                    for inflight, queue in changes:
                        patch = {"lanes": {"chat": {"max_inflight": inflight, "max_queue": queue,
                                                    "queue_timeout_s": 0.1}}}  # fmt: skip
                        async with s.patch(f"{served.url}/admin/limits", json=patch) as r:
                            assert r.status == 200
                        await asyncio.sleep(0.01)

                await asyncio.gather(change(), *(leave(port, *c) for c in script))
                patch = {"lanes": {"chat": {"max_inflight": 2, "max_queue": 4}}}
                async with s.patch(f"{served.url}/admin/limits", json=patch) as r:
                    assert r.status == 200
                lane = gate.lanes["chat"]
                await eventually(
                    lambda: not lane.inflight and not lane.queue,
                    30,
                    message=lambda: f"{lane.inflight} in flight, {len(lane.queue)} queued",
                )
                async with s.post(f"{served.url}/v1/completions", json={"prompt": "y"}) as r:
                    assert r.status == 200
                assert lane.inflight == 0
        finally:
            await served.close()
            await upstream.stop()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=clients, changes=limits)
def test_clients_leaving_at_any_moment_leave_nothing_held(
    script: list[tuple[str, float, bool]], changes: list[tuple[int, int]]
) -> None:
    asyncio.run(play(script, changes))
