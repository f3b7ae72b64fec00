"""``/sim/stall``: tell the simulated engines to stall, and to go on again.

The failure it plays is the one vLLM users report as "alive, stuck": /health and /metrics
answer, requests stay running, and no token moves. ``POST /sim/stall`` stalls (``{"seconds":
N}`` for N seconds of wall time, an empty body until resumed), ``POST /sim/resume`` or
``DELETE /sim/stall`` resumes, ``GET /sim/stall`` says which; ``gpuwatch sim`` also toggles on
SIGUSR1. Every answer is the stall's state.
"""

from __future__ import annotations

import math
from typing import Any

from aiohttp import web

from gpuwatch.fmt import clip
from gpuwatch.sim.node import SimNode
from gpuwatch.sim.request import BadRequest, decode, error_response

MAX_STALL_S = 86_400.0
BODY_MAX = 4096


def stall_seconds(raw: bytes) -> float | None:
    """The stall's length from a request body: None (until resumed) for an empty body or
    ``{}``, else ``{"seconds": N}`` with 0 < N <= a day; BadRequest otherwise."""
    if not raw.strip():
        return None
    body: dict[str, Any] = decode(raw)
    unknown = sorted(set(body) - {"seconds"})
    if unknown:
        name = clip(unknown[0], 60)
        raise BadRequest(f"unknown field '{name}' (only 'seconds')", param=name)
    if "seconds" not in body or body["seconds"] is None:
        return None
    value = body["seconds"]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadRequest("'seconds' must be a number", param="seconds")
    if not (math.isfinite(value) and 0 < value <= MAX_STALL_S):
        raise BadRequest(f"'seconds' must be above 0 and at most {MAX_STALL_S:g}", param="seconds")
    return float(value)


class StallRoutes:
    def __init__(self, node: SimNode) -> None:
        self.node = node

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/sim/stall", self.get),
            web.post("/sim/stall", self.stall),
            web.delete("/sim/stall", self.resume),
            web.post("/sim/resume", self.resume),
        ]

    async def get(self, _: web.Request) -> web.Response:
        return web.json_response(self.node.stall_state())

    async def stall(self, request: web.Request) -> web.Response:
        raw = await request.content.read(BODY_MAX + 1)
        if len(raw) > BODY_MAX:
            return error_response(f"body over {BODY_MAX} bytes", 413)
        try:
            seconds = stall_seconds(raw)
        except BadRequest as exc:
            return error_response(str(exc), exc.status, exc.param)
        self.node.stall(seconds)
        return web.json_response(self.node.stall_state())

    async def resume(self, _: web.Request) -> web.Response:
        self.node.resume()
        return web.json_response(self.node.stall_state())
