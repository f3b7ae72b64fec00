"""The burn-rate alerts on the node: fed from a ``Monitor`` (what the dashboard, ``gpuwatch
watch`` and ``gpuwatch record`` poll), each change an event on the monitor, a bell, and a
notification to the configured receivers.

The SLIs are read from the same series the Prometheus rules query: each engine's TTFT
histogram at the same bucket bound, and the gate's TTFT histogram and refusals for goodput
(its /metrics scraped, its admin API polled). The caller ticks it before the monitor's
own evaluation, so that the tick's recorded budget line is in place when a replay reaches it.
"""

from __future__ import annotations

import dataclasses
import math
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuwatch.alerts.burn import Change, SliBurn, TierState
from gpuwatch.alerts.notify import Notifier
from gpuwatch.alerts.payload import RESEND_S, Alert, replay_hint
from gpuwatch.alerts.rules import BURN_ALERTS, Rules
from gpuwatch.alerts.sli import GATE_BOUNDS, bound_at_or_under, ttft_sources
from gpuwatch.alerts.slo import Objective, objectives, period_s, window_text, windows
from gpuwatch.config import AlertSettings, Slo
from gpuwatch.fmt import duration
from gpuwatch.model import Histogram
from gpuwatch.monitor.state import Monitor

TTFT_HISTOGRAMS = {s.dialect for s in ttft_sources()}
TTFT_BOUNDS = {s.dialect: s.bounds for s in ttft_sources()}


def under(hist: Histogram, bound: float | None) -> tuple[float, float] | None:
    """(requests at or under ``bound``, all requests) from a cumulative histogram; None when
    the histogram has no bucket at that bound (its stack exports other bounds)."""
    total = hist.count
    if total is None and hist.buckets and math.isinf(hist.buckets[-1][0]):
        total = hist.buckets[-1][1]
    if total is None:
        return None
    if bound is None:
        return total, total
    for le, count in hist.buckets:
        if math.isclose(le, bound, rel_tol=1e-9):
            return count, total
    return None


