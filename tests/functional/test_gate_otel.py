"""OpenTelemetry export from the gate and the simulator, against a real OTLP receiver
(``otlpkit.py``): load through the gate to the simulator, then what the receiver decoded. The
tests marked ``BOTH`` run over each protocol, OTLP/HTTP and gRPC (``[otlp] protocol``), each
against a receiver of that transport. The batch processor runs on a short schedule (the
config's ``schedule_delay_s``); every check waits for its condition."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gpuwatch.aioserve import Served
from gpuwatch.gate.classes import FAIRNESS_HEADER, OBJECTIVE_HEADER, Fairness
from gpuwatch.gate.config import GateConfig
from gpuwatch.gate.limits import DEFAULT_LANES
from gpuwatch.gate.server import Gate, start_gate
from gpuwatch.otlp import PROTOCOLS, Exporting, OtlpConfig, check_endpoint, operation
from gpuwatch.sim.node import SimNode
from gpuwatch.sim.profiles import BGE_LARGE, SDXL, get_profile
from gpuwatch.sim.server import start_sim
from tests.functional.fleetkit import child
from tests.functional.otlpkit import OtlpReceiver, OtlpStore, Span, otlp_receiver
from tests.helpers import eventually, stop_process

PROFILE = get_profile("rtx4090-llama3-8b-awq")
CHAT = "/v1/chat/completions"
SERVER = 2  # the proto's SpanKind
FAIRNESS = Fairness(objectives={"interactive": "critical", "batch": "sheddable"})
# Over each protocol: the ``protocol`` fixture's value, for the stack and the receiver.
BOTH = pytest.mark.parametrize("protocol", PROTOCOLS)


def quick(endpoint: str, protocol: str = "http/protobuf") -> OtlpConfig:
    """Export on a short schedule, so a test waits milliseconds for what it checks."""
    return OtlpConfig(
        endpoint, protocol, schedule_delay_s=0.05, timeout_s=1.0, metrics_interval_s=0.2
    )


@pytest.fixture
def protocol() -> str:
    """OTLP/HTTP, unless a test is marked ``BOTH``."""
    return "http/protobuf"


@dataclass
class Stack:
    receiver: OtlpStore
    gate: Gate
    gate_url: str
    node: SimNode
    sim_url: str


@asynccontextmanager
async def gate_and_sim(
    tmp_path: Path,
    otlp: OtlpConfig,
    sim_otlp: OtlpConfig | None = None,
    *,
    embed: bool = False,
    image: bool = False,
) -> AsyncIterator[tuple[Gate, Served, SimNode, str]]:
    """The simulator (exporting as ``sim_otlp`` says; ``embed``, ``image``: its side work too)
    and the gate in front of it exporting as ``otlp`` says; the gate's server may be closed by
    the test already."""
    node, sim = await start_sim(
        PROFILE, time_scale=20.0, seed=3, model_name="llama", otlp=sim_otlp, embed=embed,
        image=image,
    )  # fmt: skip
    config = GateConfig(DEFAULT_LANES, fairness=FAIRNESS, otlp=otlp)
    gate, served = await start_gate(sim.url, config, state_file=tmp_path / "state.json")
    try:
        yield gate, served, node, sim.url
    finally:
        if served.runner.server is not None:
            await served.close()
        await sim.close()


@asynccontextmanager
async def running(
    tmp_path: Path, protocol: str, *, embed: bool = False, image: bool = False
) -> AsyncIterator[Stack]:
    """The simulator and the gate, both exporting to one receiver over ``protocol``."""
    collector = otlp_receiver(protocol)
    otlp = quick(await collector.start(), protocol)
    try:
        async with gate_and_sim(tmp_path, otlp, otlp, embed=embed, image=image) as started:
            gate, served, node, sim_url = started
            yield Stack(collector, gate, served.url, node, sim_url)
    finally:
        await collector.stop()


@pytest.fixture
async def stack(tmp_path: Path, protocol: str) -> AsyncIterator[Stack]:
    async with running(tmp_path, protocol) as started:
        yield started


def chat(stream: bool, max_tokens: int = 6) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "llama",
        "messages": [{"role": "user", "content": 'say "model": "not-this" please'}],
        "max_tokens": max_tokens,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


async def post(
    s: aiohttp.ClientSession, url: str, body: dict[str, Any], **headers: str
) -> tuple[int, dict[str, Any]]:
    """One request; a stream's facts (id, usage, finish reason) gathered from its events."""
    async with s.post(url, json=body, headers=headers) as r:
        if not body.get("stream") or r.status != 200:
            return r.status, await r.json()
        facts: dict[str, Any] = {}
        async for line in r.content:
            if line.startswith(b"data: {"):
                event = json.loads(line[6:])
                facts.setdefault("id", event["id"])
                if event.get("usage"):
                    facts["usage"] = event["usage"]
                for choice in event["choices"]:
                    if choice["finish_reason"]:
                        facts["choices"] = [choice]
        return r.status, facts


