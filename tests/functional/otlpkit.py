"""Real OTLP receivers for tests, on 127.0.0.1, decoding what exporters send with the
``opentelemetry-proto`` messages and keeping each span and each metric point they got (no
collector binary is packaged for this machine). One store (``OtlpStore``: the decoding and what
was kept), two transports, as a collector has:

- ``OtlpReceiver``: OTLP/HTTP, aiohttp; ``ExportTraceServiceRequest`` on /v1/traces,
  ``ExportMetricsServiceRequest`` on /v1/metrics, protobuf as the OTLP/HTTP spec has it;
- ``GrpcOtlpReceiver``: OTLP/gRPC, a ``grpc.aio`` server with the collector's
  ``TraceService`` and ``MetricsService`` (their ``Export`` calls take the same messages).

``otlp_receiver(protocol)`` makes the one an ``[otlp] protocol`` talks to."""

from __future__ import annotations

import gzip
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
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
class OtlpStore(ABC):
    """What a receiver decoded, whatever the transport: the spans and metric points."""

    spans: list[Span] = field(default_factory=list)
    points: list[Point] = field(default_factory=list)
    url: str = ""  # the endpoint exporters are given, once started
    # False: decode and count spans, keep none (a bench's receiver, for hours of load).
    keep: bool = True
    received: int = 0  # spans decoded, kept or not
    # How export calls are answered, as a collector would: "ok"; "refuse" (bad data: HTTP
    # 400, gRPC INVALID_ARGUMENT, which exporters do not retry); "busy" (HTTP 503, gRPC
    # UNAVAILABLE, which they retry with backoff). Anything but "ok" keeps nothing.
    answer: str = "ok"
    calls: int = 0  # export calls, traces and metrics, however answered

    def take(self) -> bool:
        """An export call came: whether to keep it (the answer is "ok")."""
        self.calls += 1
        return self.answer == "ok"

    def add_traces(self, message: ExportTraceServiceRequest) -> None:
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

    def add_metrics(self, message: ExportMetricsServiceRequest) -> None:
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

    def of(self, service: str) -> list[Span]:
        return [s for s in self.spans if s.service == service]

    @abstractmethod
    async def start(self, port: int = 0) -> str:
        """Listen on 127.0.0.1 (0: a free port); the endpoint URL, also in ``url``."""

    @abstractmethod
    async def stop(self) -> None: ...


@dataclass
class OtlpReceiver(OtlpStore):
    """OTLP/HTTP (protobuf): the endpoint is the base URL, the signals' paths under it."""

    _runner: web.AppRunner | None = None

    async def start(self, port: int = 0) -> str:
        app = web.Application()
        traces = self._signal(
            ExportTraceServiceRequest, self.add_traces, ExportTraceServiceResponse
        )
        app.router.add_post("/v1/traces", traces)
        metrics = self._signal(
            ExportMetricsServiceRequest, self.add_metrics, ExportMetricsServiceResponse
        )
        app.router.add_post("/v1/metrics", metrics)
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

    def _signal(
        self, message: type[Any], add: Callable[[Any], None], answer: type[Any]
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        """The handler of one signal's path: its message decoded and stored, or refused."""

        async def handle(request: web.Request) -> web.Response:
            body = await self._body(request)
            if not self.take():
                return web.Response(status=400 if self.answer == "refuse" else 503)
            add(message.FromString(body))
            return web.Response(body=answer().SerializeToString(), content_type=PROTOBUF)

        return handle

    async def _count(self, _: web.Request) -> web.Response:
        return web.json_response({"spans": self.received})


@dataclass
class GrpcOtlpReceiver(OtlpStore):
    """OTLP/gRPC: a plaintext ``grpc.aio`` server; the endpoint is ``http://127.0.0.1:PORT``
    (the scheme says plaintext, as collectors' docs write it). Runs on the event loop that
    starts it."""

    _server: Any = None

    async def start(self, port: int = 0) -> str:
        # Imported here: the HTTP receiver alone (bench/otel.py's) needs no grpcio.
        import grpc
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

        # The generated service modules are untyped: a servicer class with one ``Export`` to
        # override, and a call to add it to a server.
        traces: Any = trace_service_pb2_grpc
        metrics: Any = metrics_service_pb2_grpc
        store = self

        async def refuse(context: Any) -> None:
            if not store.take():
                busy = store.answer == "busy"
                code = grpc.StatusCode.UNAVAILABLE if busy else grpc.StatusCode.INVALID_ARGUMENT
                await context.abort(code, store.answer)

        class Traces(traces.TraceServiceServicer):  # type: ignore[misc]
            async def Export(  # the service's method name
                self, request: ExportTraceServiceRequest, context: Any
            ) -> ExportTraceServiceResponse:
                await refuse(context)
                store.add_traces(request)
                return ExportTraceServiceResponse()

        class Metrics(metrics.MetricsServiceServicer):  # type: ignore[misc]
            async def Export(
                self, request: ExportMetricsServiceRequest, context: Any
            ) -> ExportMetricsServiceResponse:
                await refuse(context)
                store.add_metrics(request)
                return ExportMetricsServiceResponse()

        server = self._server = grpc.aio.server()
        traces.add_TraceServiceServicer_to_server(Traces(), server)
        metrics.add_MetricsServiceServicer_to_server(Metrics(), server)
        bound = server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        self.url = f"http://127.0.0.1:{bound}"
        return self.url

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(grace=None)


RECEIVERS: dict[str, type[OtlpStore]] = {"http/protobuf": OtlpReceiver, "grpc": GrpcOtlpReceiver}


def otlp_receiver(protocol: str) -> OtlpStore:
    """A receiver of the protocol an ``OtlpConfig`` names, not started."""
    return RECEIVERS[protocol]()
