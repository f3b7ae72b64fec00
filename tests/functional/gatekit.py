"""Shared pieces for gate tests: a gate in front of a counting upstream, and raw HTTP/1.1 on a
socket for what an HTTP client library would refuse or tidy up before sending."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from gpuwatch.gate.config import GateConfig
from gpuwatch.gate.limits import DEFAULT_LANES
from gpuwatch.gate.server import Gate, start_gate
from tests.functional.upstreams import CountingUpstream


@dataclass
class RecordingUpstream(CountingUpstream):
    """A counting upstream that also records the path of each request it got."""

    paths: list[str] = field(default_factory=list)
    # The Content-Encoding of each request, as it arrived.
    encodings: list[str | None] = field(default_factory=list)
    # Headers added to each answer (a hostile or confused upstream).
    extra_headers: dict[str, str] = field(default_factory=dict)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.paths.append(request.raw_path)
        self.encodings.append(request.headers.get("Content-Encoding"))
        response = await super().handle(request)
        if not response.prepared:
            response.headers.update(self.extra_headers)
        return response


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Rig:
    gate: Gate
    url: str
    upstream: RecordingUpstream

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    async def patch(self, body: Any, **headers: str) -> tuple[int, Any]:
        async with (
            aiohttp.ClientSession() as s,
            s.patch(f"{self.url}/admin/limits", json=body, headers=headers) as r,
        ):
            return r.status, await r.json()

    async def raw(self, data: bytes, timeout: float = 5.0) -> Reply:
        """Send ``data`` as is; read the reply until the gate closes or a whole reply is in."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            writer.write(data)
            await writer.drain()
            return await asyncio.wait_for(read_reply(reader), timeout)
        finally:
            writer.close()

    async def request(
        self, method: str, target: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> Reply:
        head = f"{method} {target} HTTP/1.1\r\nHost: gate\r\nConnection: close\r\n"
        for k, v in {"Content-Type": "application/json", **(headers or {})}.items():
            head += f"{k}: {v}\r\n"
        head += f"Content-Length: {len(body)}\r\n\r\n"
        return await self.raw(head.encode() + body)


async def read_reply(reader: asyncio.StreamReader) -> Reply:
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionError("closed without a reply")
    status = int(status_line.split()[1])
    headers: dict[str, str] = {}
    while (line := await reader.readline()) not in (b"\r\n", b""):
        k, _, v = line.decode("latin-1").partition(":")
        headers[k.strip().lower()] = v.strip()
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    else:
        body = await reader.read()
    return Reply(status, headers, body)


@contextlib.asynccontextmanager
async def rig(
    tmp_path: Path, config: GateConfig | None = None, hold: bool = False
) -> AsyncIterator[Rig]:
    upstream = RecordingUpstream(hold=hold)
    up_url = await upstream.start()
    gate, served = await start_gate(
        up_url, config or GateConfig(DEFAULT_LANES), state_file=tmp_path / "state.json"
    )
    try:
        yield Rig(gate, served.url, upstream)
    finally:
        await served.close()
        await upstream.stop()
