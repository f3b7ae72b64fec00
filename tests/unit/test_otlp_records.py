"""The gate's spans encoded without the SDK (``otlp.encode_records``) are the message the SDK's
own OTLP encoder makes of the same spans: same ids, parent, flags, trace state, name, kind,
times, attributes (arrays included), events and status, under the same resource and scope.
The records come from the gate's real ``RequestTrace`` hooks, for the shapes a request takes:
answered, streamed, continuing a client's trace, clamped, refused from the queue, left."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any
from unittest.mock import patch

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from gpuwatch.gate.classes import Who
from gpuwatch.gate.limits import LaneLimits
from gpuwatch.gate.otel import GateTelemetry, RequestTrace
from gpuwatch.gate.request import read_request
from gpuwatch.otlp import OtlpConfig, SpanRecord, encode_records
from tests.functional.otlpkit import attributes

ANSWER = (
    b'{"id":"cmpl-9","model":"m-7b","choices":[{"text":"ok","finish_reason":"stop"}],'
    b'"usage":{"prompt_tokens":12,"completion_tokens":3}}'
)
PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def telemetry() -> Iterator[tuple[GateTelemetry, list[SpanRecord]]]:
    # Nothing listens on port 9, and nothing is sent: emitted records are kept here.
    gate = GateTelemetry(OtlpConfig("http://127.0.0.1:9", metrics_interval_s=3600))
    records: list[SpanRecord] = []
    gate.exporting.emit = records.append  # type: ignore[method-assign,assignment]
    yield gate, records
    gate.exporting.outage.closing = gate.exporting.outage.down = True
    gate.exporting.shutdown()


def request(
    gate: GateTelemetry, body: bytes, headers: dict[str, str] | None = None
) -> RequestTrace:
    who = Who(tenant="team-a", klass="critical")
    trace = RequestTrace(gate, headers or {}, "chat", "/v1/completions", who, time.monotonic())
    limits = LaneLimits()
    req = read_request(
        body, limits, lane="chat", path="/v1/completions", who=who, stream_matters=True
    )
    trace.read(req)
    trace.queueing()
    return trace


def make_spans(gate: GateTelemetry) -> None:
    answered = request(gate, b'{"model":"m","prompt":"hi"}')
    answered.admitted(0.004, ())
    answered.inject({})
    answered.upstream(200)
    answered.first_token()
    answered.answer(ANSWER)
    answered.end(200)

    streamed = request(
        gate,
        b'{"model":"m","prompt":"hi","stream":true,"max_tokens":9}',
        {"traceparent": PARENT, "tracestate": "vendor=v1,other=x"},
    )
    streamed.admitted(0.0, ("max_tokens", "temperature"))
    streamed.upstream(200)
    streamed.first_token()
    streamed.answer(ANSWER[:40])
    streamed.answer(ANSWER[40:])
    streamed.end(200)

    refused = request(gate, b'{"model":"m","prompt":"hi"}')
    refused.refused("evicted")
    refused.end(503)

    left = request(gate, b'{"prompt":"no model"}')
    left.admitted(0.0, ())
    left.upstream(200)
    left.left()
    left.end(200)


def test_the_direct_encoding_is_the_sdks(telemetry: tuple[GateTelemetry, list[SpanRecord]]) -> None:
    gate, records = telemetry
    make_spans(gate)
    assert len(records) == 4
    resource, scope = gate.exporting.resource, gate.exporting.scope
    ours = ExportTraceServiceRequest.FromString(encode_records(records, resource, scope))
    sdks = encode_spans([r.readable(resource, scope) for r in records])
    assert ours == sdks
    # And it says what the gate's spans promise (a broken record would fail both alike).
    spans = ours.resource_spans[0].scope_spans[0].spans
    answered, streamed, refused, left = spans
    assert attributes(ours.resource_spans[0].resource.attributes)["service.name"] == "gpuwatch-gate"
    assert answered.name == "text_completion m" and answered.kind == 2
    assert attributes(answered.attributes)["gen_ai.response.finish_reasons"] == ["stop"]
    assert attributes(answered.attributes)["gen_ai.usage.input_tokens"] == 12
    assert [e.name for e in answered.events] == [
        "gpuwatch.admitted",
        "gpuwatch.first_token",
        "gpuwatch.end",
    ]
    assert answered.start_time_unix_nano <= answered.events[0].time_unix_nano
    assert answered.events[-1].time_unix_nano == answered.end_time_unix_nano
    assert answered.parent_span_id == b"" and answered.flags == 0x100
    assert streamed.trace_id.hex() == PARENT.split("-")[1]
    assert streamed.parent_span_id.hex() == PARENT.split("-")[2]
    assert streamed.flags == 0x300  # the parent is remote
    assert streamed.trace_state == "vendor=v1,other=x"
    assert attributes(streamed.attributes)["gpuwatch.clamps"] == ["max_tokens", "temperature"]
    assert attributes(streamed.attributes)["gpuwatch.stream"] is True
    refused_attrs: dict[str, Any] = attributes(refused.attributes)
    assert refused_attrs["gpuwatch.refusal.reason"] == "evicted"
    assert refused_attrs["gpuwatch.shed"] is True
    assert refused_attrs["gpuwatch.queue_wait_s"] >= 0.0
    assert (refused.status.code, refused.status.message) == (2, "refused")
    assert (left.status.code, left.status.message) == (2, "abandoned")
    assert left.name == "text_completion"
    assert attributes(left.attributes)["error.type"] == "client_closed"


def test_an_attribute_of_another_type_is_encoded_as_the_sdk_does(
    telemetry: tuple[GateTelemetry, list[SpanRecord]],
) -> None:
    gate, _ = telemetry
    resource, scope = gate.exporting.resource, gate.exporting.scope
    record = SpanRecord(
        "x", 1, 2, None, False, "", 10, 20,
        {"f": 0.5, "b": False, "i": -3, "floats": [1.5, 2.5], "empty": ""},
        [], None,
    )  # fmt: skip
    ours = ExportTraceServiceRequest.FromString(encode_records([record], resource, scope))
    assert ours == encode_spans([record.readable(resource, scope)])


GRPC_TRACES = "opentelemetry.exporter.otlp.proto.grpc.trace_exporter"


def test_the_grpc_exporter_sends_the_direct_encoding_too() -> None:
    """Over gRPC the exporter asks its ``_translate_data`` for each attempt's message: the
    records' own (``records_message``), the SDK encoder's message, without the SDK encoder."""
    gate = GateTelemetry(OtlpConfig("http://127.0.0.1:9", "grpc", metrics_interval_s=3600))
    records: list[SpanRecord] = []
    gate.exporting.emit = records.append  # type: ignore[method-assign,assignment]
    try:
        make_spans(gate)
        resource, scope = gate.exporting.resource, gate.exporting.scope
        sdks = encode_spans([r.readable(resource, scope) for r in records])
        with patch(f"{GRPC_TRACES}.encode_spans", side_effect=AssertionError("SDK encoder")):
            sent = gate.exporting.span_exporter._translate_data(records)
        assert isinstance(sent, ExportTraceServiceRequest) and sent == sdks
        # A batch of the SDK's own spans (the simulator's) still takes the SDK's encoder.
        readable = [r.readable(resource, scope) for r in records]
        assert gate.exporting.span_exporter._translate_data(readable) == sdks
    finally:
        gate.exporting.outage.closing = gate.exporting.outage.down = True
        gate.exporting.shutdown()
