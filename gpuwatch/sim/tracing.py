"""The simulator's side of a trace: it keeps the ``traceparent`` each request came with (a
bounded record, for tests and the demo to check that the gate propagated it) and, with an OTLP
endpoint (``gpuwatch sim --otlp-endpoint``), exports the request's own spans as an engine
would: a SERVER span under the incoming context, with ``queue``, ``prefill`` and ``decode``
under it, timed by the simulated engine (its clock mapped to the wall's).

The OpenTelemetry SDK is imported only when export is on (``gpuwatch/otlp.py``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from gpuwatch.otlp import Exporting, OtlpConfig, wall_ns

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

    from gpuwatch.sim.engine import Request

SEEN_MAX = 1024  # the traceparents kept, newest last
_HEADER_MAX = 512  # a longer header is hostile, not W3C: kept clipped


class SimTracing:
    def __init__(self, config: OtlpConfig | None = None) -> None:
        self.seen: deque[str] = deque(maxlen=SEEN_MAX)
        self.exporting = (
            Exporting(config, "gpuwatch-sim") if config is not None and config.enabled else None
        )
        self._tracer: Tracer | None = (
            self.exporting.tracer("gpuwatch.sim") if self.exporting is not None else None
        )

    def received(self, headers: Mapping[str, str]) -> None:
        parent = headers.get("traceparent")
        if parent:
            self.seen.append(parent[:_HEADER_MAX])

    def finished(
        self,
        headers: Mapping[str, str],
        req: Request,
        operation: str,
        model: str,
        wall_at: Callable[[float], float],
    ) -> None:
        """A request's spans, once it ended (every time is known then); nothing without export.
        ``wall_at`` maps the engine's clock to ``time.monotonic()``'s."""
        if self._tracer is None:
            return
        from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        parent = TraceContextTextMapPropagator().extract(headers)
        start = req.arrival
        times = (req.last_token, req.first_token, req.first_scheduled, start)
        end = max(t for t in times if t is not None)
        span = self._tracer.start_span(
            f"{operation} {model}",
            context=parent,
            kind=SpanKind.SERVER,
            start_time=wall_ns(wall_at(start)),
            attributes={
                "gen_ai.operation.name": operation,
                "gen_ai.request.model": model,
                "gen_ai.response.model": model,
                "gen_ai.usage.input_tokens": req.prompt_len,
                "gen_ai.usage.output_tokens": req.output,
                "gpuwatch.sim.preemptions": req.preemptions,
            },
        )
        if req.finish is not None:
            span.set_attribute("gen_ai.response.finish_reasons", [req.finish.value])
        else:
            span.set_status(Status(StatusCode.ERROR, "aborted"))
            span.set_attribute("error.type", "aborted")
        inner = set_span_in_context(span)
        # Each phase ends where the next begins; a phase the request never reached is left out.
        phases = (
            ("queue", start, req.first_scheduled),
            ("prefill", req.first_scheduled, req.first_token),
            ("decode", req.first_token, req.last_token),
        )
        for name, begin, until in phases:
            if begin is not None and until is not None:
                phase = self._tracer.start_span(
                    name, context=inner, start_time=wall_ns(wall_at(begin))
                )
                phase.end(end_time=wall_ns(wall_at(until)))
        span.end(end_time=wall_ns(wall_at(end)))

    def shutdown(self) -> None:
        """Blocking (call it in a thread): what is held goes out."""
        if self.exporting is not None:
            self.exporting.shutdown()