def ids(traceparent: str) -> tuple[str, str]:
    """A W3C traceparent's trace id and parent id; its flags say sampled."""
    version, trace_id, parent, flags = traceparent.split("-")
    assert version == "00" and int(flags, 16) & 1, traceparent
    return trace_id, parent


def gate_spans(receiver: OtlpStore) -> list[Span]:
    return receiver.of("gpuwatch-gate")


@BOTH
async def test_one_span_per_request_with_genai_and_gate_attributes(stack: Stack) -> None:
    url = f"{stack.gate_url}{CHAT}"
    headers = {FAIRNESS_HEADER: "team-a", OBJECTIVE_HEADER: "interactive"}
    async with aiohttp.ClientSession() as s:
        answers = await asyncio.gather(
            *(post(s, url, chat(stream=k % 2 == 0), **headers) for k in range(8))
        )
    assert all(status == 200 for status, _ in answers), answers
    await eventually(lambda: len(gate_spans(stack.receiver)) >= 8)
    spans = {span.attributes["gen_ai.response.id"]: span for span in gate_spans(stack.receiver)}
    assert len(gate_spans(stack.receiver)) == 8  # exactly one each
    assert set(spans) == {data["id"] for _, data in answers}
    for _, data in answers:
        span = spans[data["id"]]
        a = span.attributes
        assert span.kind == SERVER and span.name == "chat llama"
        assert a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.request.model"] == "llama"  # the body's key, not the content's
        assert a["gen_ai.response.model"] == stack.node.model_name
        assert a["gen_ai.usage.input_tokens"] == data["usage"]["prompt_tokens"]
        assert a["gen_ai.usage.output_tokens"] == data["usage"]["completion_tokens"]
        assert a["gen_ai.response.finish_reasons"] == [data["choices"][0]["finish_reason"]]
        assert (a["gpuwatch.lane"], a["gpuwatch.class"], a["gpuwatch.tenant"]) == (
            "chat",
            "critical",
            "team-a",
        )
        assert a["gpuwatch.queue_wait_s"] >= 0
        assert a["gpuwatch.upstream.status_code"] == 200
        assert a["http.response.status_code"] == 200
        assert a["gpuwatch.outcome"] == "ok" and span.status != 2
        assert span.events == ("gpuwatch.admitted", "gpuwatch.first_token", "gpuwatch.end")
        assert span.parent_id == ""  # no traceparent came in: the gate's span is the root


@BOTH
async def test_traceparent_reached_the_simulator_whose_spans_nest_under_the_gates(
    stack: Stack,
) -> None:
    async with aiohttp.ClientSession() as s:
        status, _ = await post(s, f"{stack.gate_url}{CHAT}", chat(stream=True))
    assert status == 200
    [gate] = await eventually(lambda: gate_spans(stack.receiver))
    # The simulator got the gate span's context (it keeps each traceparent it was sent).
    assert [ids(sent) for sent in stack.node.tracing.seen] == [(gate.trace_id, gate.span_id)]
    sim = await eventually(lambda: len(stack.receiver.of("gpuwatch-sim")) == 4)
    del sim
    by_name = {span.name: span for span in stack.receiver.of("gpuwatch-sim")}
    engine = by_name[f"chat {stack.node.model_name}"]
    assert (engine.trace_id, engine.parent_id, engine.kind) == (gate.trace_id, gate.span_id, SERVER)
    for phase in ("queue", "prefill", "decode"):
        assert by_name[phase].trace_id == gate.trace_id
        assert by_name[phase].parent_id == engine.span_id
    # The phases follow one another, inside the gate's span.
    assert by_name["queue"].end_ns <= by_name["prefill"].end_ns <= by_name["decode"].end_ns
    assert gate.start_ns <= engine.start_ns and engine.end_ns <= gate.end_ns


