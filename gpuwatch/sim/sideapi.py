"""The simulator's OpenAI embeddings and images endpoints, served when the node runs them.
Each request that ran (or was queued and left) is traced as the text requests are
(gpuwatch/sim/tracing.py); one refused at the door (400, 429) is not.

Bodies are validated in gpuwatch/sim/request.py (``parse_embeddings``, ``parse_images``); the
work runs on the node's side servers (gpuwatch/sim/siderun.py). Vectors and images are
deterministic placeholders: what matters here is the time and the GPU they cost.
"""

from __future__ import annotations

import array
import base64
import zlib
from collections.abc import Callable
from typing import Any

from aiohttp import web

from gpuwatch.otlp import AttributeValue, operation
from gpuwatch.sim.node import SimNode
from gpuwatch.sim.request import (
    BadRequest,
    decode,
    error_response,
    parse_embeddings,
    parse_images,
)
from gpuwatch.sim.sidework import EmbedJob, ImageJob

# A 1x1 grey PNG: every generated "image" (the simulator models the cost, not the picture).
_PNG_B64 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAAAAAA6fptVAAAACklEQVR4nGNoAAAAggCBd81ytgAAAABJRU5ErkJggg=="
)
EMBED_DIM = 1024  # BGE-large's hidden size


def _vector(seed: str) -> list[float]:
    """A deterministic unit-scale vector for one input."""
    x = zlib.crc32(seed.encode()) or 1
    out = []
    for _ in range(EMBED_DIM):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        out.append(round(x / 0x7FFFFFFF * 2 - 1, 6))
    return out


class SideApi:
    """``/v1/embeddings`` and ``/v1/images/generations`` on a node that serves them."""

    def __init__(self, node: SimNode) -> None:
        self.node = node
        self.side = node.side

    def routes(self) -> list[web.RouteDef]:
        out = []
        if self.side.embed_model:
            out.append(web.post("/v1/embeddings", self.embeddings))
        if self.side.image_model:
            out.append(web.post("/v1/images/generations", self.images))
        return out

    def models(self) -> list[dict[str, Any]]:
        """Entries for /v1/models, after the text model."""
        names = [m.name for m in (self.side.embed_model, self.side.image_model) if m]
        return [
            {
                "id": name,
                "object": "model",
                "created": self.node.created,
                "owned_by": "gpuwatch-sim",
                "root": name,
            }
            for name in names
        ]

    async def _body(
        self, request: web.Request, parse: Callable[[dict[str, Any]], Any]
    ) -> Any | web.Response:
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge as exc:
            return error_response(exc.text or "request body too large", exc.status)
        try:
            return parse(decode(raw))
        except BadRequest as exc:
            return error_response(str(exc), exc.status, exc.param)

    def _traced(
        self,
        request: web.Request,
        model: str,
        arrival: float,
        job: EmbedJob | ImageJob | None,
        run: str,
        attributes: dict[str, AttributeValue],
    ) -> None:
        """The request's spans (``SimTracing.served``): ``queue`` to the start of its run,
        ``run`` to its end. No job, or one that never finished: the client left."""
        started, finished = (job.started, job.finished) if job else (None, None)
        node = self.node
        node.tracing.served(
            request.headers, operation(request.path), model, arrival,
            finished if finished is not None else node.sim_now(),
            (("queue", arrival, started), (run, started, finished)), attributes,
            aborted=finished is None, wall_at=node.wall_at,
        )  # fmt: skip

    async def embeddings(self, request: web.Request) -> web.Response:
        arrival = self.node.sim_now()
        self.node.tracing.received(request.headers)
        model = self.side.embed_model
        assert model is not None
        parsed = await self._body(request, lambda b: parse_embeddings(b, model))
        if isinstance(parsed, web.Response):
            if self.side.embed_metrics:
                self.side.embed_metrics.request_failure.labels("validation").inc()
            return parsed
        assert self.side.embeds is not None
        if self.side.embeds.full:
            if self.side.embed_metrics:
                self.side.embed_metrics.request_failure.labels("overloaded").inc()
            return _busy(
                f"Model is overloaded: {len(self.side.embeds.queue)} requests wait for a batch "
                f"(max {self.side.embeds.max_waiting}); retry later",
                retry_after_s=1,
            )
        job = None
        try:
            job = await self.side.embed(parsed.tokens, parsed.batched)
        finally:
            inputs = len(parsed.tokens)
            usage = sum(parsed.tokens)
            self._traced(
                request, model.name, arrival, job, "embed",
                {"gen_ai.usage.input_tokens": usage, "gpuwatch.sim.inputs": inputs},
            )  # fmt: skip
        data = []
        for i in range(len(parsed.tokens)):
            vector = _vector(f"{job.rid}:{i}")
            embedding: Any = (
                base64.b64encode(array.array("f", vector).tobytes()).decode()
                if parsed.base64
                else vector
            )
            data.append({"object": "embedding", "index": i, "embedding": embedding})
        usage = {"prompt_tokens": job.total, "total_tokens": job.total}
        return web.json_response(
            {"object": "list", "data": data, "model": model.name, "usage": usage}
        )

    async def images(self, request: web.Request) -> web.Response:
        arrival = self.node.sim_now()
        self.node.tracing.received(request.headers)
        model, side = self.side.image_model, self.side
        assert model is not None and side.images is not None
        parsed = await self._body(request, lambda b: parse_images(b, model))
        if isinstance(parsed, web.Response):
            return parsed
        job = side.new_image(parsed.width, parsed.height, parsed.steps, parsed.n)
        if not side.images.fits_ever(job):
            gib = 2**30
            return error_response(
                f"{parsed.n} x {parsed.width}x{parsed.height} needs {job.bytes / gib:.1f} GiB "
                f"of activations, over the image reserve of {side.images.reserve_bytes / gib:.1f}"
                " GiB: lower size or n",
                400,
                "size",
            )
        if side.images.would_wait_past_cap(job):
            assert side.image_metrics is not None
            side.image_metrics.requests.labels("queue_full").inc()
            return _busy(
                f"image queue is full: {len(side.images.queue)} requests wait for VRAM "
                f"(max {side.images.max_waiting}); retry later",
                retry_after_s=5,
            )
        try:
            await side.generate(job)
        finally:
            self._traced(
                request, model.name, arrival, job, "generate",
                {
                    "gpuwatch.sim.images": parsed.n,
                    "gpuwatch.sim.image.size": f"{parsed.width}x{parsed.height}",
                    "gpuwatch.sim.image.steps": parsed.steps,
                },
            )  # fmt: skip
        item = (
            {"b64_json": _PNG_B64} if parsed.b64 else {"url": "data:image/png;base64," + _PNG_B64}
        )
        return web.json_response(
            {
                "created": self.node.created,
                "data": [dict(item) for _ in range(parsed.n)],
                "size": f"{parsed.width}x{parsed.height}",
                "steps": parsed.steps,
            }
        )


def _busy(message: str, retry_after_s: int) -> web.Response:
    """A queue at its cap: 429 with the reason and when to come back, as the real servers do."""
    refused = error_response(message, 429)
    refused.headers["Retry-After"] = str(retry_after_s)
    return refused
