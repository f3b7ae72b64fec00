"""The one read of a request through a real gate: the stream flag it reads holds one of the
lane's prefills where prefills are capped, whether or not a cap parsed the body."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.functional.gatekit import Rig, rig


async def prefilling(r: Rig) -> int:
    async with aiohttp.ClientSession() as s, s.get(f"{r.url}/admin/status") as reply:
        return int((await reply.json())["lanes"]["chat"]["queue_wait"]["prefilling"])


async def sent(r: Rig, body: dict[str, Any]) -> int:
    """How many requests hold a prefill while ``body`` waits upstream for its first byte."""
    async with aiohttp.ClientSession() as s:
        before = r.upstream.active
        request = asyncio.create_task(s.post(f"{r.url}/v1/completions", data=json.dumps(body)))
        await r.upstream.wait_until(lambda: r.upstream.active == before + 1)
        held = await prefilling(r)
        r.upstream.release.release()
        async with await request as reply:
            assert reply.status == 200, await reply.text()
            await reply.read()
    return held


@pytest.mark.parametrize("caps", [False, True], ids=["no-caps", "caps"])
async def test_a_streamed_request_holds_a_prefill_where_prefills_are_capped(
    tmp_path: Path, caps: bool
) -> None:
    async with rig(tmp_path, hold=True) as r:
        lane: dict[str, Any] = {"target_ttft_p99_s": 2.0}
        if caps:
            lane["max_output_tokens"] = 64  # the body is parsed for the cap: read from that
        status, reply = await r.patch({"lanes": {"chat": lane}})
        assert status == 200, reply
        assert await sent(r, {"prompt": "hi", "stream": True, "chunks": 1}) == 1
        assert await sent(r, {"prompt": "hi", "stream": False}) == 0
        assert await prefilling(r) == 0  # given back at the first token
        # Without a TTFT target nothing caps prefills, and the flag is not read.
        await r.patch({"lanes": {"chat": {"target_ttft_p99_s": None}}})
        assert await sent(r, {"prompt": "hi", "stream": True, "chunks": 1}) == 0