# The simulator's side work: path, body, model, the phase after ``queue``.
SIDE_WORK = (
    ("/v1/embeddings", {"model": BGE_LARGE.name, "input": ["one", "two three"]}, "embed"),
    (
        "/v1/images/generations",
        {"model": SDXL.name, "prompt": "a cat", "size": "256x256", "steps": 4},
        "generate",
    ),
)


@BOTH
async def test_the_simulators_embeddings_and_images_are_traced_under_the_gates_spans(
    tmp_path: Path, protocol: str
) -> None:
    """The side work as the text requests: the traceparent kept, a SERVER span named by the
    same operation as the gate's, under the gate's span, with its phases under it."""
    async with running(tmp_path, protocol, embed=True, image=True) as stack:
        answers = {}
        async with aiohttp.ClientSession() as s:
            for path, body, _ in SIDE_WORK:
                async with s.post(f"{stack.gate_url}{path}", json=body) as r:
                    assert r.status == 200, await r.text()
                    answers[path] = await r.json()
        await eventually(lambda: len(gate_spans(stack.receiver)) == 2)
        await eventually(lambda: len(stack.receiver.of("gpuwatch-sim")) == 6)
        sent = [ids(parent) for parent in stack.node.tracing.seen]
        for path, body, run in SIDE_WORK:
            name = f"{operation(path)} {body['model']}"  # as the gate names it
            [gate] = [span for span in gate_spans(stack.receiver) if span.name == name]
            assert (gate.trace_id, gate.span_id) in sent  # the context went upstream
            sim = stack.receiver.of("gpuwatch-sim")
            by_name = {span.name: span for span in sim if span.trace_id == gate.trace_id}
            assert set(by_name) == {name, "queue", run}
            engine, queue, ran = by_name[name], by_name["queue"], by_name[run]
            assert (engine.parent_id, engine.kind, engine.status) == (gate.span_id, SERVER, 0)
            a = engine.attributes
            assert a["gen_ai.operation.name"] == operation(path)
            assert a["gen_ai.request.model"] == a["gen_ai.response.model"] == body["model"]
            assert queue.parent_id == ran.parent_id == engine.span_id
            assert queue.end_ns == ran.start_ns  # the run starts where the queue ends
            assert gate.start_ns <= engine.start_ns and engine.end_ns <= gate.end_ns
        embedded = by_name_of(stack.receiver, f"embeddings {BGE_LARGE.name}").attributes
        usage = answers["/v1/embeddings"]["usage"]["prompt_tokens"]
        assert (embedded["gen_ai.usage.input_tokens"], embedded["gpuwatch.sim.inputs"]) == (
            usage,
            2,
        )
        drawn = by_name_of(stack.receiver, f"generations {SDXL.name}").attributes
        assert (drawn["gpuwatch.sim.images"], drawn["gpuwatch.sim.image.size"]) == (1, "256x256")
        assert drawn["gpuwatch.sim.image.steps"] == 4


