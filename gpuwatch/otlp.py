"""OpenTelemetry export over OTLP, shared by the gate (``gate/otel.py``) and the simulator
(``sim/tracing.py``): the settings, their checks, and the SDK's providers behind one object.

The SDK is imported only here and in those two modules, and only when export is on
(``Exporting`` is built): ``gpuwatch --help``, ``snapshot`` and a gate without an endpoint never
load it. Export is off the request path: a span ends into the SDK's batch processor (a bounded
queue, drained by its own thread), and metrics are read by the periodic reader's thread. A
collector that does not answer costs its thread the export's timeout; spans past the queue's
bound are dropped, and the log says so once (``_Outage``), not once per batch.
"""

from __future__ import annotations

import bisect
import logging
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from gpuwatch.errors import GpuwatchError

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import Tracer

log = logging.getLogger("gpuwatch.otlp")

PROTOCOLS = ("http/protobuf", "grpc")
GRPC_MISSING = (
    "OTLP over gRPC needs the otlp-grpc extra: pip install 'gpuwatch[otlp-grpc]' "
    "(or use protocol http/protobuf)"
)
# The SDK's own loggers: each failed batch, retry and full queue is a line of theirs; a dead
# collector would fill the log. ``_Outage`` says it once instead.
_NOISY = ("opentelemetry.exporter.otlp", "opentelemetry.sdk._shared_internal")


class OtlpError(GpuwatchError):
    """Export asked for and not possible (the gRPC exporter is not installed)."""


@dataclass(frozen=True)
class OtlpConfig:
    # The collector's base URL (http://host:4318 for OTLP/HTTP, whose /v1/traces and
    # /v1/metrics are added; http://host:4317 for gRPC). None: export is off.
    endpoint: str | None = None
    protocol: str = "http/protobuf"
    # The batch processor sends what it holds this often (or sooner, at a full batch).
    schedule_delay_s: float = 1.0
    # Spans held while the collector is slow or away; past this, new spans are dropped.
    max_queue: int = 2048
    # One export's limit, its retries included; also the most a shutdown waits to flush.
    timeout_s: float = 10.0
    # Metrics are read and sent this often.
    metrics_interval_s: float = 30.0
    # The share of traces recorded (a client's sampled flag is followed where it sent one);
    # a request left out still carries its context upstream and counts in every metric.
    sample_ratio: float = 1.0

    @property
    def enabled(self) -> bool:
        return self.endpoint is not None


