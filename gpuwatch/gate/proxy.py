"""The proxy plane: route a request to a lane, read its body within bounds and then as one
typed request (``request.py``), apply the lane's caps to that, hold a slot while it runs
upstream, and stream the answer back chunk by chunk.

A client that leaves (queued, waiting for the first token, or mid-stream) cancels its handler
(``handler_cancellation=True``), which leaves the queue or closes the upstream connection at
once, so the engine aborts and frees its KV blocks. The slot is held by ``lane.slot()`` and
given back on every way out.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import replace

import aiohttp
from aiohttp import web

from gpuwatch.gate import deadline
from gpuwatch.gate.admission import AdmissionLane, Refused
from gpuwatch.gate.body import BodyRefused, inflated, read_body
from gpuwatch.gate.caps import CapRefused, check_text
from gpuwatch.gate.config import GateConfig
from gpuwatch.gate.errors import openai_error
from gpuwatch.gate.exchange import Exchange
from gpuwatch.gate.fields import BodyError
from gpuwatch.gate.latency import LaneLatency
from gpuwatch.gate.limits import MEDIA_CAPS, Lane, LaneLimits
from gpuwatch.gate.mediacaps import CLAMP_HEADER, MediaRefused, check_media
from gpuwatch.gate.metrics import GateMetrics
from gpuwatch.gate.otel import UNTRACED, GateTelemetry, trace_of
from gpuwatch.gate.paths import PathError, split_target
from gpuwatch.gate.request import BodyFacts, InferenceRequest, read_request
from gpuwatch.gate.stallwatch import StreamTally
from gpuwatch.gate.upstream import Upstream, UpstreamError
from gpuwatch.gate.watchdog import IdleWatchdog, SendWatchdog, UpstreamTimeout, within
from gpuwatch.safejson import JSONError, loads_bounded

log = logging.getLogger("gpuwatch.gate")

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
        "Expect",  # the gate answered 100-continue itself; the body is already here
    )
)
# When a refusal carries no estimate of its own (Refused.retry_after_s, from the lane's drain
# rate), these.
RETRY_AFTER = {
    "queue_full": "1",
    "queue_deadline": "1",
    "queue_timeout": "5",
    "paused": "10",
    "evicted": "1",
    "tenant_paused": "10",
    # Unknown how long a stall lasts: come back soon, the gate admits again the second the
    # upstream moves.
    "upstream_stalled": "5",
}
STATUS = {
    "queue_full": 429,
    "queue_timeout": 503,
    "queue_deadline": 429,
    "paused": 503,
    "prompt_too_long": 400,
    "max_tokens": 400,
    "over_token_budget": 400,
    **{cap: 400 for cap in MEDIA_CAPS},
    "evicted": 429,
    "tenant_paused": 503,
    "upstream_stalled": 503,
}
# Bodies up to this size are read whole when the upstream declares their length: cheaper than
# streaming a short JSON answer chunk by chunk.
_WHOLE_BODY_MAX = 256 * 1024
_DONE = b"data: [DONE]"  # an OpenAI-style stream's last event
_TOKENIZE_ANSWER_MAX = 4 * 1024 * 1024


class _Throttled:
    """A warning that can repeat for every request (an upstream outage): at most one line per
    interval, saying how many were left out since the last one."""

    def __init__(self, interval_s: float = 5.0) -> None:
        self.interval_s = interval_s
        self._last = -interval_s
        self._left_out = 0

    def warning(self, message: str, *args: object) -> None:
        now = time.monotonic()
        if now - self._last < self.interval_s:
            self._left_out += 1
            return
        if self._left_out:
            message += f" ({self._left_out} more like it in the last {now - self._last:.0f} s)"
        log.warning(message, *args)
        self._last, self._left_out = now, 0


class Proxy:
    def __init__(
        self,
        config: GateConfig,
        lanes: Mapping[str, AdmissionLane],
        metrics: GateMetrics,
        upstream: Upstream,
        latency: Mapping[str, LaneLatency],
        telemetry: GateTelemetry | None = None,
    ) -> None:
        self.config = config
        self.telemetry = telemetry  # None: export off, no spans (otel.py)
        self.lanes = lanes
        self.lane_defs: dict[str, Lane] = {lane.name: lane for lane in config.lanes}
        self.metrics = metrics
        self.upstream = upstream
        self.latency = latency
        self._unreachable = _Throttled()
        self._broken = _Throttled()
        self._silent = _Throttled()
        # Streams being relayed and their chunks, for the stall watch (stallwatch.py).
        self.streams = StreamTally()
        # Longest prefix first, so /v1/images/ wins over a shorter overlapping prefix.
        self._routes = sorted(
            ((p, lane.name) for lane in config.lanes for p in lane.prefixes),
            key=lambda r: -len(r[0]),
        )

    def is_inference(self, method: str, path: str) -> bool:
        """A POST to a path some lane names: work for the model, what users wait on."""
        return method == "POST" and any(path.startswith(prefix) for prefix, _ in self._routes)

    def lane_for(self, path: str) -> str | None:
        """The lane of a normalised path (see ``paths.normalise``), or None: not routed."""
        for prefix, name in self._routes:
            if path.startswith(prefix):
                return name
        if path.startswith("/v1/") or path in self.config.extra_paths:
            return "default" if "default" in self.lanes else None
        return None

    def _refusal(self, lane: str, refused: Refused) -> web.Response:
        self.metrics.lanes[lane].rejected[refused.reason].inc()
        status = STATUS[refused.reason]
        after = (
            str(refused.retry_after_s)
            if refused.retry_after_s is not None
            else RETRY_AFTER.get(refused.reason)
        )
        headers = {"Retry-After": after} if after is not None else None
        kind = (
            "rate_limit_error"
            if status == 429
            else ("invalid_request_error" if status == 400 else "service_unavailable")
        )
        return openai_error(str(refused), status, kind, refused.reason, headers)

    # -- the request ----------------------------------------------------------------------

    async def expect(self, request: web.Request) -> web.StreamResponse | None:
        """``Expect: 100-continue`` (curl sends it for bodies over 1 MiB): refuse a body over
        the lane's max_body before the client sends it, else invite it."""
        if request.headers.get("Expect", "").lower() != "100-continue":
            return self._client_error(417, "expectation_failed", "only 100-continue is supported")
        try:
            path, _ = split_target(request.raw_path)
        except PathError:
            return None  # the handler answers 400 without reading the body
        name = self.lane_for(path)
        length = request.content_length
        if name is not None and length is not None and length > self.lane_defs[name].max_body:
            return self._client_error(
                413,
                "body_too_large",
                f"body of {length} bytes is over this path's limit of "
                f"{self.lane_defs[name].max_body}",
                close=True,
            )
        if request.version >= (1, 1):
            await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            request.writer.output_size = 0  # the answer proper has not started
        return None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if self.telemetry is None:
            return await self._handle(request)
        try:
            response = await self._handle(request)
        except BaseException:
            trace_of(request).end(None)  # the client left (its handler was cancelled)
            raise
        trace_of(request).end(response.status)
        return response

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        received = time.monotonic()
        try:
            path, query = split_target(request.raw_path)
        except PathError as exc:
            return self._client_error(400, "bad_path", str(exc))
        name = self.lane_for(path)
        if name is None:
            return openai_error(f"{path} is not routed by this gate", 404, "not_found_error")
        lane = self.lanes[name]
        who = self.config.fairness.who(request.headers)
        inference = self.is_inference(request.method, path)
        trace = (
            self.telemetry.begin(request, name, path, who, received)
            if self.telemetry is not None and inference
            else UNTRACED
        )
        try:
            raw = await read_body(
                request, self.lane_defs[name].max_body, self.config.client_body_timeout_s
            )
        except BodyRefused as exc:
            trace.refused(exc.code)
            return self._client_error(exc.status, exc.code, str(exc), close=True)
        ex = Exchange(self.metrics.lanes[name], self.latency[name] if inference else None, received)
        try:
            try:
                # The one read of the request: every check below judges what it found.
                req = read_request(
                    raw,
                    lane.limits,
                    lane=name,
                    path=path,
                    query=query,
                    who=who,
                    inference=inference,
                    # A streamed answer holds one of the lane's prefills until its first token
                    # (``deadline.prefill_cap``): the flag matters where prefills are capped.
                    stream_matters=deadline.engine_target(lane.limits, lane.slo_ttft_s) is not None,
                )
            except BodyError as exc:
                trace.refused("invalid_body")
                ex.outcome("invalid")
                return self._client_error(400, "invalid_body", str(exc), param=exc.field)
            trace.read(req)
            req, tokens = await self._check(lane, req)
            ex.queueing()
            trace.queueing()
            async with lane.slot(tokens, req.who, req.stream) as ticket:
                ex.admitted(ticket.queue_wait_s, ticket.first_token)
                trace.admitted(ticket.queue_wait_s, req.notes)
                return await self._forward(request, ex, req, lane.limits)
        except Refused as refused:
            trace.refused(refused.reason)
            lane.tenants.refused[(who.klass, refused.reason)] += 1
            ex.outcome("refused")
            return self._refusal(name, refused)
        except asyncio.CancelledError:
            ex.outcome("abandoned")  # the client went away
            raise
        finally:
            ex.end()

    def _client_error(
        self, status: int, code: str, message: str, param: str | None = None, close: bool = False
    ) -> web.Response:
        self.metrics.bad_requests.labels(code).inc()
        response = openai_error(message, status, "invalid_request_error", code, param=param)
        if close:
            # The rest of the body is unread: the connection cannot carry another request.
            response.force_close()
        return response

    async def _check(
        self, lane: AdmissionLane, req: InferenceRequest
    ) -> tuple[InferenceRequest, int]:
        """The lane's caps on the request, each once: image and embedding caps
        (``mediacaps.py``), then the prompt and output caps (``caps.py``). Returns the request
        as the upstream gets it (rewritten where a cap clamped it) and the tokens to reserve
        from the lane's budget (0 without a budget); a cap's refusal is the lane's."""
        facts = req.facts
        if facts is None:  # no check of the lane reads the body
            return req, 0
        limits = lane.limits
        try:
            if facts.media is not None:
                facts = facts.clamped(check_media(facts.media, limits, req.lane))
            tokens = await self._prompt_tokens(req.lane, facts)
            clamp, reserve = check_text(
                facts.output, limits, req.lane, req.path, tokens, self.config.default_output_tokens
            )
        except (MediaRefused, CapRefused) as exc:
            raise lane.refuse(exc.reason, str(exc)) from None
        facts = facts.clamped(clamp)
        return (req if facts is req.facts else replace(req, facts=facts)), reserve

    async def _prompt_tokens(self, lane: str, facts: BodyFacts) -> int | None:
        """The prompt's length: the lane's tokenizer's count where it has one, else (and on
        any tokenizer hiccup) the shared estimate; None when no check reads it, or the request
        has no prompt."""
        prompt = facts.prompt
        if prompt is None or not prompt.found:
            return None
        estimate = prompt.estimate()
        if not self.lane_defs[lane].tokenize:
            return estimate
        text = prompt.text()
        if not text:
            return estimate
        payload = {"model": facts.model, "prompt": text, "content": text}
        try:
            # A tokenizer that does not answer is a silent upstream too: past the lane's
            # first-byte timeout the estimate stands in, as for any other hiccup.
            answer = await within(
                self.upstream.post_json("/tokenize", payload, _TOKENIZE_ANSWER_MAX),
                self.lanes[lane].limits.upstream_first_byte_timeout_s,
            )
        except asyncio.TimeoutError:
            answer = None
        if answer is not None:
            try:
                data = loads_bounded(answer)
            except JSONError:
                data = None
            if isinstance(data, dict):
                count, tokens = data.get("count"), data.get("tokens")
                # The tokenizer counts the text; token ids given as such are counted apart.
                if isinstance(count, int) and not isinstance(count, bool):
                    return count + prompt.ids
                if isinstance(tokens, list):
                    return len(tokens) + prompt.ids
        return estimate  # a tokenizer hiccup falls back to the estimate rather than refuse

    async def _forward(
        self, request: web.Request, ex: Exchange, req: InferenceRequest, limits: LaneLimits
    ) -> web.StreamResponse:
        # aiohttp's parser inflated a gzip, deflate, br or zstd body as it came in (so the caps
        # and the size limit saw what the upstream will parse): it goes on as read, without
        # the Content-Encoding that no longer describes it.
        decoded = inflated(request)
        headers = {
            k: v
            for k, v in request.headers.items()
            if k.lower() not in HOP_BY_HOP and not (decoded and k.lower() == "content-encoding")
        }
        trace = trace_of(request)
        trace.inject(headers)  # the engine's spans nest under the gate's
        first_s = limits.upstream_first_byte_timeout_s
        lane = req.lane
        body = req.payload()
        sent = time.monotonic()
        try:
            upstream = await within(
                self.upstream.request(
                    request.method, self.upstream.url(req.path, req.query), headers, body or None
                ),
                first_s,
            )
        except asyncio.TimeoutError:
            assert first_s is not None
            return self._timed_out(ex, lane, UpstreamTimeout("first_byte", first_s))
        except UpstreamError as exc:
            ex.outcome("failed")
            trace.failed_upstream(f"upstream_{exc.kind}")
            self.metrics.upstream_errors.inc()
            # The upstream's address stays in the log: clients learn only that it failed.
            self._unreachable.warning("upstream %s unreachable: %s", self.upstream.base, exc.kind)
            return openai_error(f"upstream unreachable: {exc.kind}", 502, "upstream_error")
        watch = IdleWatchdog(
            upstream.content,
            None if first_s is None else sent + first_s,
            first_s,
            limits.upstream_idle_timeout_s,
        )
        trace.upstream(upstream.status)
        try:
            if upstream.status >= 400:
                ex.outcome("failed")  # answered, but not with what the user asked for
            return await self._relay(request, upstream, ex, watch, lane, req.notes)
        finally:
            watch.stop()
            if upstream.content.at_eof():
                upstream.release()  # back to the pool for the next request
            else:
                # Cancelled (the client left), broken or silent: close the upstream connection
                # now, so the engine aborts the generation and frees its KV blocks.
                upstream.close()

    def _timed_out(self, ex: Exchange, lane: str, exc: UpstreamTimeout) -> web.Response:
        """A 504 for an upstream that sent nothing in time; the caller closes its connection."""
        ex.outcome("failed")
        self.metrics.upstream_timeouts.labels(lane, exc.kind).inc()
        self._silent.warning("upstream %s: %s (lane %s)", self.upstream.base, exc, lane)
        setting = f"upstream_{exc.kind}_timeout_s"
        return openai_error(
            f"{exc} (lane {lane!r}'s {setting}); the request was cancelled upstream",
            504,
            "upstream_error",
            f"upstream_{exc.kind}_timeout",
        )

    async def _relay(
        self,
        request: web.Request,
        upstream: aiohttp.ClientResponse,
        ex: Exchange,
        watch: IdleWatchdog,
        lane: str,
        clamped: tuple[str, ...],
    ) -> web.StreamResponse:
        # The clamp header is the gate's word alone: an upstream's own (in any case) is dropped,
        # so a client never reads a clamp the gate did not make, nor two values.
        out_headers = {
            k: v
            for k, v in upstream.headers.items()
            if k.lower() not in HOP_BY_HOP and k.lower() != CLAMP_HEADER.lower()
        }
        if clamped:
            out_headers[CLAMP_HEADER] = "; ".join(clamped)
        length = upstream.content_length
        whole = length is not None and length <= _WHOLE_BODY_MAX
        # The first chunk (a short answer: all of it) is read before anything goes to the
        # client, so an upstream that never sends one is still a clean 504.
        try:
            chunk = await upstream.content.readany()
            watch.progress()
            if whole:
                data = bytearray(chunk)
                while chunk := await upstream.content.readany():
                    watch.progress()
                    data += chunk
        except UpstreamTimeout as exc:
            return self._timed_out(ex, lane, exc)
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as exc:
            ex.outcome("failed")
            self.metrics.upstream_errors.inc()
            self._broken.warning(
                "upstream broke before its answer was complete: %s", type(exc).__name__
            )
            return openai_error(f"upstream broke: {type(exc).__name__}", 502, "upstream_error")
        if whole:
            ex.first_byte()
            trace = trace_of(request)
            trace.first_token()
            trace.answer(data)
            return web.Response(body=bytes(data), status=upstream.status, headers=out_headers)
        response = web.StreamResponse(status=upstream.status, headers=out_headers)
        try:
            await response.prepare(request)
            return await self._stream(request, upstream, response, ex, watch, chunk, lane)
        except ConnectionError:
            ex.outcome("abandoned")
            # The client left while a write was under way (headers, a chunk, the last chunk):
            # a failed write to the client, not an upstream problem.
            if not ex.answered:
                trace_of(request).left()
                self.metrics.streams_broken.labels("client").inc()
            log.debug("client left mid-stream")
            return response
        except asyncio.CancelledError:
            # The other way a client leaves mid-stream: its disconnect cancelled the handler.
            if not ex.answered:
                self.metrics.streams_broken.labels("client").inc()
            raise

    async def _stream(
        self,
        request: web.Request,
        upstream: aiohttp.ClientResponse,
        response: web.StreamResponse,
        ex: Exchange,
        watch: IdleWatchdog,
        chunk: bytes,
        lane: str,
    ) -> web.StreamResponse:
        send = SendWatchdog(request.transport, self.config.client_send_timeout_s)
        self.streams.begin()
        try:
            return await self._pump(request, upstream, response, ex, send, watch, chunk, lane)
        finally:
            self.streams.end()
            send.stop()
            if send.fired:
                log.info(
                    "client stopped reading for %g s mid-stream: connection closed",
                    self.config.client_send_timeout_s,
                )

    async def _pump(
        self,
        request: web.Request,
        upstream: aiohttp.ClientResponse,
        response: web.StreamResponse,
        ex: Exchange,
        send: SendWatchdog,
        watch: IdleWatchdog,
        chunk: bytes,
        lane: str,
    ) -> web.StreamResponse:
        """Relay ``chunk`` (the first, already read) and every next one to the client."""
        first = True
        tail = b""  # the last bytes written, for a [DONE] split across two chunks
        trace = trace_of(request)
        while chunk:
            self.streams.chunk()
            trace.answer(chunk)
            if first:
                ex.first_byte()
                trace.first_token()
                first = False
            else:
                ex.chunk()
            send.writing()
            await response.write(chunk)
            send.written()
            if _DONE in tail + chunk:
                ex.answered_whole()
            tail = (tail + chunk)[-len(_DONE) :]
            # Reading from the upstream and writing to the client fail for different reasons
            # and mean different things; each gets its own handler and its own count.
            try:
                chunk = await upstream.content.readany()
            except (
                UpstreamTimeout,
                aiohttp.ClientPayloadError,
                aiohttp.ClientConnectionError,
            ) as exc:
                ex.outcome("failed")
                trace.failed_upstream("upstream_broke_mid_stream")
                self.metrics.streams_broken.labels("upstream").inc()
                if isinstance(exc, UpstreamTimeout):
                    self.metrics.upstream_timeouts.labels(lane, exc.kind).inc()
                    self._silent.warning("upstream %s: %s mid-stream", self.upstream.base, exc)
                else:
                    self.metrics.upstream_errors.inc()
                    self._broken.warning("upstream broke mid-stream: %s", type(exc).__name__)
                # End the client's connection without the final chunk: a clean end would
                # pass a truncated answer off as a whole one.
                if request.transport is not None:
                    request.transport.close()
                return response
            watch.progress()
        ex.answered_whole()  # the upstream's last chunk, every byte written
        await response.write_eof()
        return response
