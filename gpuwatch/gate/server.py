"""``gpuwatch gate``: an admission-control proxy in front of any OpenAI-compatible server.

Responses stream through chunk by chunk. A client that leaves (queued, waiting for the first
token, or mid-stream) cancels its handler (``handler_cancellation=True``), which leaves the
queue or closes the upstream connection at once, so the engine aborts and frees its KV blocks.
Every exit path gives the slot back: the ticket is released in ``finally``.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gpuwatch.aioserve import Served, serve
from gpuwatch.gate import state as state_mod
from gpuwatch.gate.admission import AdmissionLane, Refused, Ticket
from gpuwatch.gate.config import GateConfig
from gpuwatch.gate.limits import Lane, LimitsError, apply_patch, changed
from gpuwatch.gate.metrics import GateMetrics, LaneMetrics
from gpuwatch.gate.state import GateState
from gpuwatch.tokens import body_text, estimate_body

HOP_BY_HOP = frozenset(
    h.lower()
    for h in (
        "Connection",
        "Keep-Alive",
        "Proxy-Authenticate",
        "Proxy-Authorization",
        "TE",
        "Trailer",
        "Transfer-Encoding",
        "Upgrade",
        "Host",
        "Content-Length",
    )
)
RETRY_AFTER = {"queue_full": "1", "queue_timeout": "5", "paused": "10"}
STATUS = {
    "queue_full": 429,
    "queue_timeout": 503,
    "paused": 503,
    "prompt_too_long": 400,
    "max_tokens": 400,
}
# Bodies up to this size are read whole when the upstream declares their length: cheaper than
# streaming a short JSON answer chunk by chunk.
_WHOLE_BODY_MAX = 256 * 1024


def openai_error(
    message: str,
    status: int,
    kind: str,
    code: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> web.Response:
    body = {"error": {"message": message, "type": kind, "param": None, "code": code or status}}
    return web.Response(
        text=json.dumps(body), status=status, content_type="application/json", headers=headers
    )


class Gate:
    def __init__(
        self, upstream: str, config: GateConfig, state: GateState, token: str | None
    ) -> None:
        self.upstream = upstream.rstrip("/")
        self.config = config
        self.state = state
        self.token = token.encode() if token else None
        self.lane_defs: dict[str, Lane] = {lane.name: lane for lane in config.lanes}
        limits = state.limits
        self.lanes = {
            name: AdmissionLane(name, limits.lanes[name], limits.paused) for name in self.lane_defs
        }
        # Longest prefix first, so /v1/images/ wins over a shorter overlapping prefix.
        self._routes = sorted(
            ((p, lane.name) for lane in config.lanes for p in lane.prefixes),
            key=lambda r: -len(r[0]),
        )
        self.metrics = GateMetrics(list(self.lanes))
        self._patch_lock = asyncio.Lock()
        self.session: aiohttp.ClientSession | None = None
        self._bind_gauges()

    # -- lifecycle ------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/admin/limits", self.get_limits)
        app.router.add_patch("/admin/limits", self.patch_limits)
        app.router.add_get("/admin/status", self.get_status)
        app.router.add_get("/admin/audit", self.get_audit)
        app.router.add_get("/metrics", self.get_metrics)
        app.router.add_get("/health", self.health)
        app.router.add_route("*", "/{tail:.*}", self.proxy)
        app.on_startup.append(self._open)
        app.on_cleanup.append(self._close)
        return app

    async def _open(self, _: web.Application) -> None:
        # No connection limit: admission already bounds concurrency, and a pool smaller than
        # max_inflight would queue requests where nobody can see them.
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=5)
        self.session = aiohttp.ClientSession(
            connector=connector,
            timeout=timeout,
            auto_decompress=False,
            skip_auto_headers=("User-Agent",),
        )

    async def _close(self, _: web.Application) -> None:
        if self.session:
            await self.session.close()

    # -- routing and admission ------------------------------------------------------------

    def lane_for(self, path: str) -> str | None:
        for prefix, name in self._routes:
            if path.startswith(prefix):
                return name
        if path.startswith("/v1/") or path in self.config.extra_paths:
            return "default" if "default" in self.lanes else None
        return None

    def _bind_gauges(self) -> None:
        """Gauges read the admission state when scraped: nothing to update per request."""
        self.metrics.paused.set_function(lambda: 1.0 if self.state.limits.paused else 0.0)
        for name, lane in self.lanes.items():
            lm = self.metrics.lanes[name]
            lm.inflight.set_function(lambda lane=lane: lane.inflight)
            lm.queued.set_function(lambda lane=lane: len(lane.queue))
            lm.limit_inflight.set_function(lambda lane=lane: lane.limits.max_inflight)
            lm.limit_queue.set_function(lambda lane=lane: lane.limits.max_queue)

    def _refusal(self, lane: str, refused: Refused) -> web.Response:
        self.metrics.lanes[lane].rejected[refused.reason].inc()
        status = STATUS[refused.reason]
        headers = (
            {"Retry-After": RETRY_AFTER[refused.reason]} if refused.reason in RETRY_AFTER else None
        )
        kind = (
            "rate_limit_error"
            if status == 429
            else ("invalid_request_error" if status == 400 else "service_unavailable")
        )
        return openai_error(str(refused), status, kind, refused.reason, headers)

    async def _check_body(self, lane: AdmissionLane, name: str, raw: bytes) -> bytes:
        """Apply prompt and output caps; returns the (maybe rewritten) body."""
        limits = lane.limits
        if limits.max_prompt_tokens is None and limits.max_output_tokens is None:
            return raw
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return raw  # not JSON (multipart, ...): nothing we can count or cap
        if not isinstance(body, dict):
            return raw
        if limits.max_prompt_tokens is not None:
            tokens = await self._prompt_tokens(name, body)
            if tokens is not None and tokens > limits.max_prompt_tokens:
                raise lane.refuse(
                    "prompt_too_long",
                    f"prompt is {tokens} tokens; lane {name!r} allows {limits.max_prompt_tokens}",
                )
        cap = limits.max_output_tokens
        if cap is None:
            return raw
        keys = [k for k in ("max_tokens", "max_completion_tokens") if isinstance(body.get(k), int)]
        over = [k for k in keys if body[k] > cap]
        if over and limits.output_tokens_policy == "reject":
            raise lane.refuse(
                "max_tokens", f"{over[0]} {body[over[0]]} is over lane {name!r}'s cap of {cap}"
            )
        if not keys:
            body["max_tokens"] = cap
        for k in over:
            body[k] = cap
        return json.dumps(body).encode() if over or not keys else raw

    async def _prompt_tokens(self, name: str, body: dict[str, Any]) -> int | None:
        if self.lane_defs[name].tokenize and self.session is not None:
            text = body_text(body)
            if text is not None:
                try:
                    async with self.session.post(
                        f"{self.upstream}/tokenize",
                        json={"model": body.get("model"), "prompt": text, "content": text},
                    ) as resp:
                        if resp.status == 200:
                            data = await resp.json()
                            if isinstance(data.get("count"), int):
                                return data["count"]
                            if isinstance(data.get("tokens"), list):
                                return len(data["tokens"])
                except (aiohttp.ClientError, ValueError):
                    pass  # fall back to the estimate rather than refuse on a tokenizer hiccup
        return estimate_body(body)

    async def proxy(self, request: web.Request) -> web.StreamResponse:
        received = time.monotonic()
        name = self.lane_for(request.path)
        if name is None:
            return openai_error(
                f"{request.path} is not routed by this gate", 404, "not_found_error"
            )
        lane = self.lanes[name]
        raw = await request.read()
        ticket: Ticket | None = None
        try:
            raw = await self._check_body(lane, name, raw)
            ticket = await lane.admit()
        except Refused as refused:
            return self._refusal(name, refused)
        metrics = self.metrics.lanes[name]
        try:
            metrics.admitted.inc()
            metrics.queue_wait.observe(ticket.queue_wait_s)
            return await self._forward(request, metrics, raw, received)
        finally:
            ticket.release()
            metrics.duration.observe(time.monotonic() - received)

    async def _forward(
        self, request: web.Request, metrics: LaneMetrics, body: bytes, received: float
    ) -> web.StreamResponse:
        assert self.session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        url = f"{self.upstream}{request.rel_url}"
        try:
            upstream = await self.session.request(
                request.method, url, data=body or None, headers=headers
            )
        except (aiohttp.ClientConnectionError, asyncio.TimeoutError, OSError) as exc:
            self.metrics.upstream_errors.inc()
            return openai_error(
                f"upstream {self.upstream} unreachable: {type(exc).__name__}: {exc}",
                502,
                "upstream_error",
            )
        response: web.StreamResponse | None = None
        try:
            out_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP}
            length = upstream.content_length
            if length is not None and length <= _WHOLE_BODY_MAX:
                data = await upstream.read()
                metrics.ttft.observe(time.monotonic() - received)
                return web.Response(body=data, status=upstream.status, headers=out_headers)
            response = web.StreamResponse(status=upstream.status, headers=out_headers)
            await response.prepare(request)
            first = True
            async for chunk in upstream.content.iter_any():
                if first:
                    metrics.ttft.observe(time.monotonic() - received)
                    first = False
                await response.write(chunk)
            await response.write_eof()
            return response
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as exc:
            self.metrics.upstream_errors.inc()
            if response is None or not response.prepared:
                return openai_error(f"upstream {self.upstream} broke: {exc}", 502, "upstream_error")
            raise ConnectionResetError("upstream broke mid-stream") from exc
        finally:
            if upstream.content.at_eof():
                upstream.release()  # back to the pool for the next request
            else:
                # Cancelled (the client left) or broken: close the upstream connection now,
                # so the engine aborts the generation and frees its KV blocks.
                upstream.close()

    # -- admin ----------------------------------------------------------------------------

    def _authorized(self, request: web.Request) -> bool:
        if self.token is None:
            return True
        header = request.headers.get("Authorization", "")
        scheme, _, given = header.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode(), self.token
        )

    def _deny(self, request: web.Request) -> web.Response | None:
        if self._authorized(request):
            return None
        return openai_error(
            "missing or wrong admin token (Authorization: Bearer ...)", 401, "authentication_error"
        )

    async def get_limits(self, request: web.Request) -> web.Response:
        return self._deny(request) or web.json_response(self.state.limits.to_json())

    async def patch_limits(self, request: web.Request) -> web.Response:
        denied = self._deny(request)
        if denied:
            return denied
        try:
            patch = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return openai_error("body is not valid JSON", 400, "invalid_request_error")
        actor = request.headers.get("X-Gpuwatch-Actor") or (request.remote or "unknown")
        async with self._patch_lock:
            before = self.state.limits
            if_match = request.headers.get("If-Match")
            if if_match is not None and if_match.strip('"') != str(before.version):
                last = self.state.audit[0]["actor"] if self.state.audit else None
                body = {
                    "error": {
                        "message": f"limits changed by {last} "
                        f"(version {before.version}, you had {if_match})",
                        "type": "conflict",
                        "param": None,
                        "code": 409,
                    },
                    "actor": last,
                    "limits": before.to_json(),
                }
                return web.json_response(body, status=409)
            try:
                after = apply_patch(before, patch)
            except LimitsError as exc:
                return openai_error(str(exc), 400, "invalid_request_error", exc.field)
            self.state.limits = after
            self.state.record(
                {
                    "time": time.time(),
                    "actor": actor,
                    "version": after.version,
                    "change": changed(before, after),
                    "before": before.to_json(),
                    "after": after.to_json(),
                }
            )
            try:
                await asyncio.to_thread(self.state.save)
            except OSError as exc:
                self.state.limits = before
                self.state.audit.pop(0)
                return openai_error(f"cannot persist limits: {exc}", 500, "internal_error")
            for name, lane in self.lanes.items():
                lane.set_limits(after.lanes[name], after.paused)
        return web.json_response(after.to_json())

    async def get_status(self, request: web.Request) -> web.Response:
        denied = self._deny(request)
        if denied:
            return denied
        now = time.monotonic()
        lanes = {
            name: {
                "inflight": lane.inflight,
                "queued": len(lane.queue),
                "oldest_queued_s": round(lane.oldest_queued_s(now), 3),
                "admitted_total": lane.admitted_total,
                "rejected_total": dict(lane.rejected_total),
            }
            for name, lane in self.lanes.items()
        }
        limits = self.state.limits
        return web.json_response(
            {"version": limits.version, "paused": limits.paused, "lanes": lanes}
        )

    async def get_audit(self, request: web.Request) -> web.Response:
        denied = self._deny(request)
        if denied:
            return denied
        try:
            limit = int(request.query.get("limit", "50"))
        except ValueError:
            return openai_error("limit must be an integer", 400, "invalid_request_error", "limit")
        return web.json_response({"entries": self.state.audit[: max(0, limit)]})

    async def get_metrics(self, _: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(self.metrics.registry),
            headers={"Content-Type": CONTENT_TYPE_LATEST},
        )

    async def health(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})


async def start_gate(
    upstream: str,
    config: GateConfig,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    token: str | None = None,
    state_file: Path | None = None,
) -> tuple[Gate, Served]:
    """Load state (persisted limits win), start serving; close with ``served.close()``."""
    defaults = {lane.name: lane.limits for lane in config.lanes}
    path = state_file or state_mod.default_path(host, port)
    state = state_mod.load(path, defaults)
    if not path.exists():
        state.save()  # the file exists from the start: its path is something to show
    gate = Gate(upstream, config, state, token)
    served = await serve(gate.app(), host, port)
    return gate, served
