"""The simulator's server: a node (gpuwatch/sim/node.py) and the OpenAI surface in front of
it (gpuwatch/sim/openai.py), composed into one aiohttp application.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from aiohttp import web
from aiohttp.typedefs import Handler

from gpuwatch.aioserve import Served, serve
from gpuwatch.otlp import OtlpConfig
from gpuwatch.sim.mig import MigSlice
from gpuwatch.sim.node import NodeRoutes, SimNode
from gpuwatch.sim.openai import OpenAIApi
from gpuwatch.sim.profiles import IMAGE_RESERVE_BYTES, Profile
from gpuwatch.sim.request import error_response
from gpuwatch.sim.sideapi import SideApi
from gpuwatch.sim.stallapi import StallRoutes
from gpuwatch.sim.tracing import SimTracing

__all__ = ["SimNode", "build_app", "start_sim"]


@web.middleware
async def _json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Unknown paths and methods answer in the OpenAI error shape, as vLLM does, not text."""
    try:
        return await handler(request)
    except web.HTTPNotFound:
        return error_response(f"Not Found: {request.method} {request.path[:200]}", 404)
    except web.HTTPMethodNotAllowed as exc:
        return error_response(f"Method Not Allowed: {request.method}", exc.status)


def build_app(node: SimNode) -> web.Application:
    app = web.Application(middlewares=[_json_errors])
    app.router.add_routes(NodeRoutes(node).routes())
    app.router.add_routes(StallRoutes(node).routes())
    side = SideApi(node)
    app.router.add_routes(OpenAIApi(node, side.models).routes())
    app.router.add_routes(side.routes())

    async def start(_: web.Application) -> None:
        node.start()

    async def stop(_: web.Application) -> None:
        await node.stop()
        await asyncio.to_thread(node.tracing.shutdown)  # the last spans go out

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    return app


async def start_sim(
    profile: Profile,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    engines: int = 1,
    time_scale: float = 1.0,
    seed: int = 0,
    model_name: str | None = None,
    embed: bool = False,
    image: bool = False,
    image_reserve: int = IMAGE_RESERVE_BYTES,
    mig: Sequence[MigSlice] = (),
    otlp: OtlpConfig | None = None,
) -> tuple[SimNode, Served]:
    """Start a simulator on ``host:port`` (0 = a free port); close with ``served.close()``.
    ``embed`` and ``image`` serve embeddings and image generation on the same GPU too; ``mig``
    puts each virtual GPU in MIG mode with these devices (gpuwatch/sim/mig.py); ``otlp`` with
    an endpoint exports each request's spans (gpuwatch/sim/tracing.py)."""
    node = SimNode(
        profile, engines, time_scale, seed, model_name,
        embed=embed, image=image, image_reserve=image_reserve, mig=mig,
    )  # fmt: skip
    if otlp is not None and otlp.enabled:
        node.tracing = SimTracing(otlp)
    served = await serve(build_app(node), host, port)
    return node, served
