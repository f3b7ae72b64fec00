"""A real OTLP/HTTP receiver for tests: aiohttp on 127.0.0.1, decoding what exporters send
(``ExportTraceServiceRequest`` on /v1/traces, ``ExportMetricsServiceRequest`` on /v1/metrics,
protobuf as the OTLP/HTTP spec has it) with the ``opentelemetry-proto`` messages, and keeping
each span and each metric point it got. No collector binary is packaged for this machine."""

from __future__ import annotations

import gzip
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

PROTOBUF = "application/x-protobuf"


def value_of(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [value_of(v) for v in value.array_value.values]
    if kind is None:
        return None
    return getattr(value, kind)


def attributes(pairs: Any) -> dict[str, Any]:
    return {kv.key: value_of(kv.value) for kv in pairs if isinstance(kv, KeyValue)}


@dataclass(frozen=True)
class Span:
    service: str
    name: str
    kind: int  # the proto's: 2 is SERVER, 1 INTERNAL
    trace_id: str
    span_id: str
    parent_id: str  # "" for a root span
    attributes: dict[str, Any]
    events: tuple[str, ...]
    status: int  # 0 unset, 1 ok, 2 error
    start_ns: int
    end_ns: int


@dataclass(frozen=True)
class Point:
    """One histogram point of a metric: its attributes, count and sum."""

    service: str
    metric: str
    unit: str
    attributes: dict[str, Any]
    count: int
    sum: float


@dataclass
class OtlpReceiver:
    spans: list[Span] = field(default_factory=list)
    points: list[Point] = field(default_factory=list)
    url: str = ""
    # False: decode and count spans, keep none (a bench's receiver, for hours of load).
    keep: bool = True
    received: int = 0  # spans decoded, kept or not
    _runner: web.AppRunner | None = None

    async def start(self, port: int = 0) -> str:
        app = web.Application()
        app.router.add_post("/v1/traces", self._traces)
        app.router.add_post("/v1/metrics", self._metrics)
        app.router.add_get("/count", self._count)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @staticmethod
    async def _body(request: web.Request) -> bytes:
        assert request.content_type == PROTOBUF, request.content_type
        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        return body

    async def _traces(self, request: web.Request) -> web.Response:
        message = ExportTraceServiceRequest.FromString(await self._body(request))
        for resource_spans in message.resource_spans:
            service = attributes(resource_spans.resource.attributes).get("service.name", "")
            for scope in resource_spans.scope_spans:
                self.received += len(scope.spans)
                for s in scope.spans if self.keep else ():
                    self.spans.append(
                        Span(
                            service,
                            s.name,
                            s.kind,
                            s.trace_id.hex(),
                            s.span_id.hex(),
                            s.parent_span_id.hex(),
                            attributes(s.attributes),
                            tuple(e.name for e in s.events),
                            s.status.code,
                            s.start_time_unix_nano,
                            s.end_time_unix_nano,
                        )
                    )
        answer = ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=answer, content_type=PROTOBUF)

    async def _count(self, _: web.Request) -> web.Response:
        return web.json_response({"spans": self.received})

    async def _metrics(self, request: web.Request) -> web.Response:
        message = ExportMetricsServiceRequest.FromString(await self._body(request))
        for resource_metrics in message.resource_metrics:
            service = attributes(resource_metrics.resource.attributes).get("service.name", "")
            for scope in resource_metrics.scope_metrics:
                for metric in scope.metrics:
                    for p in metric.histogram.data_points:
                        self.points.append(
                            Point(
                                service,
                                metric.name,
                                metric.unit,
                                attributes(p.attributes),
                                p.count,
                                p.sum,
                            )
                        )
        answer = ExportMetricsServiceResponse().SerializeToString()
        return web.Response(body=answer, content_type=PROTOBUF)

    def of(self, service: str) -> list[Span]:
        return [s for s in self.spans if s.service == service]