async def test_an_image_request_whose_client_left_is_an_aborted_span(tmp_path: Path) -> None:
    """Straight to the simulator, under a client's trace: the client leaves while its image
    is drawn; the span says aborted, with the queue it passed and no ``generate``."""
    trace_id, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    body = {"model": SDXL.name, "prompt": "a cat", "steps": 500}  # minutes of simulated work
    async with running(tmp_path, "http/protobuf", image=True) as stack:
        images = stack.node.side.images
        assert images is not None
        async with aiohttp.ClientSession() as s:
            drawing = asyncio.create_task(
                s.post(
                    f"{stack.sim_url}/v1/images/generations",
                    json=body,
                    headers={"traceparent": f"00-{trace_id}-{parent}-01"},
                )
            )
            await eventually(lambda: images.running)
            drawing.cancel()  # the connection closes: the simulator's handler is cancelled
            with pytest.raises(asyncio.CancelledError):
                await drawing
        await eventually(lambda: len(stack.receiver.of("gpuwatch-sim")) == 2)
        assert list(stack.node.tracing.seen) == [f"00-{trace_id}-{parent}-01"]
        engine = by_name_of(stack.receiver, f"generations {SDXL.name}")
        assert (engine.trace_id, engine.parent_id) == (trace_id, parent)
        assert engine.status == 2 and engine.attributes["error.type"] == "aborted"
        assert by_name_of(stack.receiver, "queue").parent_id == engine.span_id


def by_name_of(receiver: OtlpStore, name: str) -> Span:
    """The simulator's one span of this name."""
    [span] = [span for span in receiver.of("gpuwatch-sim") if span.name == name]
    return span


async def test_a_clients_trace_is_continued(stack: Stack) -> None:
    trace_id, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    incoming = f"00-{trace_id}-{parent}-01"
    async with aiohttp.ClientSession() as s:
        status, _ = await post(
            s, f"{stack.gate_url}{CHAT}", chat(stream=False), traceparent=incoming,
            tracestate="vendor=abc",
        )  # fmt: skip
    assert status == 200
    [gate] = await eventually(lambda: gate_spans(stack.receiver))
    assert (gate.trace_id, gate.parent_id) == (trace_id, parent)
    # The upstream got the gate's span as its parent, in the client's trace, not the client's
    # own header passed through.
    [sent] = stack.node.tracing.seen
    assert ids(sent) == (trace_id, gate.span_id)


async def test_clamped_refused_and_invalid_requests_spans_say_so(stack: Stack) -> None:
    url = f"{stack.gate_url}{CHAT}"

    async def patch(s: aiohttp.ClientSession, body: dict[str, Any]) -> None:
        async with s.patch(f"{stack.gate_url}/admin/limits", json=body) as r:
            assert r.status == 200, await r.text()

    async with aiohttp.ClientSession() as s:
        await patch(s, {"lanes": {"chat": {"max_output_tokens": 4}}})
        status, _ = await post(s, url, chat(stream=False, max_tokens=6))
        assert status == 200  # clamped to 4
        async with s.post(url, data=b"[1, 2]", headers={"Content-Type": "application/json"}) as r:
            assert r.status == 400
        await patch(s, {"lanes": {"chat": {"output_tokens_policy": "reject"}}})
        status, data = await post(s, url, chat(stream=False, max_tokens=6))
        assert status == 400 and data["error"]["code"] == "max_tokens"
        await patch(s, {"paused": True})
        status, data = await post(s, url, chat(stream=False, max_tokens=2))
        assert status == 503 and data["error"]["code"] == "paused"
    spans = await eventually(
        lambda: len(gate_spans(stack.receiver)) == 4 and gate_spans(stack.receiver)
    )
    by = {span.attributes.get("gpuwatch.refusal.reason", "clamped"): span for span in spans}
    assert set(by) == {"clamped", "invalid_body", "max_tokens", "paused"}
    clamped = by["clamped"].attributes
    assert clamped["gpuwatch.clamps"] == ["max_tokens 6->4"]
    assert clamped["gen_ai.usage.output_tokens"] <= 4 and clamped["gpuwatch.outcome"] == "ok"
    for reason, status in (("invalid_body", 400), ("max_tokens", 400), ("paused", 503)):
        a = by[reason].attributes
        assert (a["error.type"], a["http.response.status_code"]) == (reason, status)
        assert a["gpuwatch.outcome"] == "refused" and a["gpuwatch.shed"] is False
        assert by[reason].status == 2  # ERROR
        assert "gpuwatch.admitted" not in by[reason].events
        assert "gpuwatch.upstream.status_code" not in a  # it never went upstream
    assert len(stack.node.tracing.seen) == 1  # only the clamped one went upstream


