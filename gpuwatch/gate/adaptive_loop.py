"""The adaptive controller's driver: once a second, per adaptive lane, measure, decide, apply.

The decisions are ``adaptive.py``'s; this module owns the effective limits. It is the one
place that hands limits to the admission lanes: ``apply(limits)`` runs on every change of the
configured limits (operators, the TUI, the planner) and the controller's own decisions use the
same path, so the effective limit is always within the configured bounds and a pause always
wins (a paused lane is handed ``paused`` whatever the controller thinks, and is not judged).

A controller change is not a new version of the limits (an operator's If-Match never conflicts
with the controller): it is a metric and an audit line with actor ``adaptive``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from gpuwatch.adminapi import (
    AdaptiveDecision,
    AdaptiveStatus,
    AuditEntry,
    EffectiveLimits,
    LimitsPatch,
)
from gpuwatch.gate.adaptive import (
    CONTROLLERS,
    KV_HIGH,
    MIN_INTERVAL_S,
    WINDOW_S,
    Controller,
    Decision,
    bounds,
    clamp_inflight,
    measure,
    tokens_for,
)
from gpuwatch.gate.admission import AdmissionLane
from gpuwatch.gate.background import Background
from gpuwatch.gate.latency import LaneLatency, Record
from gpuwatch.gate.limits import LaneLimits, Limits
from gpuwatch.gate.metrics import GateMetrics
from gpuwatch.gate.state import GateState
from gpuwatch.gate.upstream_metrics import UpstreamReading

log = logging.getLogger("gpuwatch.gate")

ACTOR = "adaptive"
# Refusals that mean "no slot in time": demand the in-flight limit turned away.
TURNED_AWAY = ("queue_full", "queue_deadline", "queue_timeout")
HISTORY = 120  # one effective limit per second: the dashboard's sparkline


@dataclass
class LaneControl:
    """One adaptive lane: its controller, effective limits and what it last decided."""

    controller: Controller
    inflight: int
    tokens: int | None
    last: AdaptiveDecision | None = None  # the last change: time, direction, from, to, reason
    history: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=HISTORY))
    preemptions_seen: float | None = None
    turned_away_seen: int = 0  # the lane's refusals for want of a slot, at the last tick
    configured: LaneLimits | None = None  # the lane's limits the last change left


class AdaptiveLoop:
    def __init__(
        self,
        state: GateState,
        lanes: Mapping[str, AdmissionLane],
        latency: Mapping[str, LaneLatency],
        metrics: GateMetrics,
        upstream: Callable[[], UpstreamReading | None] = lambda: None,
        controller: str = "aimd",
        clock: Callable[[], float] = time.monotonic,
        pace: float = 1.0,
        kv_high: float = KV_HIGH,
    ) -> None:
        self.state = state
        self.lanes = lanes
        self.latency = latency
        self.metrics = metrics
        self.upstream = upstream
        self.controller_name = controller
        self.make_controller = CONTROLLERS[controller]
        self.clock = clock
        self.pace = pace  # adaptive.py's timings x this (1/X before a simulator at X times)
        self.kv_high = kv_high  # upstream KV usage that cuts ([slo] kv_usage_high)
        self.control: dict[str, LaneControl] = {}
        self._background = Background(self.run)

    # -- the configured limits changed (or the gate starts) ------------------------------

    def apply(self, limits: Limits) -> None:
        """Hand every lane its limits: the configured ones, with the effective limit in place
        of the bounds on an adaptive lane (clamped into the bounds the change set), and the
        tenants' limits (first: ``set_limits`` admits waiters by them)."""
        now = self.clock()
        for name, lane in self.lanes.items():
            lane.tenants.limits = limits.tenants
            configured = limits.lanes[name]
            # ``_records`` reaches back this far: the record must hold it one by one.
            self.latency[name].keep_recent(
                (WINDOW_S + 5.0) * self.pace + configured.queue_timeout_s + 1.0
            )
            if configured.policy != "adaptive":
                self.control.pop(name, None)
                lane.set_limits(configured, limits.paused)
                continue
            ctl = self.control.get(name)
            if ctl is None:
                # Switched on: start from what is in flight now (the floor on a fresh gate) and
                # grow in slow start. Starting from the ceiling let an overload that came at
                # once fill the engine before the first TTFT was measured (issue 24).
                start = clamp_inflight(configured, lane.inflight)
                ctl = LaneControl(self.make_controller(now, self.pace, self.kv_high), start, None)
                self.control[name] = ctl
            elif ctl.configured != configured:
                ctl.controller.since = now  # new bounds or target: judge what comes after
            ctl.configured = configured
            ctl.inflight = clamp_inflight(configured, ctl.inflight)
            ctl.tokens = tokens_for(configured, ctl.inflight)
            lane.set_limits(self._effective(configured, ctl), limits.paused)

    @staticmethod
    def _effective(configured: LaneLimits, ctl: LaneControl) -> LaneLimits:
        return replace(configured, max_inflight=ctl.inflight, max_inflight_tokens=ctl.tokens)

    # -- once a second --------------------------------------------------------------------

    def _records(self, name: str, since: float, queue_timeout_s: float) -> list[Record]:
        """The lane's records that can have been admitted after ``since``: newest first, up to
        those that arrived before it by more than a queue timeout (and 5 s of body reading)."""
        horizon = since - queue_timeout_s - 5.0 * self.pace
        out = []
        for r in reversed(self.latency[name].records):
            if r.arrived < horizon:
                break
            out.append(r)
        return out

    @staticmethod
    def _turned_away(lane: AdmissionLane, ctl: LaneControl) -> int:
        total = sum(lane.rejected_total[r] for r in TURNED_AWAY)
        new, ctl.turned_away_seen = total - ctl.turned_away_seen, total
        return new

    def tick(self) -> list[tuple[str, Decision]]:
        """One round of decisions; returns the changes made (for the audit)."""
        now = self.clock()
        limits = self.state.limits
        reading = self.upstream()
        changes = []
        for name, ctl in self.control.items():
            ctl.history.append((now, ctl.inflight))
            configured = limits.lanes[name]
            lane = self.lanes[name]
            total = reading.preemptions_total if reading is not None else None
            if limits.paused:
                ctl.controller.note = "paused: the operator's pause wins"
                # Spent: preemptions under a pause must not cut the lane when it resumes.
                if total is not None:
                    ctl.preemptions_seen = total
                continue
            preempted = 0.0
            if total is not None and ctl.preemptions_seen is not None:
                # A counter that went back (the upstream restarted) counts from its new value.
                preempted = max(0.0, total - ctl.preemptions_seen)
            since = max(now - WINDOW_S * self.pace, ctl.controller.since)
            m = measure(
                self._records(name, since, configured.queue_timeout_s),
                now,
                since,
                len(lane.queue),
                preempted,
                reading.kv_usage if reading is not None else None,
                reading.waiting if reading is not None else None,
                self._turned_away(lane, ctl),
            )
            decision = ctl.controller.decide(now, configured, ctl.inflight, m)
            # Preemptions count from the last decision: a cut answers those seen before it.
            # At the floor no cut can answer them: spent too, or a lower floor set later would
            # be cut at once for preemptions long past.
            at_floor = ctl.inflight <= bounds(configured)[0]
            if total is not None and (
                decision is not None or ctl.preemptions_seen is None or at_floor
            ):
                ctl.preemptions_seen = total
            if decision is None or decision.inflight == ctl.inflight:
                continue
            ctl.last = AdaptiveDecision(
                time.time(),
                decision.direction,
                ctl.inflight,
                decision.inflight,
                ctl.tokens,
                decision.tokens,
                decision.reason,
            )
            ctl.inflight, ctl.tokens = decision.inflight, decision.tokens
            lane.set_limits(self._effective(configured, ctl), limits.paused)
            self.metrics.adaptive_decisions.labels(name, decision.direction).inc()
            changes.append((name, decision))
        return changes

    def audit_entries(self, changes: list[tuple[str, Decision]]) -> list[AuditEntry]:
        version = self.state.limits.version
        entries = []
        for name, decision in changes:
            last = self.control[name].last
            moved = {
                "effective_max_inflight": decision.inflight,
                "effective_max_inflight_tokens": decision.tokens,
            }
            entries.append(
                AuditEntry(
                    last.time if last else time.time(),
                    ACTOR,
                    version,  # not a new version: the configured limits are as they were
                    LimitsPatch(lanes={name: moved}),
                    controller=self.controller_name,  # not a person's change
                    reason=decision.reason,
                    before={
                        "max_inflight": last.from_ if last else None,
                        "max_inflight_tokens": last.tokens_from if last else None,
                    },
                )
            )
        return entries

    async def run(self) -> None:
        while True:
            await asyncio.sleep(MIN_INTERVAL_S * self.pace)
            try:
                changes = self.tick()
                entries = self.audit_entries(changes)
                for entry in entries:
                    log.info("adaptive: %s", entry.reason)
                for entry in entries:
                    try:
                        await self.state.record(entry)
                    except OSError as exc:
                        log.warning("adaptive: cannot write the audit line: %s", exc)
            except Exception:  # the controller must never take the gate down
                log.exception("adaptive controller tick failed")

    def start(self) -> None:
        self._background.start()

    async def stop(self) -> None:
        await self._background.stop()

    # -- what /admin/status shows ---------------------------------------------------------

    def status(self, name: str) -> AdaptiveStatus | None:
        ctl = self.control.get(name)
        if ctl is None:
            return None
        configured = self.state.limits.lanes[name]
        low, high = bounds(configured)
        now = self.clock()
        return AdaptiveStatus(
            ctl.inflight,
            ctl.tokens,
            low,
            high,
            configured.min_inflight_tokens,
            configured.max_inflight_tokens,
            configured.target_ttft_p99_s,
            ctl.last,
            ctl.controller.note,
            # (seconds ago, effective limit), oldest first: the sparkline
            tuple((round(now - t, 1), n) for t, n in ctl.history),
        )

    def effective(self) -> dict[str, EffectiveLimits]:
        """Every lane's limits in force (the configured ones on a static lane)."""
        return {
            name: EffectiveLimits(lane.limits.max_inflight, lane.limits.max_inflight_tokens)
            for name, lane in self.lanes.items()
        }
