"""The simulator's OpenAI-compatible server: engines driven in real time, vLLM's /metrics.

Prompt length is gpuwatch.tokens' deterministic estimate (4 characters a token; chat adds the
template's cost; token-id prompts count their ids). Prefix caching hashes the
text in 64-character blocks (16 tokens), chained, so identical leading text hits the cache.

Latencies in /metrics are wall-clock seconds (simulated seconds / time scale), so they agree
with what a client or the gate measures.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import random
import time
import uuid
import zlib
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gpuwatch.aioserve import Served, serve
from gpuwatch.sim.engine import Engine, Event, Request
from gpuwatch.sim.gpu import VirtualGpu
from gpuwatch.sim.metrics import EngineRecorder, SimMetrics
from gpuwatch.sim.profiles import Profile
from gpuwatch.tokens import CHARS_PER_TOKEN, chat_text, estimate_chat, estimate_text

# Back-to-back steps keep simulated time continuous (a busy GPU has no gaps) unless the event
# loop falls this far behind the wall clock.
_MAX_LAG_S = 0.05
_WORDS = ("the", "node", "is", "in", "its", "boring", "zone", "and", "tokens", "flow")


def block_hashes(units: list[str] | str, per_block: int) -> tuple[int, ...]:
    """Chained hashes of full blocks (a block depends on everything before it)."""
    out: list[int] = []
    prev = b""
    for i in range(len(units) // per_block):
        chunk = units[i * per_block : (i + 1) * per_block]
        data = chunk.encode() if isinstance(chunk, str) else ",".join(chunk).encode()
        digest = hashlib.blake2b(prev + data, digest_size=8).digest()
        out.append(int.from_bytes(digest, "big"))
        prev = digest
    return tuple(out)


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.param = param


def error_response(message: str, status: int, param: str | None = None) -> web.Response:
    kind = {400: "BadRequestError", 404: "NotFoundError"}.get(status, "InternalServerError")
    body = {"error": {"message": message, "type": kind, "param": param, "code": status}}
    return web.json_response(body, status=status)


@dataclass
class Parsed:
    prompt_len: int
    hashes: tuple[int, ...]
    max_tokens: int
    stream: bool
    include_usage: bool
    ignore_eos: bool


@dataclass
class Slot:
    """Where an engine's events for one request are delivered."""

    queue: asyncio.Queue[Event] = field(default_factory=asyncio.Queue)