@dataclass
class NodeAlerts:
    monitor: Monitor
    slo: Slo
    settings: AlertSettings = field(default_factory=AlertSettings)
    notifier: Notifier | None = None
    bell: Callable[[], None] | None = None
    recording: str | None = None  # the file ``gpuwatch record`` writes: linked from alerts
    instance: str = ""
    burns: dict[str, SliBurn] = field(init=False)
    _fed: dict[str, float] = field(default_factory=dict)
    _active: dict[tuple[str, str, str], Alert] = field(default_factory=dict)
    _sent_at: float = 0.0
    # The bucket bounds each SLI was read at (the histogram's, at or under the target).
    _bounds: dict[str, set[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        p = period_s(self.settings)
        self.burns = {o.sli: SliBurn(o, p) for o in objectives(self.slo)}
        self.rules = Rules(self.slo, self.settings)

    # -- readings -------------------------------------------------------------------------

    def readings(self) -> tuple[float | None, dict[str, dict[object, tuple[float, float]]]]:
        """The newest scrape time and, per SLI, each series' (good, total)."""
        m = self.monitor
        newest: float | None = None
        out: dict[str, dict[object, tuple[float, float]]] = {sli: {} for sli in self.burns}
        for ep in m.endpoints.values():
            if ep.status.state != "UP" or ep.status.last_ok is None:
                continue
            newest = max(newest or ep.status.last_ok, ep.status.last_ok)
            for key, view in ep.engines.items():
                hist = view.snap.histograms.get("ttft")
                if hist is None:
                    continue
                dialect = view.snap.dialect
                if dialect == "gate" and "goodput" in self.burns:
                    bound = self._bound(self.burns["goodput"].objective, GATE_BOUNDS)
                    got = under(hist, bound)
                    if got is not None:
                        out["goodput"][(ep.url, key)] = got
                        self._read_at("goodput", bound)
                elif dialect in TTFT_HISTOGRAMS and "ttft" in self.burns:
                    bound = self._bound(self.burns["ttft"].objective, TTFT_BOUNDS[dialect])
                    got = under(hist, bound)
                    if got is not None and bound is not None:
                        out["ttft"][(ep.url, key)] = got
                        self._read_at("ttft", bound)
        gate = m.gate
        if out.get("goodput") and gate is not None and gate.status.state == "UP":
            # A refusal is a request that arrived and missed: counted in the total only.
            for lane, data in gate.lanes.items():
                refused = sum(data.rejected_total.values())
                out["goodput"][("refused", lane)] = (0.0, float(refused))
        elif "goodput" in out:
            out["goodput"] = {}  # goodput needs the gate's refusals too: not judged without
        return newest, out

    def _read_at(self, sli: str, bound: float | None) -> None:
        if bound is not None:
            self._bounds.setdefault(sli, set()).add(bound)

    @staticmethod
    def _bound(objective: Objective, bounds: Any) -> float | None:
        return None if objective.bound_s is None else bound_at_or_under(bounds, objective.bound_s)

    # -- the tick -------------------------------------------------------------------------

    def tick(self) -> list[str]:
        """Feed what was polled since the last tick, evaluate every tier, act on changes;
        return the events written (one per alert that started or stopped firing)."""
        m = self.monitor
        newest, readings = self.readings()
        for sli, burn in self.burns.items():
            if newest is not None and readings.get(sli) and newest != self._fed.get(sli):
                burn.feed(newest, readings[sli])
                self._fed[sli] = newest
        now = m.clock()
        changes = [c for burn in self.burns.values() for c in burn.evaluate(now)]
        wall = m.wall()
        texts = [self._act(change, wall - (now - change.at)) for change in changes]
        self.monitor.set_slo_budget(self.budget_segments())
        if self.notifier is not None and self._active and wall - self._sent_at >= RESEND_S:
            # Alertmanager forgets a firing alert it is not told of again: re-sent each minute.
            firing = [a for a in self._active.values() if a.ends_at is None]
            self.notifier.send_api(firing)
            self._sent_at = wall
        return texts

    def _act(self, change: Change, wall: float) -> str:
        o, s = change.objective, change.state
        name = BURN_ALERTS[o.sli]
        burn_long, burn_short = (self.burns[o.sli].burn(r) for r in (s.long_ratio, s.short_ratio))
        rates = f"burn {_x(burn_long)} over {s.long}, {_x(burn_short)} over {s.short}"
        key = (name, s.long, s.short)
        if change.firing:
            text = (
                f"ALERT {name} {s.tier.severity} ({s.long} & {s.short}): {o.what}: {rates} "
                f"(alert at {s.tier.factor:g}x)"
            )
            self.monitor.event("bad" if s.tier.severity == "critical" else "warn", text)
            alert = self._alert(o, s, wall)
            self._active[key] = alert
            if s.tier.severity == "critical" and self.settings.bell and self.bell is not None:
                self.bell()
        else:
            alert = self._active.pop(key) if key in self._active else self._alert(o, s, wall)
            alert.ends_at = wall
            text = f"RESOLVED {name} {s.tier.severity} ({s.long} & {s.short}): {rates}"
            self.monitor.event("ok", text)
        if self.notifier is not None:
            self.notifier.send([alert])
        return text

    def _alert(self, o: Objective, s: TierState, wall: float) -> Alert:
        name = BURN_ALERTS[o.sli]
        rule = next(
            r
            for r in self.rules.burn_alerts()
            if r["alert"] == name and r["labels"]["long"] == s.long
        )
        labels = {
            "alertname": name,
            **rule["labels"],
            "sli": o.sli,
            "instance": self.instance or "gpuwatch",
            "source": "gpuwatch-node",
        }
        burn = self.burns[o.sli].burn(s.short_ratio)
        annotations = {
            "summary": rule["annotations"]["summary"],
            "description": (
                f"{labels['instance']}: {o.what}: the error budget burns {_x(burn)} over "
                f"{s.short} (alert at {s.tier.factor:g}x over {s.long} and {s.short}); "
                "evaluated by gpuwatch on the node."
            ),
        }
        if "runbook_url" in rule["annotations"]:
            annotations["runbook_url"] = rule["annotations"]["runbook_url"]
        if self.recording:
            annotations["recording"] = replay_hint(self.recording, wall)
        return Alert(labels, annotations, wall)

    async def run(self) -> None:
        """The notifications' sender (returns at once with no receiver configured)."""
        if self.notifier is not None:
            await self.notifier.run()

    async def close(self) -> None:
        """At the end: resolved notifications for what still fires are not sent (the node is
        going away, not the trouble); queued ones get a bounded chance to go."""
        if self.notifier is not None:
            await self.notifier.flush()

    # -- what is shown --------------------------------------------------------------------

    def budget_segments(self) -> list[str]:
        """Per SLO: ``TTFT under 2s: 72% left of 30d (seen 2h)`` then the burn rate over each
        window the tiers read, ``burn 0.4x 5m, 1.1x 30m, 3.1x 1h, 1.2x 6h, 0.9x 3d``, and which
        tier fires; empty before any data."""
        out = []
        now = self.monitor.clock()
        for burn in self.burns.values():
            left = burn.budget_left(now)
            if left is None:
                continue
            firing = [s for s in burn.states if s.firing]
            bounds = sorted(self._bounds.get(burn.objective.sli, ()))
            # The target as configured, and the bucket bound it is read at (not the same).
            read_at = f" (read at {'/'.join(f'{b:g}s' for b in bounds)})" if bounds else ""
            out.append(
                f"{burn.objective.what}{read_at}: {left[0]:.0%} left of "
                f"{window_text(burn.period_s)} (seen {duration(left[1])})"
            )
            rates = ", ".join(
                f"{_x(burn.burn(burn.fine.error_ratio(now, w)))} {window_text(w)}"
                for w in windows(burn.period_s)
            )
            out.append(
                f"burn {rates}"
                + (f" FIRING {firing[0].tier.severity} ({firing[0].long})" if firing else "")
            )
        return out

    def to_json(self) -> dict[str, Any]:
        """Per SLI: the budget left, each tier's burn rates over its windows and whether it
        fires (``gpuwatch watch --json``)."""
        now = self.monitor.clock()
        out: dict[str, Any] = {}
        for sli, burn in self.burns.items():
            left = burn.budget_left(now)
            out[sli] = {
                "target": burn.objective.target,
                "period_s": burn.period_s,
                "budget_left": None if left is None else round(left[0], 6),
                "seen_s": None if left is None else round(left[1], 3),
                "tiers": [
                    {
                        "severity": s.tier.severity,
                        "factor": s.tier.factor,
                        "long": s.long,
                        "short": s.short,
                        f"burn_{s.long}": _round(burn.burn(s.long_ratio)),
                        f"burn_{s.short}": _round(burn.burn(s.short_ratio)),
                        "firing": s.firing,
                    }
                    for s in burn.states
                ],
            }
        return out


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}x"


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def slo_of(thresholds: Mapping[str, float | None]) -> Slo:
    """The ``[slo]`` back from its thresholds (None: switched off, 0)."""
    names = {f.name for f in dataclasses.fields(Slo)}
    return Slo(**{k: float(v or 0.0) for k, v in thresholds.items() if k in names})


def node_alerts(
    monitor: Monitor,
    settings: AlertSettings,
    *,
    report: Callable[[str], None] | None = None,
    bell: Callable[[], None] | None = None,
    recording: str | None = None,
) -> NodeAlerts:
    """The node's alerts on the monitor's own ``[slo]``; a receiver's failure is an event on
    the monitor (and told to ``report`` too)."""

    def problem(text: str) -> None:
        monitor.event("warn", text)
        if report is not None:
            report(text)

    notifier = Notifier(list(settings.webhooks), problem) if settings.webhooks else None
    return NodeAlerts(
        monitor,
        slo_of(monitor.health.slo),
        settings,
        notifier,
        bell,
        recording,
        socket.gethostname(),
    )
