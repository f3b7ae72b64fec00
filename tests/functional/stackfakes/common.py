"""What every stack fake shares: it serves on 127.0.0.1, counts every request (so a test can
say nothing was sent), and can answer its reads with hostile bodies."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web

from gpuwatch.aioserve import Served, serve

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# What a hostile stack answers its reads with, by name.
HOSTILE_BODIES: dict[str, tuple[str, bytes]] = {
    "not-json": ("text/html", b"<html><body>502 Bad Gateway</body></html>"),
    "wrong-shape": ("application/json", b'{"unexpected": [1, 2, 3]}'),
    "huge": ("application/json", b'{"pad": "' + b"x" * (6 * 1024 * 1024) + b'"}'),
    "nan": ("application/json", b'{"thresholds": NaN}'),
}


def error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def fastapi_422(loc: list[str | int], msg: str, value: object) -> web.Response:
    """FastAPI's answer to a body that does not validate (``RequestValidationError``)."""
    detail = [{"type": "value_error", "loc": loc, "msg": msg, "input": value}]
    return web.json_response({"detail": detail}, status=422)


async def json_body(request: web.Request) -> object:
    """The parsed body, or raises the 400 a FastAPI app sends for one that is not JSON."""
    try:
        return json.loads(await request.read())
    except ValueError:
        raise web.HTTPBadRequest(
            text=json.dumps({"detail": "There was an error parsing the body"}),
            content_type="application/json",
        ) from None


@dataclass
class StackFake:
    """Subclasses add their routes in ``routes``."""

    requests: list[tuple[str, str]] = field(default_factory=list)
    authorizations: list[str] = field(default_factory=list)
    hostile: str | None = None  # a key of HOSTILE_BODIES: every GET answers with it
    stalled: bool = False  # every request waits for ever (until the client leaves)
    served: Served | None = None

    @property
    def writes(self) -> list[tuple[str, str]]:
        return [r for r in self.requests if r[0] != "GET"]

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    @web.middleware
    async def _count(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        self.requests.append((request.method, request.path_qs))
        self.authorizations.append(request.headers.get("Authorization", ""))
        if self.stalled:
            await asyncio.Event().wait()
        if self.hostile is not None and request.method == "GET":
            content_type, body = HOSTILE_BODIES[self.hostile]
            return web.Response(body=body, content_type=content_type)
        return await handler(request)

    async def start(self) -> str:
        app = web.Application(middlewares=[self._count])
        self.routes(app)
        self.served = await serve(app, "127.0.0.1", 0)
        return self.served.url

    async def stop(self) -> None:
        if self.served is not None:
            await self.served.close()