class SimNode:
    def __init__(
        self,
        profile: Profile,
        engines: int = 1,
        time_scale: float = 1.0,
        seed: int = 0,
        model_name: str | None = None,
    ) -> None:
        profile.validate()
        self.profile = profile
        self.model_name = model_name or profile.model.name
        self.time_scale = time_scale
        self.rng = random.Random(seed)
        self.engines = [Engine(profile, seed=seed + i) for i in range(engines)]
        self.metrics = SimMetrics(profile, self.model_name, engines)
        self.recorders = [
            EngineRecorder(self.metrics, i, e, time_scale) for i, e in enumerate(self.engines)
        ]
        self.gpus = [VirtualGpu(profile, i, seed) for i in range(engines)]
        self._wake = [asyncio.Event() for _ in self.engines]
        self._slots: dict[str, Slot] = {}
        self._t0 = time.monotonic()
        self._tasks: list[asyncio.Task[None]] = []
        self.created = int(time.time())

    # -- time -----------------------------------------------------------------------------

    def sim_now(self) -> float:
        return (time.monotonic() - self._t0) * self.time_scale

    def _wall_at(self, sim_t: float) -> float:
        return self._t0 + sim_t / self.time_scale

    # -- engine loops ---------------------------------------------------------------------

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._run(i)) for i in range(len(self.engines))]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _run(self, i: int) -> None:
        engine, recorder, gpu, wake = (
            self.engines[i],
            self.recorders[i],
            self.gpus[i],
            self._wake[i],
        )
        while True:
            if engine.idle:
                wake.clear()
                await wake.wait()
                # An idle GPU does not work in the past: the next step starts now.
                engine.now = max(engine.now, self.sim_now())
            elif self.sim_now() - engine.now > _MAX_LAG_S * self.time_scale:
                # The CPU fell behind the simulated GPU; skip ahead rather than drift.
                engine.now = self.sim_now()
            result = engine.step()
            if result.duration == 0:
                wake.clear()
                await wake.wait()
                continue
            end = self._wall_at(engine.now)
            delay = end - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            gpu.busy(self._wall_at(result.start), end, result.intensity)
            recorder.step(result)
            for ev in result.events:
                slot = self._slots.get(ev.request.rid)
                if slot is not None:
                    slot.queue.put_nowait(ev)

    # -- requests -------------------------------------------------------------------------

    def parse(self, body: Any, chat: bool) -> Parsed:
        if not isinstance(body, dict):
            raise BadRequest("request body must be a JSON object")
        model = body.get("model")
        if model is not None and model != self.model_name:
            raise BadRequest(f"The model `{model}` does not exist.", 404, "model")
        n = body.get("n", 1)
        if n != 1:
            raise BadRequest("n > 1 is not supported by the simulator", param="n")
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise BadRequest("messages must be a non-empty list", param="messages")
            text = chat_text(messages)
            prompt_len = estimate_chat(messages)
            hashes = block_hashes(text, self.profile.block_size * CHARS_PER_TOKEN)
        else:
            prompt = body.get("prompt")
            if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
                prompt_len = len(prompt)
                hashes = block_hashes([str(t) for t in prompt], self.profile.block_size)
            elif isinstance(prompt, str):
                prompt_len = estimate_text(prompt)
                hashes = block_hashes(prompt, self.profile.block_size * CHARS_PER_TOKEN)
            else:
                raise BadRequest("prompt must be a string or a list of token ids", param="prompt")
        limit = self.profile.model.max_model_len
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
            raise BadRequest("max_tokens must be at least 1", param="max_tokens")
        if prompt_len >= limit or (max_tokens or 0) + prompt_len > limit:
            raise BadRequest(
                f"This model's maximum context length is {limit} tokens. However, you requested "
                f"{prompt_len + (max_tokens or 0)} tokens ({prompt_len} in the messages, "
                f"{max_tokens or 0} in the completion). Please reduce the length of the messages "
                "or completion.",
                param="max_tokens" if max_tokens else "messages",
            )
        options = body.get("stream_options") or {}
        return Parsed(
            prompt_len=prompt_len,
            hashes=hashes,
            max_tokens=max_tokens or limit - prompt_len,
            stream=bool(body.get("stream", False)),
            include_usage=bool(options.get("include_usage", False))
            if isinstance(options, dict)
            else False,
            ignore_eos=bool(body.get("ignore_eos", False)),
        )

    def submit(self, parsed: Parsed, arrival: float | None = None) -> tuple[int, Request, Slot]:
        i = min(
            range(len(self.engines)),
            key=lambda k: len(self.engines[k].running) + len(self.engines[k].waiting),
        )
        engine = self.engines[i]
        eos_at = None
        if not parsed.ignore_eos:
            natural = max(1, int(self.rng.lognormvariate(math.log(256), 0.8)))
            eos_at = natural if natural < parsed.max_tokens else None
        req = Request(
            rid=uuid.uuid4().hex,
            prompt_len=parsed.prompt_len,
            max_output=parsed.max_tokens,
            arrival=self.sim_now() if arrival is None else arrival,
            block_hashes=parsed.hashes,
            eos_at=eos_at,
        )
        slot = Slot()
        self._slots[req.rid] = slot
        engine.add(req)
        self.recorders[i].gauges()
        self._wake[i].set()
        return i, req, slot

    def release(self, i: int, req: Request) -> None:
        """The client is gone or done: drop the request and its blocks at once."""
        self._slots.pop(req.rid, None)
        if self.engines[i].abort(req):
            self.recorders[i].finished(req, "abort", self.engines[i].now)
            self.recorders[i].gauges()

    def gpu_state(self) -> dict[str, Any]:
        now = time.monotonic()
        return {"gpus": [g.state(now) for g in self.gpus]}


def _word(rid: str, k: int) -> str:
    return " " + _WORDS[zlib.crc32(f"{rid}:{k}".encode()) % len(_WORDS)]


class SimApp:
    def __init__(self, node: SimNode) -> None:
        self.node = node
        app = web.Application()
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/sim/gpu", self.gpu)
        app.on_startup.append(self._start)
        app.on_cleanup.append(self._stop)
        self.app = app

    async def _start(self, _: web.Application) -> None:
        self.node.start()

    async def _stop(self, _: web.Application) -> None:
        await self.node.stop()

    async def health(self, _: web.Request) -> web.Response:
        return web.Response(status=200)

    async def metrics(self, _: web.Request) -> web.Response:
        for recorder in self.node.recorders:
            recorder.gauges()
        body = generate_latest(self.node.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def gpu(self, _: web.Request) -> web.Response:
        return web.json_response(self.node.gpu_state())

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
        return web.json_response({"object": "list", "data": [model]})

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    async def _generate(self, request: web.Request, chat: bool) -> web.StreamResponse:
        arrival = self.node.sim_now()  # the request is here: reading its body is part of TTFT
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return error_response("request body is not valid JSON", 400)
        try:
            parsed = self.node.parse(body, chat)
        except BadRequest as exc:
            return error_response(str(exc), exc.status, exc.param)
        i, req, slot = self.node.submit(parsed, arrival)
        try:
            if parsed.stream:
                return await self._stream(request, req, slot, parsed, chat)
            return await self._whole(req, slot, chat)
        finally:
            self.node.release(i, req)

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
        words = []
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


async def start_sim(
    profile: Profile,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    engines: int = 1,
    time_scale: float = 1.0,
    seed: int = 0,
    model_name: str | None = None,
) -> tuple[SimNode, Served]:
    """Start a simulator on ``host:port`` (0 = a free port); close with ``served.close()``."""
    node = SimNode(profile, engines, time_scale, seed, model_name)
    served = await serve(SimApp(node).app, host, port)
    return node, served