async def test_a_shed_requests_span_says_shed_with_its_queue_wait(stack: Stack) -> None:
    """A sheddable request waiting in a full queue, evicted for a critical one."""
    url = f"{stack.gate_url}{CHAT}"
    lane = stack.gate.lanes["chat"]
    async with aiohttp.ClientSession() as s:
        async with s.patch(
            f"{stack.gate_url}/admin/limits",
            json={"lanes": {"chat": {"max_inflight": 1, "max_queue": 1}}},
        ) as r:
            assert r.status == 200
        async with s.post(f"{stack.sim_url}/sim/stall", json={}) as r:
            assert r.status == 200  # the engine holds what it has: the lane stays full
        holder = asyncio.create_task(
            post(s, url, chat(stream=False), **{OBJECTIVE_HEADER: "interactive"})
        )
        await eventually(lambda: lane.inflight == 1)
        batch = asyncio.create_task(post(s, url, chat(stream=False), **{OBJECTIVE_HEADER: "batch"}))
        await eventually(lambda: len(lane.queue) == 1)
        critical = asyncio.create_task(
            post(s, url, chat(stream=False), **{OBJECTIVE_HEADER: "interactive"})
        )
        status, data = await batch
        assert status == 429 and data["error"]["code"] == "evicted"
        async with s.post(f"{stack.sim_url}/sim/resume") as r:
            assert r.status == 200
        assert [(await holder)[0], (await critical)[0]] == [200, 200]
    spans = await eventually(
        lambda: len(gate_spans(stack.receiver)) == 3 and gate_spans(stack.receiver)
    )
    [shed] = [span for span in spans if "gpuwatch.refusal.reason" in span.attributes]
    a = shed.attributes
    assert (a["gpuwatch.refusal.reason"], a["gpuwatch.shed"]) == ("evicted", True)
    assert a["gpuwatch.class"] == "sheddable" and a["http.response.status_code"] == 429
    assert a["gpuwatch.queue_wait_s"] > 0  # it waited, then was shed
    served = [span for span in spans if span is not shed]
    assert all(span.attributes["gpuwatch.class"] == "critical" for span in served)
    assert all(span.attributes["gpuwatch.outcome"] == "ok" for span in served)


@BOTH
async def test_genai_metrics_are_exported(stack: Stack) -> None:
    async with aiohttp.ClientSession() as s:
        for stream in (True, False, True):
            status, _ = await post(s, f"{stack.gate_url}{CHAT}", chat(stream=stream))
            assert status == 200

    def latest(name: str, **attrs: str) -> int:
        """The newest cumulative count of a gate histogram's point with these attributes."""
        counts = [
            p.count
            for p in stack.receiver.points
            if p.service == "gpuwatch-gate"
            and p.metric == name
            and all(p.attributes.get(k) == v for k, v in attrs.items())
        ]
        return counts[-1] if counts else 0

    await eventually(lambda: latest("gen_ai.server.request.duration") == 3)
    await eventually(lambda: latest("gen_ai.server.time_to_first_token") == 3)
    tokens = "gen_ai.client.token.usage"
    await eventually(lambda: latest(tokens, **{"gen_ai.token.type": "input"}) == 3)
    await eventually(lambda: latest(tokens, **{"gen_ai.token.type": "output"}) == 3)
    [point] = {
        (p.unit, p.attributes["gpuwatch.lane"], p.attributes["gen_ai.operation.name"])
        for p in stack.receiver.points
        if p.metric == "gen_ai.server.time_to_first_token"
    }
    assert point == ("s", "chat", "chat")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@BOTH
async def test_a_dead_collector_costs_requests_nothing_and_is_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, protocol: str
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    caplog.set_level(logging.INFO)
    async with gate_and_sim(tmp_path, quick(dead, protocol)) as (gate, served, node, _):
        assert gate.telemetry is not None
        outage = gate.telemetry.exporting.outage
        async with aiohttp.ClientSession() as s:
            for k in range(6):
                status, _ = await post(s, f"{served.url}{CHAT}", chat(stream=k % 2 == 0))
                assert status == 200
                # Several exports fail while requests go on: each batch is a failure.
                if k == 2:
                    await eventually(lambda: outage.failures >= 2, timeout=20)
        assert len(node.tracing.seen) == 6  # the spans' contexts still went upstream
    said = [r for r in caplog.records if "OTLP export to" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.WARNING], said
    assert dead in said[0].getMessage()
    # The SDK's own per-batch lines are not in the log.
    assert not [r for r in caplog.records if r.name.startswith("opentelemetry")]


