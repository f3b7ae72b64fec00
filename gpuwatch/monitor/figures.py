"""The numbers an engine shows, each with the window it was computed over.

One place computes them for every reader (the dashboard's engine panel, ``gpuwatch watch``),
so a number means the same wherever it appears, and its window travels with it: on screen as
a suffix (``p99 TTFT 2.4s 1m``), in JSON in the field's name (``ttft_p99_1m``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from gpuwatch.adminapi import Goodput
from gpuwatch.monitor.state import Endpoint, EngineView, Monitor, SourceState, UsersView
from gpuwatch.series import RECENT_RATE_WINDOW_S, window_label


def headroom_sessions(
    kv_tokens_used: float | None, kv_tokens_total: float | None, running: float | None
) -> int | None:
    """How many more sessions of the current mix the free KV holds, live:
    floor((total - used) / (used / running)). None unless all three are known, something is
    running and it holds KV (an idle engine has no "current mix" to measure)."""
    if kv_tokens_used is None or kv_tokens_total is None or running is None:
        return None
    if running <= 0 or kv_tokens_used <= 0 or kv_tokens_total <= 0:
        return None
    per_session = kv_tokens_used / running
    return max(0, math.floor((kv_tokens_total - kv_tokens_used) / per_session))


@dataclass(frozen=True)
class EngineFigures:
    source: str
    dialect: str
    model: str | None
    state: SourceState
    running: float | None
    waiting: float | None
    kv_cache_usage: float | None
    kv_tokens_used: float | None
    kv_tokens_total: float | None
    # Over the history's window (``window``): PromQL's histogram_quantile(rate(...[w])).
    ttft_p50: float | None
    ttft_p99: float | None
    itl_p99: float | None
    queue_p99: float | None
    prefix_hit_rate: float | None
    preemptions_per_min: float | None
    # Over the short token-rate window (``rate_window``): rate(...[10s]).
    prompt_tps: float | None
    gen_tps: float | None
    window_s: float
    rate_window_s: float
    # How long the engine has been STALLED (gpuwatch/stall.py): requests in it, and no
    # progress for longer than stall_after_s; None when it is not.
    stalled_s: float | None = None
    # Where the latency tails come from: "histogram" (the /metrics buckets, an estimate), or
    # the gate's own count of every request, for ``exact_lane`` (the lane that hurts most, the
    # one the badge and the users panel show): "exact" (its samples) or "sketch" (its log
    # buckets, each quantile within ``tails_rel_error``, when the window was too busy).
    tails_from: str = "histogram"
    exact_lane: str | None = None
    tails_rel_error: float | None = None

    @property
    def window(self) -> str:
        return window_label(self.window_s)

    @property
    def headroom_sessions(self) -> int | None:
        """``fits ~N more sessions of the current mix``: free KV tokens / tokens per running
        session, from this scrape (None when unknown)."""
        return headroom_sessions(self.kv_tokens_used, self.kv_tokens_total, self.running)

    @property
    def rate_window(self) -> str:
        return window_label(self.rate_window_s)

    def to_json(self) -> dict[str, Any]:
        """Plain values; each windowed one named with its window (``ttft_p99_1m``)."""
        w, r = self.window, self.rate_window
        return {
            "source": self.source,
            "dialect": self.dialect,
            "model": self.model,
            "state": self.state,
            "running": self.running,
            "waiting": self.waiting,
            "kv_cache_usage": self.kv_cache_usage,
            "kv_tokens_used": self.kv_tokens_used,
            "kv_tokens_total": self.kv_tokens_total,
            "headroom_sessions": self.headroom_sessions,
            "tails_from": self.tails_from,
            "exact_lane": self.exact_lane,
            "tails_rel_error": self.tails_rel_error,
            f"ttft_p50_{w}": self.ttft_p50,
            f"ttft_p99_{w}": self.ttft_p99,
            f"itl_p99_{w}": self.itl_p99,
            f"queue_p99_{w}": self.queue_p99,
            f"prefix_hit_rate_{w}": self.prefix_hit_rate,
            f"preemptions_per_min_{w}": self.preemptions_per_min,
            f"prompt_tps_{r}": self.prompt_tps,
            f"gen_tps_{r}": self.gen_tps,
            "stalled_for_s": None if self.stalled_s is None else round(self.stalled_s, 1),
        }


def engine_figures(
    endpoint: Endpoint,
    view: EngineView,
    users: UsersView | None = None,
    now: float | None = None,
) -> EngineFigures:
    """An engine's figures. The gate's own (dialect ``gate``) take the gate's exact tails from
    ``users`` when it has them for this window: one number per thing, the same the users
    panel, the TTFT breakdown and the badge show, never its histogram's estimate beside it.
    ``now`` (the monitor's clock): how long a stall has lasted up to it; by default up to the
    engine's last reading. An endpoint that no longer answers is DOWN or STALE, and what its
    engine does now is unknown: not shown as stalled."""
    s, h = view.snap, view.history
    stalled = view.stall.stalled_for(now) if endpoint.status.state == "UP" else None
    hit = h.prefix_hit_rate()
    figures = EngineFigures(
        source=endpoint.url,
        dialect=s.dialect,
        model=s.model,
        state=endpoint.status.state,
        running=s.running,
        waiting=s.waiting,
        kv_cache_usage=s.kv_cache_usage,
        kv_tokens_used=s.kv_tokens_used,
        kv_tokens_total=s.kv_tokens_total,
        ttft_p50=h.quantile("ttft", 0.5),
        ttft_p99=h.quantile("ttft", 0.99),
        itl_p99=h.quantile("itl", 0.99),
        queue_p99=h.quantile("queue", 0.99),
        prefix_hit_rate=hit if hit is not None else s.prefix_cache_hit_rate,
        preemptions_per_min=h.per_minute("preemptions_total"),
        prompt_tps=h.rate("prompt_tokens_total"),
        gen_tps=h.rate("generation_tokens_total"),
        window_s=h.window_s,
        rate_window_s=RECENT_RATE_WINDOW_S,
        stalled_s=stalled,
    )
    if s.dialect != "gate" or users is None or users.worst_lane is None:
        return figures
    if users.window != figures.window:
        return figures  # the gate keeps no exact record over this window
    tails = users.tails[users.worst_lane]
    return replace(
        figures,
        ttft_p50=tails.ttft.p50,
        ttft_p99=tails.ttft.p99,
        itl_p99=tails.itl.p99,
        queue_p99=tails.queue_wait.p99,
        tails_from="exact" if tails.exact else "sketch",
        exact_lane=users.worst_lane,
        tails_rel_error=tails.error,
    )


def users_now(monitor: Monitor) -> UsersView | None:
    """The gate's exact users' view over the monitor's window (None without one)."""
    return monitor.gate.users(window_label(monitor.window_s)) if monitor.gate else None


def users_json(users: UsersView) -> dict[str, Any]:
    """The users' side for scripts (``watch --json``'s ``users``): goodput overall and per lane
    and each lane's exact tails, as the badge judges them and the users panel shows them; every
    windowed key named with its window."""
    w = users.window
    lanes: dict[str, Any] = {}
    for name in sorted(set(users.lane_goodput) | set(users.tails)):
        g = users.lane_goodput.get(name) or Goodput()
        t = users.tails.get(name)  # none for a lane that ended nothing in the window
        lanes[name] = {
            "judged": name not in users.unjudged,
            f"goodput_{w}": g.ratio,
            f"ended_{w}": g.ended,
            f"good_{w}": g.good,
            f"slow_{w}": g.slow,
            f"refused_{w}": g.refused,
            f"failed_{w}": g.failed,
            f"requests_{w}": t.requests if t else 0,
            # Whether the tails below are the samples (else within rel_error of them).
            f"exact_{w}": t.exact if t else None,
            f"rel_error_{w}": t.rel_error if t else None,
            f"ttft_{w}": t.ttft.to_json() if t else None,
            f"queue_wait_{w}": t.queue_wait.to_json() if t else None,
            f"itl_{w}": t.itl.to_json() if t else None,
            f"e2e_{w}": t.e2e.to_json() if t else None,
        }
    return {
        "window": w,
        "measured_at": "gate",
        f"goodput_{w}": users.goodput,
        **{f"{k}_{w}": v for k, v in users.totals.items()},
        "worst_lane": users.worst_lane,
        f"ttft_p99_{w}": users.ttft_p99,
        "lanes": lanes,
    }


def all_figures(monitor: Monitor) -> list[EngineFigures]:
    """Every engine's figures, in the order the panel and ``watch`` list them."""
    users, now = users_now(monitor), monitor.clock()
    return [
        engine_figures(ep, view, users, now)
        for ep in monitor.endpoints.values()
        for view in ep.engines.values()
    ]


@dataclass(frozen=True)
class Part:
    """One part of the time to first token: its p99 now, and how much it grew over a window."""

    name: str
    p99: float | None
    grew_s: float | None


@dataclass(frozen=True)
class TtftBreakdown:
    """ "Is it queueing or prefill?": the users' TTFT p99 and the p99 of each part of it.

    The users' TTFT is the gate's (queue wait included) when a gate is watched, else the
    engine's. Each part is its own p99 over the same window, so they need not add up.
    """

    ttft_p99: float | None
    measured_at: str  # "gate" or "engine"
    exact_lane: str | None  # the gate's exact numbers for this lane (the worst), if it has them
    parts: list[Part]
    decode_p99: float | None
    window: str
    # The stated relative error of the gate's numbers for exact_lane; None: exact.
    tails_rel_error: float | None = None

    def to_json(self) -> dict[str, Any]:
        w = self.window
        grew = self.grew()
        return {
            f"ttft_p99_{w}": self.ttft_p99,
            "measured_at": self.measured_at,
            "exact_lane": self.exact_lane,
            "tails_rel_error": self.tails_rel_error,
            "parts": {
                p.name.replace(" ", "_"): {f"p99_{w}": p.p99, f"grew_in_{w}": p.grew_s}
                for p in self.parts
            },
            f"decode_p99_{w}": self.decode_p99,
            "grew_most": grew.name if grew else None,
        }

    def grew(self, at_least_s: float = 0.05) -> Part | None:
        """The part that grew most over the last window, if any grew by ``at_least_s``."""
        grown = [p for p in self.parts if p.grew_s is not None and p.grew_s >= at_least_s]
        return max(grown, key=lambda p: p.grew_s or 0.0) if grown else None


def _part(name: str, view: EngineView | None, kind: str, now: float) -> Part | None:
    if view is None:
        return None
    h = view.history
    p99 = h.quantile(kind, 0.99)
    if p99 is None and kind not in h.latency:
        return None  # this stack does not export it
    series = h.series.get(f"{kind}_p99")
    before = series.at(now - h.window_s) if series is not None else None
    grew = p99 - before.v if p99 is not None and before is not None else None
    return Part(name, p99, grew)


def ttft_breakdown(monitor: Monitor) -> TtftBreakdown | None:
    """The breakdown for the main serving engine (and the gate in front of it, if watched)."""
    engines = monitor.serving_engines()
    engine = engines[0] if engines else None
    gate = next(
        (
            v
            for ep in monitor.endpoints.values()
            if ep.status.state == "UP"
            for v in ep.engines.values()
            if v.snap.dialect == "gate"
        ),
        None,
    )
    if engine is None and gate is None:
        return None
    now = monitor.clock()
    users = users_now(monitor)
    gate_queue = _part("gate queue", gate, "queue", now)
    exact_ttft = error = None
    if users is not None and users.worst_lane is not None:
        # The gate's exact numbers for the lane that hurts most beat its histogram estimate.
        tails = users.tails[users.worst_lane]
        exact_ttft, error = users.ttft_p99, tails.error
        queue_p99 = tails.queue_wait.p99
        assert monitor.gate is not None
        before = monitor.gate.queue_p99.at(now - monitor.window_s)
        grew = queue_p99 - before.v if queue_p99 is not None and before is not None else None
        gate_queue = Part("gate queue", queue_p99, grew)
    parts = [
        part
        for part in (
            gate_queue,
            _part("engine queue", engine, "queue", now),
            _part("prefill", engine, "prefill", now),
        )
        if part is not None
    ]
    felt = gate or engine
    assert felt is not None
    return TtftBreakdown(
        ttft_p99=exact_ttft if exact_ttft is not None else felt.history.quantile("ttft", 0.99),
        measured_at="gate" if gate is not None or exact_ttft is not None else "engine",
        exact_lane=users.worst_lane if exact_ttft is not None and users else None,
        parts=parts,
        decode_p99=engine.history.quantile("decode", 0.99) if engine else None,
        window=window_label(felt.history.window_s),
        tails_rel_error=error,
    )
