"""Each inference request's story as an OpenTelemetry span, and the GenAI metrics, exported
over OTLP (``gpuwatch/otlp.py``) when the gate is given an endpoint.

One SERVER span per inference request (a POST to a path a lane routes), named and attributed
by the GenAI semantic conventions (``gen_ai.*``) plus the gate's own (``gpuwatch.*``): lane,
class, tenant (the id the gate keys on, a hash for API keys, never a key), queue wait, the
refusal or shed reason, clamps applied, the upstream's status. Events mark admission, the
first token and the end. The span's context goes upstream as ``traceparent``/``tracestate``
(W3C Trace Context), continuing the client's trace when it sent one, so the engine's spans
nest under the gate's.

The proxy calls in at a few points (``RequestTrace``); with export off none of this runs and
the SDK is never imported. What a span learns of the answer (model, token usage, finish
reasons) is read from the bytes relayed anyway by one regular expression per chunk: the answer
is never parsed as JSON for the span's sake.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any

from aiohttp import web

from gpuwatch.gate.classes import Who
from gpuwatch.otlp import (
    Attributes,
    Exporting,
    OtlpConfig,
    SpanRecord,
    epoch_offset_ns,
    operation,
)

if TYPE_CHECKING:
    from opentelemetry.trace import SpanContext

    from gpuwatch.gate.request import InferenceRequest

# The reasons a request is shed rather than refused at the door (gpuwatch.shed = true).
SHED = frozenset(("evicted", "upstream_stalled"))
# The GenAI conventions' advised bucket boundaries for each histogram.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0)  # fmt: skip
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48,
                    40.96, 81.92)  # fmt: skip
TOKEN_BUCKETS = tuple(float(4**k) for k in range(14))  # 1, 4, 16 ... 67108864
# What the span reads of an answer (whole or streamed): the model, the token counts by any of
# the names servers use (chat/completions' and the Responses API's), finish reasons. JSON
# escapes quotes inside strings, so a key can only match as a key, never inside content.
_FACTS = re.compile(
    rb'"(model|id|finish_reason|prompt_tokens|completion_tokens|input_tokens|output_tokens)"'
    rb'\s*:\s*(?:"([^"\\]{1,200})"|(\d{1,12}))'
)
_MODEL = re.compile(rb'"model"\s*:\s*"([^"\\]{1,200})"')
_TAIL = 256  # bytes of the last chunk kept, for a fact split across two chunks
_EDGE = 64  # bytes each side of a chunk boundary that a split key lies within


class AnswerFacts:
    """What an answer says of itself, read from its bytes as they pass (a whole body, or a
    stream's chunks, split anywhere): the model, the response id, token usage, finish reasons.
    Pure."""

    def __init__(self) -> None:
        self._tail = b""
        self._facts: dict[bytes, bytes] = {}
        self.finish_reasons: list[str] = []

    def feed(self, data: bytes | bytearray) -> None:
        # Most chunks of a stream say nothing new (a token, "finish_reason":null): a few
        # substring tests, at C speed, pass them by; the regex reads only those that may
        # hold a fact, or the edge with the last chunk where a key may be split.
        edge = self._tail[-_EDGE:] + data[:_EDGE]
        if self._may_tell(data) or self._may_tell(edge):
            self._scan(self._tail + data)
        self._tail = bytes(data[-_TAIL:]) if len(data) >= _TAIL else (self._tail + data)[-_TAIL:]

    def _may_tell(self, data: bytes | bytearray) -> bool:
        if b'_tokens"' in data:
            return True
        if (b"model" not in self._facts or b"id" not in self._facts) and (
            b'"model"' in data or b'"id"' in data
        ):
            return True
        finishes = data.count(b'"finish_reason"')
        return finishes > data.count(b'"finish_reason":null') + data.count(b'"finish_reason": null')

    def _scan(self, window: bytes | bytearray) -> None:
        for match in _FACTS.finditer(window):
            key, text, number = match.groups()
            if key == b"finish_reason":
                reason = text.decode("utf-8", "replace") if text else None
                if reason and reason not in self.finish_reasons:
                    self.finish_reasons.append(reason)
            elif key in (b"model", b"id"):
                # The answer's own come first; a tool call's id later is not the answer's.
                self._facts.setdefault(key, text or b"")
            else:
                self._facts[key] = text if text is not None else number  # the latest count

    def _text(self, key: bytes) -> str | None:
        value = self._facts.get(key)
        return value.decode("utf-8", "replace") if value else None

    def _count(self, *keys: bytes) -> int | None:
        for key in keys:
            value = self._facts.get(key)
            if value is not None and value.isdigit():
                return int(value)
        return None

    @property
    def model(self) -> str | None:
        return self._text(b"model")

    @property
    def id(self) -> str | None:
        return self._text(b"id")

    @property
    def input_tokens(self) -> int | None:
        return self._count(b"prompt_tokens", b"input_tokens")

    @property
    def output_tokens(self) -> int | None:
        return self._count(b"completion_tokens", b"output_tokens")


class GateTelemetry:
    """The gate's exporter, tracer, propagator and GenAI instruments; one per gate."""

    def __init__(self, config: OtlpConfig) -> None:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.exporting = exporting = Exporting(config, "gpuwatch-gate")
        self.propagator = TraceContextTextMapPropagator()
        # The ratio sampler's rule (TraceIdRatioBased): a trace is kept when the low 64 bits
        # of its id are under this bound, so every service sampling by ratio agrees.
        self.sample_bound = round(config.sample_ratio * 2**64)
        self.ttft = exporting.histogram(
            "gen_ai.server.time_to_first_token",
            "s",
            "Time to the first token (the upstream's first body byte), from arrival",
            TTFT_BUCKETS,
        )
        self.duration = exporting.histogram(
            "gen_ai.server.request.duration",
            "s",
            "Arrival to the last byte of the answer (refusals included)",
            DURATION_BUCKETS,
        )
        self.tokens = exporting.histogram(
            "gen_ai.client.token.usage",
            "{token}",
            "Input and output tokens of each answer, as the upstream counted them",
            TOKEN_BUCKETS,
        )

    def begin(
        self, request: web.Request, lane: str, path: str, who: Who, received: float
    ) -> RequestTrace:
        """The span of one inference request, from ``received`` (monotonic), stored on the
        request for the proxy's later steps (``trace_of``)."""
        trace = RequestTrace(self, request.headers, lane, path, who, received)
        request[TRACE_KEY] = trace
        return trace

    async def close(self) -> None:
        # Flushing waits on the collector (at most its timeout): not on the event loop.
        await asyncio.to_thread(self.exporting.shutdown)


class Untraced:
    """A request without a span (export off, or not an inference request): every hook does
    nothing, so the proxy calls them without asking."""

    def read(self, req: InferenceRequest) -> None:
        pass

    def queueing(self) -> None:
        pass

    def admitted(self, queue_wait_s: float, clamps: tuple[str, ...]) -> None:
        pass

    def refused(self, reason: str) -> None:
        pass

    def inject(self, headers: dict[str, str]) -> None:
        pass

    def upstream(self, status: int) -> None:
        pass

    def failed_upstream(self, kind: str) -> None:
        pass

    def first_token(self) -> None:
        pass

    def left(self) -> None:
        pass

    def answer(self, data: bytes | bytearray) -> None:
        pass

    def end(self, status: int | None) -> None:
        pass


UNTRACED = Untraced()
# Where a request's trace rides on the aiohttp request, for the proxy's later steps.
TRACE_KEY = web.RequestKey("gpuwatch.trace", Untraced)


def trace_of(request: web.Request) -> Untraced:
    """The request's trace (``GateTelemetry.begin``), or ``UNTRACED``."""
    trace: Untraced | None = request.get(TRACE_KEY)
    return UNTRACED if trace is None else trace


class RequestTrace(Untraced):
    """One request's span, filled in as the proxy goes; ``end`` hands it to the SDK's batch
    processor and records the metrics.

    The span is not the SDK's live ``Span``: its ids are drawn here, what the proxy learns is
    kept in a plain dict, and ``end`` makes the finished span a ``SpanRecord`` of plain
    values in one go (no SDK objects: not even a ``ReadableSpan`` with its events, whose
    building and encoding cost more than the rest of export together). The live span's start
    (sampler, id generator, locks) and its per-attribute validation cost more than the gate's
    whole handling of a short request; the exported span is the same.
    """

    def __init__(
        self,
        telemetry: GateTelemetry,
        headers: MutableMapping[str, str] | Any,
        lane: str,
        path: str,
        who: Who,
        received: float,
    ) -> None:
        self.telemetry = telemetry
        self.received = received
        self.operation = operation(path)
        self.parent: SpanContext | None = None
        self.tracestate = ""
        if "traceparent" in headers:
            # The client's trace: this span continues it, and follows its sampled flag.
            self.parent = _remote_parent(telemetry, headers)
        if self.parent is not None:
            self.trace_id = self.parent.trace_id
            self.recording = self.parent.trace_flags.sampled
            self.tracestate = self.parent.trace_state.to_header()
        else:
            self.trace_id = random.getrandbits(128) or 1
            self.recording = (self.trace_id & 0xFFFFFFFFFFFFFFFF) < telemetry.sample_bound
        self.span_id = random.getrandbits(64) or 1
        self.attrs: dict[str, Any] = {
            "gen_ai.operation.name": self.operation,
            "gpuwatch.lane": lane,
            "gpuwatch.class": who.klass,
            "gpuwatch.tenant": who.tenant,
        }
        self.lane = lane
        self.klass = who.klass
        self.model: str | None = None
        self._queued_at: float | None = None
        self._admitted_at: float | None = None
        self._first_at: float | None = None
        self.facts = AnswerFacts()
        self.refusal: str | None = None
        self.failed = False
        self.gone = False  # the client left mid-answer (a failed write, not a cancel)

    # -- what the proxy tells it ---------------------------------------------------------

    def read(self, req: InferenceRequest) -> None:
        """The request as read: its model (the span's name is ``{operation} {model}``)."""
        if not self.recording:
            return
        facts = req.facts
        model = facts.model if facts is not None else None
        if model is None:
            # A lane without caps parses no JSON: the model is looked up in the raw body.
            found = _MODEL.search(req.raw)
            model = found.group(1).decode("utf-8", "replace") if found else None
        if model:
            self.model = model
            self.attrs["gen_ai.request.model"] = model
        if req.stream:
            self.attrs["gpuwatch.stream"] = True

    def queueing(self) -> None:
        self._queued_at = time.monotonic()

    def admitted(self, queue_wait_s: float, clamps: tuple[str, ...]) -> None:
        self._queued_at = None
        self._admitted_at = time.monotonic()
        self.attrs["gpuwatch.queue_wait_s"] = queue_wait_s
        if clamps:
            self.attrs["gpuwatch.clamps"] = list(clamps)

    def refused(self, reason: str) -> None:
        """Refused (at the door, by a cap, from the queue) or shed, for ``reason``."""
        self.refusal = reason
        attrs = self.attrs
        attrs["gpuwatch.refusal.reason"] = reason
        attrs["gpuwatch.shed"] = reason in SHED
        attrs["error.type"] = reason
        if self._queued_at is not None:
            attrs["gpuwatch.queue_wait_s"] = time.monotonic() - self._queued_at
            self._queued_at = None

    def inject(self, headers: dict[str, str]) -> None:
        """The span's context into the upstream's headers (W3C Trace Context), replacing the
        client's own; a client's tracestate goes on as it came."""
        for name in list(headers):
            if name.lower() in ("traceparent", "tracestate"):
                del headers[name]
        flags = "01" if self.recording else "00"
        headers["traceparent"] = f"00-{self.trace_id:032x}-{self.span_id:016x}-{flags}"
        if self.tracestate:
            headers["tracestate"] = self.tracestate

    def upstream(self, status: int) -> None:
        self.attrs["gpuwatch.upstream.status_code"] = status

    def failed_upstream(self, kind: str) -> None:
        """The upstream failed this request (unreachable, silent, broke)."""
        self.failed = True
        self.attrs["error.type"] = kind

    def first_token(self) -> None:
        if self._first_at is None:
            self._first_at = time.monotonic()

    def answer(self, data: bytes | bytearray) -> None:
        """A piece of the answer as relayed (a whole body, or a stream's chunk)."""
        self.facts.feed(data)

    def left(self) -> None:
        self.gone = True

    # -- the end -------------------------------------------------------------------------

    def end(self, status: int | None) -> None:
        """The answer is out (``status``), or the client left (None)."""
        now = time.monotonic()
        if self.gone:
            status = None
        facts = self.facts
        telemetry = self.telemetry
        # The metrics' attributes: a handful of values each (the request's model, any string
        # a client sends, and the tenant stay on the span).
        key: Attributes = (
            ("gen_ai.operation.name", self.operation),
            ("gpuwatch.lane", self.lane),
            ("gpuwatch.class", self.klass),
        )
        if facts.model:
            key += (("gen_ai.response.model", facts.model),)
        outcome = _outcome(status, self.refusal, self.failed)
        if outcome != "ok":
            error = self.refusal or ("client_closed" if status is None else "error")
            key += (("error.type", error),)
        elif self._first_at is not None:
            telemetry.ttft.record(self._first_at - self.received, key)
        telemetry.duration.record(now - self.received, key)
        tokens = (("input", facts.input_tokens), ("output", facts.output_tokens))
        for kind, count in tokens:
            if count is not None:
                telemetry.tokens.record(count, (*key, ("gen_ai.token.type", kind)))
        if self.recording:
            self._fill(status, outcome, tokens, now)

    def _fill(
        self,
        status: int | None,
        outcome: str,
        tokens: tuple[tuple[str, int | None], ...],
        now: float,
    ) -> None:
        attrs, facts = self.attrs, self.facts
        if status is not None:
            attrs["http.response.status_code"] = status
        if facts.model:
            attrs["gen_ai.response.model"] = facts.model
        if facts.id:
            attrs["gen_ai.response.id"] = facts.id
        if facts.finish_reasons:
            attrs["gen_ai.response.finish_reasons"] = facts.finish_reasons
        for kind, count in tokens:
            if count is not None:
                attrs[f"gen_ai.usage.{kind}_tokens"] = count
        attrs["gpuwatch.outcome"] = outcome
        error = None
        if outcome != "ok":
            attrs.setdefault("error.type", "client_closed" if status is None else str(status))
            error = outcome
        # Monotonic readings to epoch ns, the clocks' offset read once for all of them.
        offset = epoch_offset_ns()
        events = [
            (name, int(at * 1e9) + offset)
            for name, at in (
                ("gpuwatch.admitted", self._admitted_at),
                ("gpuwatch.first_token", self._first_at),
                ("gpuwatch.end", now),
            )
            if at is not None
        ]
        parent = self.parent
        exporting = self.telemetry.exporting
        span = SpanRecord(
            f"{self.operation} {self.model}" if self.model else self.operation,
            self.trace_id,
            self.span_id,
            parent.span_id if parent is not None else None,
            parent is not None and parent.is_remote,
            self.tracestate,
            int(self.received * 1e9) + offset,
            int(now * 1e9) + offset,
            attrs,
            events,
            error,
        )
        exporting.emit(span)


def _remote_parent(telemetry: GateTelemetry, headers: Any) -> SpanContext | None:
    """The client's span context from its traceparent/tracestate; None when not valid."""
    from opentelemetry.trace import get_current_span

    context = get_current_span(telemetry.propagator.extract(headers)).get_span_context()
    return context if context.is_valid else None


def _outcome(status: int | None, refusal: str | None, failed: bool) -> str:
    if status is None:
        return "abandoned"  # the client left
    if refusal is not None:
        return "refused"
    if failed or status >= 500:
        return "failed"
    return "invalid" if status >= 400 else "ok"