@BOTH
async def test_a_collector_that_comes_back_gets_spans_again_and_the_log_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, protocol: str
) -> None:
    """Down, then started on its port: the exporter reconnects (gRPC: a new channel) and the
    next requests' spans arrive; the log has the outage and the recovery, a line each."""
    port = free_port()
    otlp = quick(f"http://127.0.0.1:{port}", protocol)
    collector = otlp_receiver(protocol)
    caplog.set_level(logging.INFO)
    try:
        async with gate_and_sim(tmp_path, otlp) as (gate, served, _, _):
            assert gate.telemetry is not None
            outage = gate.telemetry.exporting.outage
            async with aiohttp.ClientSession() as s:
                assert (await post(s, f"{served.url}{CHAT}", chat(stream=False)))[0] == 200
                await eventually(lambda: outage.down)
                await collector.start(port)

                async def arrived() -> bool:
                    assert (await post(s, f"{served.url}{CHAT}", chat(stream=False)))[0] == 200
                    return bool(gate_spans(collector))

                await eventually(arrived, timeout=20)
    finally:
        await collector.stop()
    said = [r.getMessage() for r in caplog.records if "OTLP export to" in r.getMessage()]
    assert len(said) == 2 and said[0].endswith("requests are not affected)"), said
    assert said[1] == f"OTLP export to {otlp.endpoint} works again"


@pytest.mark.parametrize("how", ["config", "flags"])
async def test_the_gate_and_simulator_processes_export_over_grpc(tmp_path: Path, how: str) -> None:
    """``gpuwatch gate`` with ``[otlp] protocol = "grpc"`` in its config (or
    ``--otlp-endpoint URL --otlp-protocol grpc``) and ``gpuwatch sim --otlp-protocol grpc`` as
    processes, a gRPC receiver here: one request's gate span, the simulator's under it, the
    gate's metrics; both leave cleanly (SIGTERM: exit 0)."""
    collector = otlp_receiver("grpc")
    endpoint = await collector.start()
    config = tmp_path / "gate.toml"
    export = f'endpoint = "{endpoint}"\nprotocol = "grpc"\n' if how == "config" else ""
    config.write_text(f"[otlp]\n{export}schedule_delay_s = 0.05\nmetrics_interval_s = 0.2\n")
    flags = ["--otlp-endpoint", endpoint, "--otlp-protocol", "grpc"] if how == "flags" else []
    procs: list[subprocess.Popen[str]] = []
    try:
        sim, sim_url = child(
            "sim", "--time-scale", "20", "--served-model-name", "llama",
            "--otlp-endpoint", endpoint, "--otlp-protocol", "grpc",
        )  # fmt: skip
        procs.append(sim)
        gate, gate_url = child(
            "gate", "--upstream", sim_url, "--config", str(config),
            "--state-file", str(tmp_path / "state.json"), *flags,
        )  # fmt: skip
        procs.append(gate)
        async with aiohttp.ClientSession() as s:
            status, _ = await post(s, f"{gate_url}{CHAT}", chat(stream=True))
        assert status == 200
        [span] = await eventually(lambda: gate_spans(collector))
        assert span.attributes["gpuwatch.outcome"] == "ok"
        await eventually(lambda: [p for p in collector.points if p.service == "gpuwatch-gate"])
        # The simulator's batch goes within its schedule (1 s), or at its exit at the latest.
        await asyncio.to_thread(stop_process, sim)
        engine = [x for x in collector.of("gpuwatch-sim") if x.kind == SERVER]
        assert [(x.trace_id, x.parent_id) for x in engine] == [(span.trace_id, span.span_id)]
    finally:
        for proc in reversed(procs):
            await asyncio.to_thread(stop_process, proc)  # the loop serves the receiver meanwhile
        await collector.stop()
    assert [proc.returncode for proc in procs] == [0, 0]


