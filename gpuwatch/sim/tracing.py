"""The simulator's side of a trace: it keeps the ``traceparent`` each request came with (a
bounded record, for tests and the demo to check that the gate propagated it) and, with an OTLP
endpoint (``gpuwatch sim --otlp-endpoint``), exports the request's own spans as an engine
would: a SERVER span under the incoming context, with its phases under it (a text request's
``queue``, ``prefill`` and ``decode``; an embedding's ``queue`` and ``embed``; an image
request's ``queue`` and ``generate``), timed by the simulated engine (its clock mapped to the
wall's).

The OpenTelemetry SDK is imported only when export is on (``gpuwatch/otlp.py``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from gpuwatch.otlp import AttributeValue, Exporting, OtlpConfig, epoch_offset_ns

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

    from gpuwatch.sim.engine import Request

# A phase of a request's work, on the engine's clock: its name, begin and end (None: the
# request never got there).
Phase = tuple[str, float | None, float | None]
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
        """A text request's spans, once it ended (every time is known then); nothing without
        export. ``wall_at`` maps the engine's clock to ``time.monotonic()``'s."""
        if self._tracer is None:
            return
        start = req.arrival
        times = (req.last_token, req.first_token, req.first_scheduled, start)
        attributes: dict[str, AttributeValue] = {
            "gen_ai.usage.input_tokens": req.prompt_len,
            "gen_ai.usage.output_tokens": req.output,
            "gpuwatch.sim.preemptions": req.preemptions,
        }
        if req.finish is not None:
            attributes["gen_ai.response.finish_reasons"] = [req.finish.value]
        phases = (
            ("queue", start, req.first_scheduled),
            ("prefill", req.first_scheduled, req.first_token),
            ("decode", req.first_token, req.last_token),
        )
        self.served(
            headers, operation, model, start, max(t for t in times if t is not None), phases,
            attributes, aborted=req.finish is None, wall_at=wall_at,
        )  # fmt: skip

    def served(
        self,
        headers: Mapping[str, str],
        operation: str,
        model: str,
        start: float,
        end: float,
        phases: Sequence[Phase],
        attributes: Mapping[str, AttributeValue],
        *,
        aborted: bool,
        wall_at: Callable[[float], float],
    ) -> None:
        """A request's SERVER span, ``{operation} {model}`` from ``start`` to ``end`` (the
        engine's clock) under the context it came with, and a child for each phase it reached:
        the text engine's (``finished``) and the side work's (embeddings, images). An aborted
        request's span has status ERROR. Nothing without export."""
        if self._tracer is None:
            return
        from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        offset = epoch_offset_ns()

        def ns(at: float) -> int:  # the engine's clock to epoch ns
            return int(wall_at(at) * 1e9) + offset

        span = self._tracer.start_span(
            f"{operation} {model}",
            context=TraceContextTextMapPropagator().extract(headers),
            kind=SpanKind.SERVER,
            start_time=ns(start),
            attributes={
                "gen_ai.operation.name": operation,
                "gen_ai.request.model": model,
                "gen_ai.response.model": model,
                **attributes,
            },
        )
        if aborted:
            span.set_status(Status(StatusCode.ERROR, "aborted"))
            span.set_attribute("error.type", "aborted")
        inner = set_span_in_context(span)
        # Each phase ends where the next begins; a phase the request never reached is left out.
        for name, begin, until in phases:
            if begin is not None and until is not None:
                phase = self._tracer.start_span(name, context=inner, start_time=ns(begin))
                phase.end(end_time=ns(until))
        span.end(end_time=ns(end))

    def shutdown(self) -> None:
        """Blocking (call it in a thread): what is held goes out."""
        if self.exporting is not None:
            self.exporting.shutdown()
