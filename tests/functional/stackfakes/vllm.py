"""A fake of vLLM's pause routes.

Follows vllm-project/vllm vllm/entrypoints/serve/rlhf/api_router.py at commit
1ace43ed7b3c79daba3b4828fdaf30dcb4094adb: ``POST /pause`` (query ``mode``: ``abort`` by
default, ``wait`` or ``keep``; anything else FastAPI's 422), ``POST /resume``, ``GET
/is_paused`` -> ``{"is_paused": bool}``. The router is attached only when the server runs with
``VLLM_SERVER_DEV_MODE=1`` (``dev_mode``); without it every one of these paths is a 404. The
engine's pause is a flag here; ``mode`` is kept so a test can see which was asked.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aiohttp import web

from tests.functional.stackfakes.common import StackFake, fastapi_422

MODES = ("abort", "wait", "keep")


@dataclass
class VLLMFake(StackFake):
    dev_mode: bool = True
    paused: bool = False
    modes: list[str] = field(default_factory=list)  # the mode of each pause asked

    def routes(self, app: web.Application) -> None:
        if not self.dev_mode:
            # FastAPI's answer for a path with no route.
            for path in ("/pause", "/resume", "/is_paused"):
                app.router.add_route("*", path, self.not_found)
            return
        app.router.add_post("/pause", self.pause)
        app.router.add_post("/resume", self.resume)
        app.router.add_get("/is_paused", self.is_paused)

    async def not_found(self, _: web.Request) -> web.Response:
        return web.json_response({"detail": "Not Found"}, status=404)

    async def pause(self, request: web.Request) -> web.Response:
        mode = request.query.get("mode", "abort")
        if mode not in MODES:
            msg = "Input should be 'abort', 'wait' or 'keep'"
            return fastapi_422(["query", "mode"], msg, mode)
        self.modes.append(mode)
        self.paused = True
        return web.json_response({"status": "paused"})

    async def resume(self, _: web.Request) -> web.Response:
        self.paused = False
        return web.json_response({"status": "resumed"})

    async def is_paused(self, _: web.Request) -> web.Response:
        return web.json_response({"is_paused": self.paused})