@pytest.mark.parametrize(
    "form", ["http://127.0.0.1:{port}", "http://localhost:{port}/", "http://127.0.0.1:{port}/v1"]
)
async def test_grpc_endpoint_forms(form: str) -> None:
    """The forms a gRPC endpoint is written in (a collector's docs write http://host:4317):
    a path is not part of a gRPC target and is dropped, a host name is resolved."""
    collector = otlp_receiver("grpc")
    port = int((await collector.start()).rsplit(":", 1)[1])
    exporting = Exporting(quick(check_endpoint(form.format(port=port)), "grpc"), "gpuwatch-test")
    try:
        exporting.tracer("t").start_span("hello").end()
        [span] = await eventually(lambda: collector.of("gpuwatch-test"))
        assert span.name == "hello"
    finally:
        await asyncio.to_thread(exporting.shutdown)
        await collector.stop()


@BOTH
async def test_shutdown_does_not_wait_for_a_collector_known_down(
    tmp_path: Path, protocol: str
) -> None:
    """A collector that refused an export (known down), then answers every export "busy",
    which exporters retry with backoff until their timeout (30 s here: 15 s of backoff).
    Closing the gate cuts the export under way short instead of waiting it out."""
    collector = otlp_receiver(protocol)
    otlp = replace(quick(await collector.start(), protocol), timeout_s=30.0)
    try:
        async with gate_and_sim(tmp_path, otlp) as (gate, served, _, _):
            assert gate.telemetry is not None
            outage = gate.telemetry.exporting.outage
            collector.answer = "refuse"
            async with aiohttp.ClientSession() as s:
                status, _ = await post(s, f"{served.url}{CHAT}", chat(stream=False))
                assert status == 200
                await eventually(lambda: outage.down)
                collector.answer = "busy"
                calls = collector.calls
                status, _ = await post(s, f"{served.url}{CHAT}", chat(stream=False))
                assert status == 200
            # An export was answered busy: its exporter now waits to retry (a second at least).
            await eventually(lambda: collector.calls > calls)
            closing = asyncio.create_task(served.close())
            await eventually(closing.done, timeout=5, message="the gate's close waited on it")
            await closing
    finally:
        await collector.stop()
    assert outage.failures >= 2 and not collector.spans  # nothing was kept, nothing hung


async def test_grpc_plaintext_follows_the_endpoints_scheme_not_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OTEL_EXPORTER_OTLP_INSECURE=false would have the SDK's gRPC exporter speak TLS to an
    http:// endpoint (a plaintext collector then gets nothing); the URL's scheme decides."""
    for name in ("", "_TRACES", "_METRICS"):
        monkeypatch.setenv(f"OTEL_EXPORTER_OTLP{name}_INSECURE", "false")
    async with running(tmp_path, "grpc") as stack:
        async with aiohttp.ClientSession() as s:
            status, _ = await post(s, f"{stack.gate_url}{CHAT}", chat(stream=False))
        assert status == 200
        await eventually(lambda: gate_spans(stack.receiver))
        await eventually(lambda: stack.receiver.of("gpuwatch-sim"))  # the simulator's too
        await eventually(lambda: stack.receiver.points)


async def test_a_trace_sampled_out_still_propagates_and_counts(tmp_path: Path) -> None:
    """sample_ratio 0: no span recorded, yet the context goes upstream (not sampled) and the
    request is in the metrics."""
    receiver = OtlpReceiver()
    otlp = replace(quick(await receiver.start()), sample_ratio=0.0)
    try:
        async with gate_and_sim(tmp_path, otlp) as (_, served, node, _):
            async with aiohttp.ClientSession() as s:
                status, _ = await post(s, f"{served.url}{CHAT}", chat(stream=True))
            assert status == 200
            await eventually(
                lambda: any(p.metric == "gen_ai.server.request.duration" for p in receiver.points)
            )
            [sent] = node.tracing.seen
            assert sent.endswith("-00")  # not sampled: the engine records nothing either
    finally:
        await receiver.stop()
    assert not gate_spans(receiver)  # and none came at shutdown's flush either
