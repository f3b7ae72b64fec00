"""A silent upstream holds no slot past its lane's upstream timeouts: no first byte within
``upstream_first_byte_timeout_s`` of sending is a 504 naming it, no next chunk within
``upstream_idle_timeout_s`` cuts the stream; either way the upstream connection is closed (the
engine aborts) and the slot comes back."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from gpuwatch.aioserve import serve
from gpuwatch.gate.config import GateConfig
from gpuwatch.gate.limits import DEFAULT_LANES
from gpuwatch.gate.server import start_gate
from tests.functional.gatekit import Rig, rig
from tests.helpers import eventually

FAST = {"upstream_first_byte_timeout_s": 0.3, "upstream_idle_timeout_s": 0.3}


async def chat_status(r: Rig) -> dict[str, Any]:
    async with aiohttp.ClientSession() as s, s.get(f"{r.url}/admin/status") as resp:
        chat: dict[str, Any] = (await resp.json())["lanes"]["chat"]
        return chat


async def timeouts(url: str) -> dict[str, float]:
    async with aiohttp.ClientSession() as s, s.get(f"{url}/metrics") as resp:
        text = await resp.text()
    return {
        line.split('kind="')[1].split('"')[0]: float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("gpuwatch_gate_upstream_timeouts_total{")
    }


async def test_no_first_byte_is_a_504_and_the_slot_comes_back(tmp_path: Path) -> None:
    """Regression: an upstream that never answered held its slot until the client gave up."""
    async with rig(tmp_path, hold=True) as r:  # the upstream holds every request: silent
        await r.patch({"lanes": {"chat": {**FAST, "max_inflight": 1}}})
        reply = await r.request("POST", "/v1/completions", b'{"prompt": "hi"}')
        assert reply.status == 504, reply
        error = reply.json()["error"]
        assert error["code"] == "upstream_first_byte_timeout"
        assert "upstream_first_byte_timeout_s" in error["message"] and "0.3 s" in error["message"]
        assert error["type"] == "upstream_error"
        # The upstream saw its request cancelled (its connection closed), the slot is free.
        await r.upstream.wait_until(lambda: r.upstream.aborted == 1)
        status = await chat_status(r)
        assert status["inflight"] == 0 and status["inflight_tokens"] == 0
        assert await timeouts(r.url) == {"first_byte": 1.0}


async def test_headers_without_a_body_byte_are_a_504_too(tmp_path: Path) -> None:
    gave_headers = asyncio.Event()
    cancelled = asyncio.Event()

    async def headers_only(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        gave_headers.set()
        try:
            await asyncio.Event().wait()  # never a byte of the body
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", headers_only)
    upstream = await serve(app, "127.0.0.1", 0)
    _, gate = await start_gate(upstream.url, GateConfig(DEFAULT_LANES), state_file=tmp_path / "s")
    try:
        async with aiohttp.ClientSession() as s:
            async with s.patch(f"{gate.url}/admin/limits", json={"lanes": {"chat": FAST}}) as p:
                assert p.status == 200
            body = {"messages": [], "stream": True}
            async with s.post(f"{gate.url}/v1/chat/completions", json=body) as reply:
                assert reply.status == 504
                assert (await reply.json())["error"]["code"] == "upstream_first_byte_timeout"
        assert gave_headers.is_set()
        await asyncio.wait_for(cancelled.wait(), 5)
    finally:
        await gate.close()
        await upstream.close()


async def test_a_stream_that_goes_silent_is_cut(tmp_path: Path) -> None:
    async with rig(tmp_path, hold=False) as r, aiohttp.ClientSession() as s:
        await r.patch({"lanes": {"chat": FAST}})
        # One chunk, then a 60 s gap before the next: silent for far past the idle timeout.
        body = {"prompt": "hi", "stream": True, "chunks": 2, "gap": 60}
        got = b""
        with pytest.raises(aiohttp.ClientPayloadError):
            async with s.post(f"{r.url}/v1/completions", json=body) as reply:
                assert reply.status == 200
                async for piece in reply.content.iter_any():
                    got += piece
        assert got == b'data: {"i": 0}\n\n'  # what came, and no clean end after it
        await r.upstream.wait_until(lambda: r.upstream.aborted == 1)
        await eventually(lambda: _idle(r))
        assert (await chat_status(r))["inflight"] == 0


async def _idle(r: Rig) -> bool:
    return (await timeouts(r.url)).get("idle") == 1.0


async def test_chunks_in_time_are_never_cut(tmp_path: Path) -> None:
    """The idle timeout is between chunks, not over the whole answer."""
    async with rig(tmp_path, hold=False) as r, aiohttp.ClientSession() as s:
        await r.patch({"lanes": {"chat": FAST}})
        body = {"prompt": "hi", "stream": True, "chunks": 12, "gap": 0.05}  # 0.6 s in all
        async with s.post(f"{r.url}/v1/completions", json=body) as reply:
            text = await reply.text()
        assert reply.status == 200 and text.endswith("data: [DONE]\n\n")
        assert await timeouts(r.url) == {}


@pytest.mark.parametrize("value", [0, -1, "5", True, 1e9])
async def test_patch_checks_the_upstream_timeouts(tmp_path: Path, value: object) -> None:
    async with rig(tmp_path) as r:
        for key in FAST:
            code, body = await r.patch({"lanes": {"chat": {key: value}}})
            assert code == 400 and body["error"]["code"] == f"lanes.chat.{key}", body
        code, body = await r.patch({"lanes": {"chat": dict.fromkeys(FAST)}})
        assert code == 200 and all(body["lanes"]["chat"][k] is None for k in FAST)
