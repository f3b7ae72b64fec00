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

import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from gpuwatch.errors import GpuwatchError

if TYPE_CHECKING:
    from opentelemetry.metrics import Meter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
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


def signal_url(endpoint: str, signal: str) -> str:
    """The OTLP/HTTP URL of one signal (``traces``, ``metrics``) under a base endpoint; an
    endpoint already naming a signal path loses it, so either form may be given."""
    base = endpoint.rstrip("/")
    for known in ("/v1/traces", "/v1/metrics"):
        if base.endswith(known):
            base = base[: -len(known)]
    return f"{base}/v1/{signal}"


def wall_ns(monotonic_s: float) -> int:
    """A ``time.monotonic()`` reading as epoch nanoseconds: spans carry wall times, the gate
    measures with the monotonic clock."""
    return time.time_ns() - int((time.monotonic() - monotonic_s) * 1e9)


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

    def skip(self) -> bool:
        return self.closing and self.down

    def saw(self, ok: bool, spans: int) -> None:
        with self._lock:
            if ok:
                if self.down:
                    self.down = False
                    log.info("OTLP export to %s works again", self.endpoint)
                return
            self.failures += 1
            self.dropped += spans
            if not self.down:
                self.down = True
                log.warning(
                    "OTLP export to %s failed: spans and metrics are dropped until it "
                    "answers (said once; requests are not affected)",
                    self.endpoint,
                )


class Exporting:
    """The SDK's tracer and meter providers exporting to one collector. Built only when export
    is on; ``shutdown`` (blocking, at most about ``timeout_s``) flushes what is held. A span
    made without the tracer (the gate's, ``gate/otel.py``) goes to ``processor.on_end``."""

    resource: Resource
    processor: BatchSpanProcessor

    def __init__(self, config: OtlpConfig, service_name: str) -> None:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

        assert config.endpoint is not None
        self.config = config
        self.outage = _Outage(config.endpoint)
        spans, metrics = _exporters(config, self.outage)
        for name in _NOISY:
            logging.getLogger(name).setLevel(logging.CRITICAL)
        resource = self.resource = Resource.create({"service.name": service_name})
        timeout_ms = int(config.timeout_s * 1000)
        processor = self.processor = BatchSpanProcessor(
            spans,
            max_queue_size=config.max_queue,
            schedule_delay_millis=config.schedule_delay_s * 1000,
            max_export_batch_size=min(512, config.max_queue),
            export_timeout_millis=timeout_ms,
        )
        self.tracer_provider: TracerProvider = TracerProvider(
            resource=resource, sampler=ParentBased(TraceIdRatioBased(config.sample_ratio))
        )
        self.tracer_provider.add_span_processor(processor)
        reader = PeriodicExportingMetricReader(
            metrics,
            export_interval_millis=config.metrics_interval_s * 1000,
            export_timeout_millis=timeout_ms,
        )
        self.meter_provider: MeterProvider = MeterProvider(
            resource=resource, metric_readers=[reader]
        )

    def tracer(self, name: str) -> Tracer:
        return self.tracer_provider.get_tracer(name)

    def meter(self, name: str) -> Meter:
        return self.meter_provider.get_meter(name)

    def shutdown(self) -> None:
        """Send what is held and stop the export threads; blocks (call it in a thread)."""
        self.outage.closing = True
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown(timeout_millis=int(self.config.timeout_s * 1000))


def _exporters(config: OtlpConfig, outage: _Outage) -> tuple[Any, Any]:
    """The span and metric exporters of the configured protocol, each telling ``outage`` how
    its exports went."""
    from opentelemetry.sdk.metrics.export import MetricExportResult, MetricsData
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExportResult

    assert config.endpoint is not None
    if config.protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
                OTLPMetricExporter,
            )
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter,
            )
        except ImportError:
            raise OtlpError(GRPC_MISSING) from None
        span_url = metric_url = config.endpoint
    else:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
            OTLPMetricExporter,
        )
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter,
        )

        span_url = signal_url(config.endpoint, "traces")
        metric_url = signal_url(config.endpoint, "metrics")

    class Spans(OTLPSpanExporter):  # type: ignore[misc]
        def export(self, spans: Any) -> SpanExportResult:
            batch: list[ReadableSpan] = list(spans)
            if outage.skip():
                return SpanExportResult.FAILURE
            result: SpanExportResult = super().export(batch)
            outage.saw(result is SpanExportResult.SUCCESS, len(batch))
            return result

    class Metrics(OTLPMetricExporter):  # type: ignore[misc]
        def export(
            self, metrics_data: MetricsData, timeout_millis: float | None = 10_000, **kwargs: Any
        ) -> MetricExportResult:
            if outage.skip():
                return MetricExportResult.FAILURE
            result: MetricExportResult = super().export(metrics_data, timeout_millis, **kwargs)
            outage.saw(result is MetricExportResult.SUCCESS, 0)
            return result

    return (
        Spans(endpoint=span_url, timeout=config.timeout_s),
        Metrics(endpoint=metric_url, timeout=config.timeout_s),
    )
