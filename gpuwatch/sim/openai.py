"""The simulator's OpenAI surface: /v1/models, completions and chat, whole or as SSE.

Request bodies are validated in gpuwatch/sim/request.py; generation runs on the node
(gpuwatch/sim/node.py), whose events this module turns into OpenAI responses.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from typing import Any

from aiohttp import web

from gpuwatch.otlp import operation
from gpuwatch.sim.engine import Request
from gpuwatch.sim.node import SimNode, Slot
from gpuwatch.sim.request import BadRequest, Parsed, decode, error_response, parse

_WORDS = ("the", "node", "is", "in", "its", "boring", "zone", "and", "tokens", "flow")


def _word(rid: str, k: int) -> str:
    return " " + _WORDS[zlib.crc32(f"{rid}:{k}".encode()) % len(_WORDS)]


class OpenAIApi:
    """Completions and chat completions served from a node's engines."""

    def __init__(
        self, node: SimNode, more_models: Callable[[], list[dict[str, Any]]] | None = None
    ) -> None:
        self.node = node
        # The other models the node serves (embeddings, images), listed after the text model.
        self.more_models = more_models or list

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/v1/completions", self.completions),
            web.post("/v1/chat/completions", self.chat),
            web.get("/v1/models", self.models),
        ]

    async def models(self, _: web.Request) -> web.Response:
        node = self.node
        model = {
            "id": node.model_name,
            "object": "model",
            "created": node.created,
            "owned_by": "gpuwatch-sim",
            "root": node.model_name,
            "max_model_len": node.profile.model.max_model_len,
        }
        return web.json_response({"object": "list", "data": [model, *self.more_models()]})

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    async def _generate(self, request: web.Request, chat: bool) -> web.StreamResponse:
        arrival = self.node.sim_now()  # the request is here: reading its body is part of TTFT
        self.node.tracing.received(request.headers)
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge as exc:
            return error_response(exc.text or "request body too large", exc.status)
        try:
            body = decode(raw)
            parsed = parse(body, chat, self.node.model_name, self.node.profile)
        except BadRequest as exc:
            return error_response(str(exc), exc.status, exc.param)
        i, req, slot = self.node.submit(parsed.job, arrival)
        try:
            if parsed.stream:
                return await self._stream(request, req, slot, parsed, chat)
            return await self._whole(req, slot, chat)
        finally:
            self.node.release(i, req)
            node = self.node
            name = operation(request.path)
            node.tracing.finished(request.headers, req, name, node.model_name, node.wall_at)

    def _chunk(
        self, req: Request, chat: bool, text: str | None, finish: str | None
    ) -> dict[str, Any]:
        base = {
            "id": f"{'chatcmpl' if chat else 'cmpl'}-{req.rid}",
            "created": self.node.created,
            "model": self.node.model_name,
        }
        if chat:
            delta: dict[str, Any] = {}
            if text is not None:
                delta = (
                    {"role": "assistant", "content": text} if req.output <= 1 else {"content": text}
                )
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            return {**base, "object": "chat.completion.chunk", "choices": [choice]}
        choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
        return {**base, "object": "text_completion", "choices": [choice]}

    def _usage(self, req: Request) -> dict[str, int]:
        return {
            "prompt_tokens": req.prompt_len,
            "completion_tokens": req.output,
            "total_tokens": req.prompt_len + req.output,
        }

    async def _stream(
        self, request: web.Request, req: Request, slot: Slot, parsed: Parsed, chat: bool
    ) -> web.StreamResponse:
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await resp.prepare(request)
        k = 0
        while True:
            ev = await slot.queue.get()
            if ev.kind == "token":
                k += 1
                chunk = self._chunk(req, chat, _word(req.rid, k), None)
                await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            elif ev.kind == "finished":
                finish = req.finish.value if req.finish else "stop"
                end = self._chunk(req, chat, None if chat else "", finish)
                await resp.write(b"data: " + json.dumps(end).encode() + b"\n\n")
                break
        if parsed.include_usage:
            usage = {**self._chunk(req, chat, None, None), "choices": [], "usage": self._usage(req)}
            await resp.write(b"data: " + json.dumps(usage).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _whole(self, req: Request, slot: Slot, chat: bool) -> web.Response:
        words: list[str] = []
        while True:
            ev = await slot.queue.get()
            if ev.kind == "token":
                words.append(_word(req.rid, len(words) + 1))
            elif ev.kind == "finished":
                break
        text = "".join(words)
        finish = req.finish.value if req.finish else "stop"
        base = {
            "id": f"{'chatcmpl' if chat else 'cmpl'}-{req.rid}",
            "created": self.node.created,
            "model": self.node.model_name,
            "usage": self._usage(req),
        }
        if chat:
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": finish,
            }
            return web.json_response({**base, "object": "chat.completion", "choices": [choice]})
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        return web.json_response({**base, "object": "text_completion", "choices": [choice]})
