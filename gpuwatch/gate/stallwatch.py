"""A stalled upstream, seen by the gate, and shed: alive, answering, and no token moving.

The rule is gpuwatch/stall.py's, the one the dashboard shows: requests in the engine and no
progress for more than ``stall_after_s``. The gate reads it two ways:

- **metrics**: the upstream's own ``/metrics`` (``--upstream-metrics``, read by
  ``upstream_metrics.py``): each engine's progress counters and requests, judged engine by
  engine as the dashboard judges them. It sees every request on the engine, the gate's or not.
- **streams**: what the gate relays itself. Streamed answers in flight (headers in, body not
  ended) and the chunks they get: none of them getting a chunk for ``stall_after_s`` is a
  stall the gate sees with or without ``--upstream-metrics``. It is the only one it sees when
  the upstream is stopped outright (SIGSTOP, a hung process): then ``/metrics`` does not
  answer either, and a page that does not answer is no reading. Only streams count: a
  non-streamed answer is silent until it is whole, however well the engine works.

A fresh metrics reading decides; without one (no flag, or the page stopped answering) the
streams do. The page wins because it sees more: a long non-streamed answer is silence at the
gate while the engine's counters move, and an engine busy with other clients' work is not
stalled because the gate's own streams wait.

Which lanes: the ones that carry text generation (chat, completions, responses: the lanes
those paths route to), or ``--stall-lanes``. The progress read is the text engine's, and on a
node that also serves embeddings and images those run apart from it (other processes: TEI, a
diffusion server; the simulator's side work too), so they keep being admitted while text is
stuck. An operator whose one server does everything names every lane.

While stalled, those lanes refuse new requests at once (503 ``upstream_stalled`` with
``Retry-After``) and the requests waiting in their queues are refused too: they would wait for
nothing. Requests already upstream are left alone: the engine may resume and answer them, and
their clients hold their own timeouts. The start and the end of a stall are one audit line each
(actor ``stall``), a log line, and the ``gpuwatch_gate_upstream_stalled`` gauge.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from gpuwatch.adminapi import AuditEntry, LimitsPatch, StallReport, StallStatus
from gpuwatch.fmt import duration, num
from gpuwatch.gate.admission import AdmissionLane
from gpuwatch.gate.background import Background
from gpuwatch.gate.state import GateState
from gpuwatch.model import ScrapeResult
from gpuwatch.stall import DEFAULT_STALL_AFTER_S, StallDetector, progress_of

log = logging.getLogger("gpuwatch.gate")

ACTOR = "stall"
REASON = "upstream_stalled"
TICK_S = 0.5
# Paths of text generation: the lanes they route to are the ones a stalled engine sheds.
GENERATION_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/responses")
# A metrics reading older than this (the page stopped answering in time) no longer decides.
FRESH_S = 5.0

Signal = Literal["metrics", "streams"]


class StreamTally:
    """Streamed answers being relayed and the chunks they got: the proxy counts, the watch
    reads. Two integers: the cost per chunk is one addition."""

    def __init__(self) -> None:
        self.streams = 0
        self.chunks = 0

    def begin(self) -> None:
        self.streams += 1

    def chunk(self) -> None:
        self.chunks += 1

    def end(self) -> None:
        self.streams -= 1


def generation_lanes(
    lane_for: Callable[[str], str | None], prefixes: Mapping[str, Any]
) -> list[str]:
    """The lanes text generation goes through: where its paths route, and any lane whose own
    prefix lies under one of them."""
    out = {lane for path in GENERATION_PATHS if (lane := lane_for(path)) is not None}
    for name, lane_prefixes in prefixes.items():
        if any(p.startswith(GENERATION_PATHS) for p in lane_prefixes):
            out.add(name)
    return sorted(out)


@dataclass
class Stall:
    """A stall in progress: since when (monotonic and wall), seen by which signal."""

    since: float
    wall: float
    signal: Signal
    detail: str


class StallWatch:
    def __init__(
        self,
        state: GateState,
        lanes: Mapping[str, AdmissionLane],
        shed: Collection[str],
        tally: StreamTally,
        after_s: float | None = DEFAULT_STALL_AFTER_S,
        has_metrics: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.state = state
        self.has_metrics = has_metrics  # --upstream-metrics was given
        self.lanes = lanes
        self.shed_lanes = [name for name in lanes if name in shed]
        self.after_s = after_s or None
        self.clock = clock
        self.tally = tally  # the proxy's
        self.streams = StallDetector(self.after_s)
        self.engines: dict[tuple[str, str | None], StallDetector] = {}
        self.page_at: float | None = None  # the last good page from the upstream's /metrics
        self.stall: Stall | None = None
        self.last: StallReport | None = None  # the last stall that ended
        self._background = Background(self.run)

    @property
    def enabled(self) -> bool:
        return self.after_s is not None and bool(self.shed_lanes)

    # -- readings in ------------------------------------------------------------------------

    def on_page(self, result: ScrapeResult) -> None:
        """The upstream's /metrics, as ``upstream_metrics.py`` read it (every scrape)."""
        engines = [e for e in result.engines if e.dialect != "gate"]
        if result.error is not None or not engines:
            self.page_at = None  # no reading: the streams decide
            return
        now = self.clock()
        self.page_at = now
        seen = {(e.dialect, e.model) for e in engines}
        for key in set(self.engines) - seen:
            del self.engines[key]  # gone from the page: what it last showed is no evidence
        for e in engines:
            detector = self.engines.setdefault((e.dialect, e.model), StallDetector(self.after_s))
            detector.update(now, progress_of(e), e.running, e.waiting)

    def page_decides(self, now: float) -> bool:
        """A fresh page with an engine whose progress can be judged."""
        fresh = self.page_at is not None and now - self.page_at <= FRESH_S
        return fresh and any(d.judged for d in self.engines.values())

    def judge(self, now: float) -> tuple[Signal, StallDetector, str] | None:
        """The signal that sees a stall, its detector, and what it saw; None: no stall."""
        self.streams.update(now, (self.tally.chunks,), self.tally.streams)
        if self.page_decides(now):
            for (dialect, model), d in self.engines.items():
                if d.stalled:
                    what = f"{dialect} {model or ''}".rstrip()
                    load = f"{num(d.running)} running, {num(d.waiting)} waiting"
                    return "metrics", d, f"upstream metrics: {what} has {load}, no progress"
            return None
        if self.streams.stalled:
            flowing = f"{num(self.streams.running)} streamed answers in flight"
            return "streams", self.streams, f"streams: {flowing}, no byte"
        return None

    # -- once a tick ------------------------------------------------------------------------

    def tick(self) -> AuditEntry | None:
        """Judge, shed or admit again; the audit entry of a start or an end, else None."""
        if not self.enabled:
            return None
        now = self.clock()
        found = self.judge(now)
        if found is not None and self.stall is None:
            signal, detector, detail = found
            since = detector.since if detector.since is not None else now
            self.stall = Stall(since, time.time() - (now - since), signal, detail)
            message = (
                f"the upstream is stalled: no progress for over {self.after_s:g} s; retry later"
            )
            queued = 0
            for name in self.shed_lanes:
                lane = self.lanes[name]
                lane.shed = (REASON, message)
                queued += lane.refuse_queued(REASON, message)
            reason = (
                f"upstream stalled: no progress for {duration(now - since)} ({detail}); "
                f"shedding {', '.join(self.shed_lanes)}, {queued} queued refused"
            )
            return self._entry(True, reason)
        if found is None and self.stall is not None:
            lasted = now - self.stall.since
            self.last = replace(self.status_of(self.stall, now), ended=time.time())
            self.stall = None
            for name in self.shed_lanes:
                self.lanes[name].shed = None
            return self._entry(False, f"upstream moving again after {duration(lasted)} stalled")
        return None

    def _entry(self, shed: bool, reason: str) -> AuditEntry:
        return AuditEntry(
            time.time(),
            ACTOR,
            self.state.limits.version,
            LimitsPatch(
                lanes={name: {"shed": REASON if shed else None} for name in self.shed_lanes}
            ),
            controller=ACTOR,  # not a person's change: the limits are as they were
            reason=reason,
        )

    async def run(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            try:
                entry = self.tick()
            except Exception:  # the watch must never take the gate down
                log.exception("stall watch tick failed")
                continue
            if entry is not None:
                await self._audit(entry)

    async def _audit(self, entry: AuditEntry) -> None:
        """A start or an end: a log line, and an audit line (a full disk loses only that)."""
        log.warning("stall: %s", entry.reason)
        try:
            await self.state.record(entry)
        except OSError as exc:
            log.warning("stall: cannot write the audit line: %s", exc)

    def start(self) -> None:
        if self.enabled:
            self._background.start()

    async def stop(self) -> None:
        await self._background.stop()

    # -- what /admin/status and /metrics show -----------------------------------------------

    def stalled(self) -> float:
        return 1.0 if self.stall is not None else 0.0

    @staticmethod
    def status_of(stall: Stall, now: float) -> StallReport:
        return StallReport(
            round(stall.wall, 3), round(now - stall.since, 1), stall.signal, stall.detail
        )

    def status(self) -> StallStatus:
        """``/admin/status``'s ``stall``: the rule, the lanes it sheds, the stall now (null when
        none) and the last one that ended."""
        now = self.clock()
        return StallStatus(
            self.after_s,
            self.shed_lanes,
            # Which signal decides now: the upstream's page while it is fresh, else streams.
            "metrics" if self.page_decides(now) else "streams",
            self.has_metrics,
            self.stall is not None,
            None if self.stall is None else self.status_of(self.stall, now),
            self.last,
        )
