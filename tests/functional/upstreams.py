"""A counting OpenAI-ish upstream for gate tests: sees every request, holds it until told."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from gpuwatch.aioserve import Served, serve


@dataclass
class CountingUpstream:
    """Each request waits on ``release`` (a semaphore the test feeds) before answering."""

    hold: bool = True
    chunks: int = 3
    active: int = 0
    max_active: int = 0
    arrivals: list[Any] = field(default_factory=list)
    bodies: list[dict[str, Any]] = field(default_factory=list)
    aborted: int = 0
    completed: int = 0
    release: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(0))
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    served: Served | None = None
    # When set: after [DONE], the stream stays open until this event (an engine that ends
    # its chunked body late), so a client that leaves at [DONE] leaves before the end.
    linger: asyncio.Event | None = None

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/v1/{tail:.*}", self.handle)
        app.router.add_get("/v1/models", self.models)
        self.served = await serve(app, "127.0.0.1", 0)
        return self.served.url

    async def stop(self) -> None:
        if self.served:
            await self.served.close()

    async def _notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    async def wait_until(self, predicate: Callable[[], bool], timeout: float = 5.0) -> None:
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(predicate), timeout)

    async def models(self, _: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "count", "object": "model"}]})

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        self.arrivals.append(body.get("tag"))
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        await self._notify()
        try:
            if self.hold:
                await self.release.acquire()
            if not body.get("stream"):
                self.completed += 1
                return web.json_response(
                    {"tag": body.get("tag"), "max_tokens": body.get("max_tokens")}
                )
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            for i in range(int(body.get("chunks", self.chunks))):
                await resp.write(f"data: {json.dumps({'i': i})}\n\n".encode())
                await asyncio.sleep(float(body.get("gap", 0)))
            await resp.write(b"data: [DONE]\n\n")
            if self.linger is not None:
                await self.linger.wait()
            await resp.write_eof()
            self.completed += 1
            return resp
        except asyncio.CancelledError:
            self.aborted += 1
            raise
        finally:
            self.active -= 1
            asyncio.get_running_loop().create_task(self._notify())