def check_endpoint(text: str) -> str:
    """An OTLP endpoint: an http(s) URL with a host; ValueError with the reason."""
    try:
        parts = urlsplit(text.strip())
        parts.port  # noqa: B018 (a bad port raises here)
    except ValueError:
        raise ValueError(f"not a URL: {text[:80]!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"must be an http:// or https:// URL with a host, got {text[:80]!r}")
    if parts.query or parts.fragment:
        raise ValueError(f"must have no query or fragment, got {text[:80]!r}")
    return text.strip().rstrip("/")


def endpoint_argument(text: str) -> str:
    """``--otlp-endpoint`` (the gate's, the simulator's): a usage error names what is wrong."""
    import argparse

    try:
        return check_endpoint(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def signal_url(endpoint: str, signal: str) -> str:
    """The OTLP/HTTP URL of one signal (``traces``, ``metrics``) under a base endpoint; an
    endpoint already naming a signal path loses it, so either form may be given."""
    base = endpoint.rstrip("/")
    for known in ("/v1/traces", "/v1/metrics"):
        if base.endswith(known):
            base = base[: -len(known)]
    return f"{base}/v1/{signal}"


# The GenAI operation of each path (gen_ai.operation.name), for the gate's spans and the
# simulator's alike; another path is named by its last part.
OPERATIONS = (
    ("/v1/chat/completions", "chat"),
    ("/v1/responses", "chat"),
    ("/v1/completions", "text_completion"),
    ("/v1/embeddings", "embeddings"),
)


def operation(path: str) -> str:
    for prefix, name in OPERATIONS:
        if path.startswith(prefix):
            return name
    return path.rsplit("/", 1)[-1] or path


class _EpochOffset:
    """What to add to ``time.monotonic()`` nanoseconds for epoch nanoseconds: spans carry
    wall times, the gate and the simulator measure with the monotonic clock. A pause between
    reading the two clocks (a thread switch, 5 ms of the GIL's) would skew the offset by as
    much, and put an engine's span outside the gate's: the offset is the tightest of a few
    reads, the wall clock's bracketed by the monotonic one, and kept for a second (the clocks
    drift apart by microseconds a second, under NTP's slewing). One offset for all the times
    of a span keeps their order, and its phases meet exactly."""

    KEEP_NS = 1_000_000_000
    READS = 3

    def __init__(self) -> None:
        self._held = (-self.KEEP_NS, 0)  # (monotonic ns when read, offset ns); one tuple, so
        # a reader on another thread sees a whole pair

    def __call__(self) -> int:
        read_at, offset = self._held
        if time.monotonic_ns() - read_at < self.KEEP_NS:
            return offset
        best_gap = None
        for _ in range(self.READS):
            before = time.monotonic_ns()
            wall = time.time_ns()
            after = time.monotonic_ns()
            if best_gap is None or after - before < best_gap:
                best_gap, offset = after - before, wall - (before + after) // 2
        self._held = (after, offset)
        return offset


epoch_offset_ns = _EpochOffset()


class _Outage:
    """Failed exports, said once: a line when export starts failing (spans and metrics are
    dropped while it does), one when it works again; nothing per batch. Called from the SDK's
    export threads."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self._lock = threading.Lock()
        self.down = False
        self.dropped = 0  # spans in batches that failed, since the start
        self.failures = 0  # export calls that failed, since the start
        # Shutting down: a collector already down is not waited for again (each batch
        # would cost the export's timeout, and the process is leaving).
        self.closing = False

        # When the newest export that worked began (monotonic s): one begun before it that
        # failed (it retried against a collector not yet back) is old news, not a new outage.
        self._worked_from = -math.inf

    def skip(self) -> bool:
        return self.closing and self.down

    def saw(self, ok: bool, spans: int, began: float) -> None:
        """An export's result; ``began``: when it began (``time.monotonic()``). The span and
        metric exporters report apart, each retrying on its own time."""
        with self._lock:
            if ok:
                self._worked_from = max(self._worked_from, began)
                if self.down:
                    self.down = False
                    log.info("OTLP export to %s works again", self.endpoint)
                return
            self.failures += 1
            self.dropped += spans
            if not self.down and began >= self._worked_from:
                self.down = True
                log.warning(
                    "OTLP export to %s failed: spans and metrics are dropped until it "
                    "answers (said once; requests are not affected)",
                    self.endpoint,
                )


# Attribute sets a histogram keeps apart; past this, new sets are dropped (as the SDK's
# default cardinality limit does): a metric's series stay bounded whatever clients send.
MAX_SERIES = 2000
Attributes = tuple[tuple[str, str], ...]


class _Cell:
    __slots__ = ("count", "counts", "max", "min", "sum")

    def __init__(self, buckets: int) -> None:
        self.counts = [0] * buckets
        self.count = 0
        self.sum = 0.0
        self.min = math.inf
        self.max = -math.inf


class Histogram:
    """A histogram aggregated here, cumulative since the start: per attribute set, the bucket
    counts, count, sum, min and max, sent as an OTLP histogram by ``Exporting``'s metric
    thread. ``record`` is a bisect and a few additions: the SDK's instrument cleans, sorts and
    hashes the attributes on every call, which cost the gate more per request than its span."""

    def __init__(self, name: str, unit: str, description: str, bounds: tuple[float, ...]) -> None:
        self.name, self.unit, self.description = name, unit, description
        self.bounds = bounds
        self._cells: dict[Attributes, _Cell] = {}
        self._lock = threading.Lock()  # the event loop records, the export thread reads
        self.dropped = 0  # values of attribute sets past MAX_SERIES

    def record(self, value: float, attributes: Attributes) -> None:
        # OTLP's explicit buckets are (previous bound, bound]: bisect_left finds it.
        i = bisect.bisect_left(self.bounds, value)
        with self._lock:
            cell = self._cells.get(attributes)
            if cell is None:
                if len(self._cells) >= MAX_SERIES:
                    self.dropped += 1
                    return
                cell = self._cells[attributes] = _Cell(len(self.bounds) + 1)
            cell.counts[i] += 1
            cell.count += 1
            cell.sum += value
            if value < cell.min:
                cell.min = value
            if value > cell.max:
                cell.max = value

    def snapshot(self) -> list[tuple[Attributes, list[int], int, float, float, float]]:
        with self._lock:
            return [
                (key, list(c.counts), c.count, c.sum, c.min, c.max)
                for key, c in self._cells.items()
            ]


# A span's attribute values as the gate's records hold them (OTLP's AnyValue kinds).
AttributeValue = (
    str | bool | int | float | Sequence[str] | Sequence[bool] | Sequence[int] | Sequence[float]
)
SERVER = 2  # OTLP's SPAN_KIND_SERVER
_HAS_IS_REMOTE, _IS_REMOTE = 0x100, 0x200  # OTLP's SpanFlags: the parent's is_remote, known
# The batch processor's on_end keeps a span only when ``span.context.trace_flags.sampled``:
# a record is made only for a span that is recorded, so every record says so.
_SAMPLED = SimpleNamespace(trace_flags=SimpleNamespace(sampled=True))
_KINDS = {str: "string_value", bool: "bool_value", int: "int_value", float: "double_value"}


class SpanRecord:
    """A finished SERVER span as plain values (the gate's, ``gate/otel.py``): made without the
    SDK's span objects, queued by the SDK's batch processor like a ``ReadableSpan``, and
    encoded in the export thread by ``encode_records`` straight into the OTLP message the
    SDK's encoder builds from the same span (``readable``): from dicts that protobuf's C
    backend turns into messages, where the SDK's encoder makes a Python message object per
    attribute, value and event through a few Python calls each (3.5x the CPU per span)."""

    __slots__ = (
        "attributes",
        "end_ns",
        "error",
        "events",
        "name",
        "parent_id",
        "parent_remote",
        "span_id",
        "start_ns",
        "trace_id",
        "trace_state",
    )
    context = _SAMPLED

    def __init__(
        self,
        name: str,
        trace_id: int,
        span_id: int,
        parent_id: int | None,
        parent_remote: bool,
        trace_state: str,
        start_ns: int,
        end_ns: int,
        attributes: dict[str, AttributeValue],
        events: Sequence[tuple[str, int]],
        error: str | None,
    ) -> None:
        self.name = name
        self.trace_id, self.span_id = trace_id, span_id
        self.parent_id, self.parent_remote = parent_id, parent_remote
        self.trace_state = trace_state  # the W3C header's form (k=v,k=v), "" for none
        self.start_ns, self.end_ns = start_ns, end_ns
        self.attributes = attributes
        self.events = events  # (name, epoch ns), in order; no attributes
        self.error = error  # the ERROR status's description; None: status unset

    def encoded(self) -> dict[str, Any]:
        """The OTLP ``Span`` message's fields, as ``opentelemetry-proto`` accepts them."""
        span: dict[str, Any] = {
            "trace_id": self.trace_id.to_bytes(16, "big"),
            "span_id": self.span_id.to_bytes(8, "big"),
            "name": self.name,
            "kind": SERVER,
            "start_time_unix_nano": self.start_ns,
            "end_time_unix_nano": self.end_ns,
            "attributes": _key_values(self.attributes),
            "events": [{"name": name, "time_unix_nano": at} for name, at in self.events],
            "status": {"code": 2, "message": self.error} if self.error is not None else {},
            "flags": _HAS_IS_REMOTE | _IS_REMOTE if self.parent_remote else _HAS_IS_REMOTE,
        }
        if self.parent_id is not None:
            span["parent_span_id"] = self.parent_id.to_bytes(8, "big")
        if self.trace_state:
            span["trace_state"] = self.trace_state
        return span

    def readable(self, resource: Resource, scope: InstrumentationScope) -> ReadableSpan:
        """The same span as the SDK's ``ReadableSpan``: for an exporter that encodes its own
        (gRPC), and for the tests that hold ``encode_records`` to the SDK's encoder."""
        from opentelemetry.sdk.trace import Event, ReadableSpan
        from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags
        from opentelemetry.trace.span import TraceState

        sampled = TraceFlags(TraceFlags.SAMPLED)
        state = TraceState.from_header([self.trace_state]) if self.trace_state else None
        parent = None
        if self.parent_id is not None:
            parent = SpanContext(self.trace_id, self.parent_id, self.parent_remote, sampled, state)
        return ReadableSpan(
            self.name,
            context=SpanContext(self.trace_id, self.span_id, False, sampled, state),
            parent=parent,
            resource=resource,
            attributes=self.attributes,
            events=[Event(name, timestamp=at) for name, at in self.events],
            kind=SpanKind.SERVER,
            status=Status(StatusCode.ERROR, self.error)
            if self.error is not None
            else Status(StatusCode.UNSET),
            start_time=self.start_ns,
            end_time=self.end_ns,
            instrumentation_scope=scope,
        )


def _value(value: Any) -> dict[str, Any]:
    kind = _KINDS.get(type(value))
    if kind is not None:
        return {kind: value}
    if isinstance(value, (list, tuple)):
        return {"array_value": {"values": [_value(v) for v in value]}}
    for cls, name in _KINDS.items():  # a subclass (an enum's str): bool before int matters
        if isinstance(value, cls):
            return {name: cls(value)}
    return {"string_value": str(value)}


def _key_values(attributes: Any) -> list[dict[str, Any]]:
    # A plain str, int, float or bool (most values) is looked up inline, without a call.
    return [
        {"key": key, "value": {kind: value} if (kind := _KINDS.get(type(value))) else _value(value)}
        for key, value in attributes.items()
    ]


def encode_records(
    records: Sequence[SpanRecord], resource: Resource, scope: InstrumentationScope
) -> bytes:
    """One ``ExportTraceServiceRequest`` of the records, serialized: the bytes the SDK's OTLP
    encoder makes of their ``readable`` spans."""
    data: bytes = records_message(records, resource, scope).SerializePartialToString()
    return data


def records_message(
    records: Sequence[SpanRecord], resource: Resource, scope: InstrumentationScope
) -> Any:
    """The ``ExportTraceServiceRequest`` of the records (``encode_records`` serializes it;
    the gRPC exporter sends the message)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    # The message's fields as dicts (protobuf's stubs type them as messages).
    scoped: Any = {
        "scope": {
            "name": scope.name,
            "version": scope.version or "",
            "attributes": _key_values(scope.attributes or {}),
        },
        "schema_url": scope.schema_url or "",
    }
    resourced: Any = {
        "resource": {"attributes": _key_values(resource.attributes)},
        "scope_spans": [scoped],
        "schema_url": resource.schema_url or "",
    }
    request = ExportTraceServiceRequest(resource_spans=[resourced])
    # Span by span: each one's dicts are garbage once it is added. A whole batch's dicts
    # alive at once (some 30 per span) would set off the cyclic GC, which then walks every
    # object of the process: that doubled the encoding's CPU.
    add = request.resource_spans[0].scope_spans[0].spans.add
    for record in records:
        add(**record.encoded())
    return request


class Exporting:
    """The SDK's batch span processor and OTLP exporters sending to one collector, and a
    thread sending this process's histograms every ``metrics_interval_s``. Built only when
    export is on; ``shutdown`` (blocking, at most about ``timeout_s``) sends what is held. A
    span made without the tracer (the gate's, ``gate/otel.py``) goes to ``processor.on_end``.
    """

    resource: Resource
    processor: BatchSpanProcessor

    def __init__(self, config: OtlpConfig, service_name: str) -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        assert config.endpoint is not None
        self.config = config
        self.outage = _Outage(config.endpoint)
        resource = self.resource = Resource.create({"service.name": service_name})
        self.scope = InstrumentationScope(service_name.replace("-", "."))
        spans, self._metric_exporter = _exporters(config, self.outage, resource, self.scope)
        self.span_exporter = spans
        for name in _NOISY:
            logging.getLogger(name).setLevel(logging.CRITICAL)
        processor = self.processor = BatchSpanProcessor(
            spans,
            max_queue_size=config.max_queue,
            schedule_delay_millis=config.schedule_delay_s * 1000,
            max_export_batch_size=min(512, config.max_queue),
            export_timeout_millis=int(config.timeout_s * 1000),
        )
        self.tracer_provider: TracerProvider = TracerProvider(
            resource=resource, sampler=ParentBased(TraceIdRatioBased(config.sample_ratio))
        )
        self.tracer_provider.add_span_processor(processor)
        self.histograms: list[Histogram] = []
        self._started_ns = time.time_ns()
        self._stop = threading.Event()
        self._pump = threading.Thread(target=self._send_metrics, name="otlp-metrics", daemon=True)
        self._pump.start()

    def tracer(self, name: str) -> Tracer:
        return self.tracer_provider.get_tracer(name)

    def emit(self, record: SpanRecord) -> None:
        """A finished span into the batch processor's queue (dropped when it is full)."""
        self.processor.on_end(record)  # type: ignore[arg-type]  # a ReadableSpan's stand-in

    def histogram(
        self, name: str, unit: str, description: str, bounds: tuple[float, ...]
    ) -> Histogram:
        histogram = Histogram(name, unit, description, bounds)
        self.histograms.append(histogram)
        return histogram

    def _send_metrics(self) -> None:
        while not self._stop.wait(self.config.metrics_interval_s):
            self.send_metrics()

    def send_metrics(self) -> None:
        """Every histogram's points as they stand, in one export (none: nothing is sent)."""
        from opentelemetry.sdk.metrics.export import (
            AggregationTemporality,
            HistogramDataPoint,
            Metric,
            MetricsData,
            ResourceMetrics,
            ScopeMetrics,
        )
        from opentelemetry.sdk.metrics.export import Histogram as HistogramData

        now = time.time_ns()
        metrics = []
        for h in self.histograms:
            points = [
                HistogramDataPoint(
                    dict(key), self._started_ns, now, count, total, counts, h.bounds, low, high
                )
                for key, counts, count, total, low, high in h.snapshot()
            ]
            if points:
                data = HistogramData(points, AggregationTemporality.CUMULATIVE)
                metrics.append(Metric(h.name, h.description, h.unit, data))
        if not metrics:
            return
        scoped = ScopeMetrics(self.scope, metrics, "")
        batch = MetricsData([ResourceMetrics(self.resource, [scoped], "")])
        self._metric_exporter.export(batch, timeout_millis=self.config.timeout_s * 1000)

    def shutdown(self) -> None:
        """Send what is held and stop the export threads; blocks (call it in a thread)."""
        self.outage.closing = True
        if self.outage.down:
            # Known down: an export under way is cut short too. It would otherwise retry with
            # backoff until its timeout (some 7 s of the default 10, both protocols), and the
            # batch processor waits for it. The exporters' own shutdown ends their backoff
            # wait and closes the channel (gRPC) or session (HTTP); what they are sent after
            # that is dropped by ``outage.skip`` before it reaches them.
            self.span_exporter.shutdown()
            self._metric_exporter.shutdown()
        self._stop.set()
        self._pump.join(self.config.timeout_s)
        self.tracer_provider.shutdown()
        self.send_metrics()  # the last figures
        self._metric_exporter.shutdown()


def _exporters(
    config: OtlpConfig, outage: _Outage, resource: Resource, scope: InstrumentationScope
) -> tuple[Any, Any]:
    """The span and metric exporters of the configured protocol, each telling ``outage`` how
    its exports went. A batch of ``SpanRecord`` over OTLP/HTTP is encoded by
    ``encode_records`` and sent by the exporter's own HTTP client (its retries, backoff,
    compression and headers); anything else goes through the SDK's encoder."""
    from opentelemetry.sdk.metrics.export import MetricExportResult, MetricsData
    from opentelemetry.sdk.trace.export import SpanExportResult

    assert config.endpoint is not None
    # Either protocol's exporter classes (typed apart by their packages; subclassed alike).
    span_base: Any
    metric_base: Any
    if config.protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
                OTLPMetricExporter as GrpcMetrics,
            )
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GrpcSpans,
            )
        except ImportError:
            raise OtlpError(GRPC_MISSING) from None
        span_base, metric_base = GrpcSpans, GrpcMetrics
        span_url = metric_url = config.endpoint
        # The endpoint's scheme says plaintext or TLS, as for OTLP/HTTP: left to the exporter,
        # OTEL_EXPORTER_OTLP_INSECURE (or its _TRACES_/_METRICS_ forms) in the environment
        # would override it, and a TLS handshake with a plaintext collector exports nothing.
        options: dict[str, Any] = {"insecure": urlsplit(config.endpoint).scheme == "http"}
    else:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
            OTLPMetricExporter as HttpMetrics,
        )
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpSpans,
        )

        span_base, metric_base = HttpSpans, HttpMetrics
        span_url = signal_url(config.endpoint, "traces")
        metric_url = signal_url(config.endpoint, "metrics")
        options = {}

    direct = config.protocol == "http/protobuf"

    class Spans(span_base):  # type: ignore[misc]
        def export(self, spans: Any) -> SpanExportResult:
            batch: list[ReadableSpan | SpanRecord] = list(spans)
            if outage.skip():
                return SpanExportResult.FAILURE
            began = time.monotonic()
            result = self._send(batch)
            outage.saw(result is SpanExportResult.SUCCESS, len(batch), began)
            return result

        def _send(self, batch: list[ReadableSpan | SpanRecord]) -> SpanExportResult:
            # The exporter sends serialized bytes through ``self._client`` (the SDK's
            # ``_OTLPHTTPClient``: retries with backoff, compression, headers, TLS). It is
            # private: no public call takes bytes, and ``export`` encodes with the SDK's
            # encoder, the cost this avoids. Rather than write a second HTTP client with its
            # own retry rules, the private one is used where it is what this SDK version has
            # (an ``export(bytes)`` whose answer has ``success``). The gRPC exporter asks
            # ``_translate_data`` (below) for each attempt's message. Otherwise (an SDK
            # without either) the records become ``ReadableSpan``s and take the public path.
            client = getattr(self, "_client", None)
            records = [s for s in batch if isinstance(s, SpanRecord)]
            if direct and len(records) == len(batch) and callable(getattr(client, "export", None)):
                sent = client.export(encode_records(records, resource, scope))  # type: ignore[union-attr]
                ok = getattr(sent, "success", False) is True
                return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE
            if not direct and callable(getattr(super(), "_translate_data", None)):
                sends: SpanExportResult = super().export(batch)
                return sends
            spans = [s.readable(resource, scope) if isinstance(s, SpanRecord) else s for s in batch]
            result: SpanExportResult = super().export(spans)
            return result

        def _translate_data(self, data: Sequence[ReadableSpan | SpanRecord]) -> Any:
            """The gRPC exporter's encoding hook (private, as ``_client``): a batch of
            records straight into the message, as ``encode_records`` does for HTTP."""
            batch = list(data)
            records = [s for s in batch if isinstance(s, SpanRecord)]
            if len(records) == len(batch):
                return records_message(records, resource, scope)
            spans = [s.readable(resource, scope) if isinstance(s, SpanRecord) else s for s in batch]
            return super()._translate_data(spans)

    class Metrics(metric_base):  # type: ignore[misc]
        def export(
            self, metrics_data: MetricsData, timeout_millis: float | None = 10_000, **kwargs: Any
        ) -> MetricExportResult:
            if outage.skip():
                return MetricExportResult.FAILURE
            began = time.monotonic()
            result: MetricExportResult = super().export(metrics_data, timeout_millis, **kwargs)
            outage.saw(result is MetricExportResult.SUCCESS, 0, began)
            return result

    return (
        Spans(endpoint=span_url, timeout=config.timeout_s, **options),
        Metrics(endpoint=metric_url, timeout=config.timeout_s, **options),
    )
