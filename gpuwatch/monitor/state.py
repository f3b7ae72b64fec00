"""Everything the dashboard shows, as plain state: sources -> history -> health -> events.

No UI here. The TUI's pollers feed readings in (``apply_*``); widgets read the state out. The
benchmark and the tests drive it the same way, with no terminal.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from gpuwatch.adminapi import GateStatus, Goodput, LaneStatus, LatencyWindow, Limits
from gpuwatch.fmt import clip, duration, num
from gpuwatch.model import EngineSnapshot, GpuReading, HostSample, ScrapeResult
from gpuwatch.monitor.health import DEFAULT_SLO, HealthTracker, Level, Verdict, badge_text
from gpuwatch.series import CounterRate, EngineHistory, RingSeries, window_label
from gpuwatch.stall import StallDetector, progress_of

EventLevel = Literal["info", "warn", "bad", "ok"]
SourceState = Literal["WAITING", "UP", "DOWN", "STALE"]

STALE_AFTER_INTERVALS = 3
# The gate's refusals per second are a rate over this window (shown with it).
REFUSAL_WINDOW_S = 10.0
# The event a change of the badge writes.
BADGE_EVENT: dict[Level, EventLevel] = {
    "NO DATA": "warn",
    "OK": "ok",
    "TIGHT": "warn",
    "OVERLOADED": "bad",
}


class Tap(Protocol):
    """Whoever wants every reading the monitor is fed, at the clock it was fed at (a
    recorder): replaying the same calls at the same clock redraws the same screen."""

    def reading(self, kind: str, mono: float, wall: float, payload: Any) -> None: ...


@dataclass
class Event:
    time: float  # wall clock (time.time())
    level: EventLevel
    text: str


@dataclass
class SourceStatus:
    """UP, DOWN (no answer at all), STALE (no good answer for 3 intervals), or WAITING."""

    state: SourceState = "WAITING"
    reason: str | None = None
    last_ok: float | None = None
    last_error: str | None = None


def short_url(url: str) -> str:
    """``127.0.0.1:8000`` for ``http://127.0.0.1:8000/metrics``: an endpoint in a line."""
    return url.split("://", 1)[-1].removesuffix("/metrics")


@dataclass
class EngineView:
    snap: EngineSnapshot
    history: EngineHistory
    stall: StallDetector = field(default_factory=StallDetector)

    def name(self) -> str:
        """``vllm Llama-3.1-8B @ 127.0.0.1:8000``: which engine, in a line."""
        model = (self.snap.model or "").rsplit("/", 1)[-1]
        where = short_url(self.snap.source)
        return " ".join(p for p in (self.snap.dialect, model, "@", where) if p)

    def load_text(self) -> str:
        """``3 running, 2 waiting``: what a stalled engine holds."""
        return f"{num(self.stall.running)} running, {num(self.stall.waiting)} waiting"


@dataclass
class Endpoint:
    url: str
    interval_s: float
    status: SourceStatus = field(default_factory=SourceStatus)
    engines: dict[tuple[str, str | None], EngineView] = field(default_factory=dict)
    since: float = 0.0  # when polling began: an endpoint never useful goes STALE from here


@dataclass(frozen=True)
class UsersView:
    """The users' side of the node over a window: outcomes of the requests that ended, each
    lane's exact tails, and the worst lane's p99 TTFT (queue wait included)."""

    window: str
    totals: dict[str, int]  # ended, good, slow, refused, failed
    tails: dict[str, LatencyWindow]  # lane -> its requests and tails
    ttft_p99: float | None
    worst_lane: str | None
    # each lane's own goodput
    lane_goodput: dict[str, Goodput] = field(default_factory=dict)
    # lanes whose answers come in one piece while another streams: shown, not judged
    unjudged: frozenset[str] = frozenset()

    @property
    def goodput(self) -> float | None:
        ended = self.totals["ended"]
        return self.totals["good"] / ended if ended else None

    def misses(self) -> str:
        """``6% refused, 3% slow``: where the misses went."""
        ended = self.totals["ended"]
        if not ended:
            return ""
        parts = [
            f"{self.totals[k] / ended:.0%} {k}"
            for k in ("refused", "slow", "failed")
            if self.totals[k]
        ]
        return ", ".join(parts)


@dataclass
class GateView:
    url: str
    status: SourceStatus = field(default_factory=SourceStatus)
    limits: Limits | None = None
    lanes: Mapping[str, LaneStatus] = field(default_factory=dict)
    refusals: dict[tuple[str, str], CounterRate] = field(default_factory=dict)
    queued: RingSeries = field(default_factory=RingSeries)
    goodput: RingSeries = field(default_factory=RingSeries)
    # The worst lane's exact queue-wait p99, to tell how much it grew.
    queue_p99: RingSeries = field(default_factory=RingSeries)
    # The worst lane's exact TTFT p99 (queue wait included): the users' line of the TTFT chart.
    ttft_p99: RingSeries = field(default_factory=RingSeries)
    lower_seen: int | None = None  # an older version a poll answered, not yet believed

    def users(self, window: str = "1m") -> UsersView | None:
        """What users felt over ``window`` across the lanes, from the gate's exact records;
        None from a gate that does not keep them."""
        lanes = {name: data for name, data in self.lanes.items() if window in data.latency}
        if not lanes:
            return None
        tails = {
            name: data.latency[window]
            for name, data in lanes.items()
            if data.latency[window].requests
        }
        # The TTFT SLO is about tokens. A lane whose answers come in one piece (embeddings,
        # images: no gap between tokens in the window) while another lane streams has a "TTFT"
        # that is its whole generation and queue: it is shown, but neither its tails nor its
        # goodput are judged against a chat SLO. With no lane streaming, every lane is judged.
        # A lane is one of answers in one piece only when it gave answers: a token lane that
        # answered nothing in the window (all refused, all failed) is the worst, not left out.
        streaming = {n for n, t in tails.items() if t.itl.count}
        answered = {n for n, t in tails.items() if t.ttft.count}
        whole = (answered - streaming) if streaming else set()
        per_lane = {name: data.goodput.get(window) or Goodput() for name, data in lanes.items()}
        judged = [g for name, g in per_lane.items() if name not in whole]
        totals = {
            "ended": sum(g.ended for g in judged),
            "good": sum(g.good for g in judged),
            "slow": sum(g.slow for g in judged),
            "refused": sum(g.refused for g in judged),
            "failed": sum(g.failed for g in judged),
        }
        ranked = [(t.ttft.p99, n) for n, t in tails.items() if t.ttft.p99 and n not in whole]
        worst = max(ranked, default=None)
        return UsersView(
            window,
            totals,
            tails,
            worst[0] if worst else None,
            worst and worst[1],
            per_lane,
            frozenset(whole),
        )

    @property
    def refusal_window(self) -> str:
        return window_label(REFUSAL_WINDOW_S)

    def refusal_rate(self, lane: str, reason: str) -> float:
        counter = self.refusals.get((lane, reason))
        return (counter.rate() or 0.0) if counter else 0.0


class Monitor:
    def __init__(
        self,
        urls: list[str],
        interval_s: float = 1.0,
        slo: Mapping[str, float | None] | None = None,
        admin_url: str | None = None,
        window_s: float = 60.0,
        clock: Any = time.monotonic,
        wall: Any = time.time,
    ) -> None:
        self.clock, self.wall = clock, wall
        self.interval_s = interval_s
        self.window_s = window_s
        started = clock()
        self.endpoints = {url: Endpoint(url, interval_s, since=started) for url in urls}
        self.gpus: GpuReading | None = None
        self.gpu_status = SourceStatus()
        self.host: HostSample | None = None
        self.gate = GateView(admin_url) if admin_url else None
        self.events: deque[Event] = deque(maxlen=500)
        self.health = HealthTracker({**DEFAULT_SLO, **(slo or {})})
        # The same [slo] key judges the badge and runs each engine's stall detector.
        self.stall_after_s = self.health.slo.get("stall_after_s")
        self.verdict: Verdict = self.health.shown
        self.version = 0  # bumps on every change: widgets skip work when nothing moved
        self.started = started
        self.tap: Tap | None = None
        # The last tick (the badge's evaluation) as (clock, wall): the instant a screen drawn
        # after it shows, so that a replay moved to that recorded tick draws the same screen.
        self.ticked: tuple[float, float] | None = None
        # The SLO's error budget and burn rates as the users panel shows them (set each tick
        # by gpuwatch/alerts/node.py; recorded, so a replay shows what was shown live).
        self.slo_budget: list[str] = []

    def _tapped(self, kind: str, now: float, payload: Any, wall: float | None = None) -> None:
        if self.tap is not None:
            self.tap.reading(kind, now, self.wall() if wall is None else wall, payload)

    # -- events ---------------------------------------------------------------------------

    def event(self, level: EventLevel, text: str) -> None:
        event = Event(self.wall(), level, text)
        self._tapped("event", self.clock(), event)
        self.events.append(event)
        self.version += 1

    def _transition(
        self, status: SourceStatus, state: SourceState, reason: str | None, name: str
    ) -> None:
        if status.state == state:
            status.reason = reason
            return
        before = status.state
        status.state, status.reason = state, reason
        if state == "UP":
            if before != "WAITING":
                self.event("ok", f"{name} UP again")
        else:
            self.event("bad" if state == "DOWN" else "warn", f"{name} {state}: {reason}")

    def set_slo_budget(self, segments: list[str]) -> None:
        """The budget line now (set before ``evaluate``: a replay moved to a tick has it)."""
        if segments == self.slo_budget:
            return
        self._tapped("slo", self.clock(), segments)
        self.slo_budget = segments
        self.version += 1

    # -- readings in ----------------------------------------------------------------------

    def apply_scrape(self, result: ScrapeResult) -> None:
        ep = self.endpoints[result.source]
        now = self.clock()
        self._tapped("scrape", now, result)
        if result.error:
            ep.status.last_error = result.error
            if result.unreachable:
                self._transition(ep.status, "DOWN", result.error, ep.url)
            self.check_stale(now)
            return
        ep.status.last_ok = now
        self._transition(ep.status, "UP", None, ep.url)
        taken = now if result.at is None else result.at
        for snap in result.engines:
            key = (snap.dialect, snap.model)
            view = ep.engines.get(key)
            if view is None:
                view = ep.engines[key] = EngineView(
                    snap, EngineHistory(self.window_s), StallDetector(self.stall_after_s)
                )
            view.snap = snap
            for text in view.history.update(taken, snap):
                self.event("warn", text)
            self._stall(view, taken)
        self.version += 1

    def _stall(self, view: EngineView, taken: float) -> None:
        """Feed the engine's stall detector; its start and its end are events."""
        stall = view.stall
        since, was = stall.since, stall.stalled
        snap = view.snap
        if stall.update(taken, progress_of(snap), snap.running, snap.waiting) == was:
            return
        if stall.stalled:
            self.event(
                "bad",
                f"{view.name()} STALLED: no progress for {duration(taken - (stall.since or 0))} "
                f"with {view.load_text()}",
            )
        else:
            lasted = duration(taken - since) if since is not None else "a while"
            self.event("ok", f"{view.name()} moving again after {lasted} stalled")

    def apply_gpus(self, reading: GpuReading) -> None:
        now = self.clock()
        self._tapped("gpus", now, reading)
        if reading.error:
            self._transition(self.gpu_status, "DOWN", reading.error, "GPUs")
        else:
            self.gpu_status.last_ok = now
            self._transition(self.gpu_status, "UP", None, "GPUs")
            before = {g.index: g.error for g in (self.gpus.gpus if self.gpus else [])}
            for g in reading.gpus:
                if g.error and before.get(g.index) != g.error:
                    self.event("bad", g.error)
                elif not g.error and before.get(g.index):
                    self.event("ok", f"GPU {g.index} answers again")
        self.gpus = reading
        self.version += 1

    def apply_host(self, sample: HostSample) -> None:
        self._tapped("host", self.clock(), sample)
        self.host = sample
        self.version += 1

    def _adaptive_events(
        self, before: Mapping[str, LaneStatus], after: Mapping[str, LaneStatus]
    ) -> None:
        """An event per move of an adaptive lane's effective limit seen since the last poll
        (the controller's changes are not new versions of the limits: no other event shows
        them)."""
        for lane, data in after.items():
            new = data.adaptive.last_decision if data.adaptive else None
            was = before.get(lane)
            old = was.adaptive.last_decision if was and was.adaptive else None
            if new and new != old and was is not None:
                level: EventLevel = "warn" if new.direction == "down" else "info"
                self.event(
                    level,
                    f"gate {lane}: adaptive {new.from_} -> {new.to} in flight: "
                    f"{clip(new.reason, 80)}",
                )

    def apply_gate(
        self,
        limits: Limits | None,
        status: GateStatus | None,
        error: str | None = None,
        *,
        current: bool = False,
    ) -> None:
        """A gate's answer. ``current``: the limits come from a change's reply or a 409, so they
        are the gate's present limits whatever their version."""
        gate = self.gate
        if gate is None:
            return
        now = self.clock()
        self._tapped("gate", now, (limits, status, error, current))
        if error:
            self._transition(gate.status, "DOWN", error, f"gate {gate.url}")
            return
        was_down = gate.status.state == "DOWN"
        gate.status.last_ok = now
        self._transition(gate.status, "UP", None, f"gate {gate.url}")
        if limits is not None:
            self._accept_limits(gate, limits, current or was_down)
        if status is not None:
            self._adaptive_events(gate.lanes, status.lanes)
            gate.lanes = status.lanes
            queued = 0
            for lane, data in gate.lanes.items():
                queued += data.queued
                for reason, total in data.rejected_total.items():
                    counter = gate.refusals.setdefault(
                        (lane, reason), CounterRate(REFUSAL_WINDOW_S)
                    )
                    counter.update(now, total)
            gate.queued.append(now, queued)
            users = gate.users(window_label(self.window_s))
            if users is not None and users.goodput is not None:
                gate.goodput.append(now, users.goodput)
            if users is not None and users.worst_lane is not None:
                queue_p99 = users.tails[users.worst_lane].queue_wait.p99
                if queue_p99 is not None:
                    gate.queue_p99.append(now, queue_p99)
                if users.ttft_p99 is not None:
                    gate.ttft_p99.append(now, users.ttft_p99)
        self.version += 1

    def _accept_limits(self, gate: GateView, limits: Limits, current: bool) -> None:
        shown = gate.limits
        if shown is None or limits.version >= shown.version or current:
            gate.limits, gate.lower_seen = limits, None
            return
        # An older version from a poll is usually one that left before our own change landed:
        # not shown. Seen twice in a row, it is the gate's (restarted, or replaced): shown.
        if gate.lower_seen == limits.version:
            self.event(
                "warn",
                f"gate {gate.url} limits went back from v{shown.version} to "
                f"v{limits.version}: restarted without its state, or another gate",
            )
            gate.limits, gate.lower_seen = limits, None
        else:
            gate.lower_seen = limits.version

    # -- derived --------------------------------------------------------------------------

    def check_stale(self, now: float | None = None) -> None:
        if now is None:  # a tick's check (the ones inside apply_scrape replay with it)
            now = self.clock()
            self._tapped("stale", now, None)
        for ep in self.endpoints.values():
            if ep.status.state == "WAITING" and ep.status.last_error:
                # It answers, but never usefully (an HTTP error, a page of no known metrics).
                if now - ep.since > STALE_AFTER_INTERVALS * ep.interval_s:
                    self._transition(ep.status, "STALE", ep.status.last_error, ep.url)
                continue
            if ep.status.state != "UP" or ep.status.last_ok is None:
                continue
            age = now - ep.status.last_ok
            if age > STALE_AFTER_INTERVALS * ep.interval_s:
                reason = ep.status.last_error or f"no answer for {age:.0f} s"
                self._transition(ep.status, "STALE", reason, ep.url)

    def serving_engines(self) -> list[EngineView]:
        """Engines of the serving stacks (the gate's own metrics are not the node's health)."""
        return [
            v
            for ep in self.endpoints.values()
            if ep.status.state == "UP"
            for v in ep.engines.values()
            if v.snap.dialect != "gate"
        ]

    def signals(self) -> dict[str, float | None]:
        return self.judged()[0]

    def judged(self) -> tuple[dict[str, float | None], dict[str, str]]:
        """Each health signal's worst value, and what to add to its reason.

        The serving engines' own signals, and with a gate the users' side too: goodput (served
        within every bound over all that arrived) and the worst lane's exact p99 TTFT, queue
        wait included. Whichever is worse is the one judged.
        """
        out: dict[str, float | None] = {}
        details: dict[str, str] = {}

        def worst(key: str, value: float | None, detail: str = "") -> None:
            current = out.get(key)
            if value is not None and (current is None or value > current):
                out[key] = value
                details.pop(key, None)
                if detail:
                    details[key] = detail

        now = self.clock()
        for view in self.serving_engines():
            h, s = view.history, view.snap
            if view.stall.since is not None:
                # A busy engine: 0 until its detector says STALLED (the badge and the engine
                # line agree), then how long. An idle one is not judged.
                stalled = view.stall.stalled_for(now)
                worst("stall_after_s", stalled or 0.0, f"{view.name()}, {view.load_text()}")
            worst("ttft_p99_s", h.quantile("ttft", 0.99))
            worst("itl_p99_s", h.quantile("itl", 0.99))
            worst("kv_usage_high", s.kv_cache_usage)
            worst("waiting_high", s.waiting)
            worst("preemptions_per_min", h.per_minute("preemptions_total"))
        users = self.gate.users(window_label(self.window_s)) if self.gate else None
        if users is not None:
            worst("ttft_p99_s", users.ttft_p99, "users at the gate, queue wait included")
            itl = [t.itl.p99 for t in users.tails.values() if t.itl.p99]
            worst("itl_p99_s", max(itl, default=None), "users at the gate")
            if users.goodput is not None:
                out["goodput_min"] = users.goodput
                details["goodput_min"] = users.misses()
        return out, details

    def evaluate(self) -> Verdict:
        now = self.clock()
        self.ticked = (now, self.wall())
        self._tapped("evaluate", now, None, self.ticked[1])
        before = self.health.shown.level
        signals, details = self.judged()
        verdict, changed = self.health.update(now, signals, window_label(self.window_s), details)
        if verdict.level == "NO DATA" and not self.serving_engines():
            verdict = self.health.shown = Verdict("NO DATA", "no serving engine answers")
        if changed:
            if verdict.level == "NO DATA":
                what = "no data"
            elif before == "NO DATA":
                what = f"health {badge_text(verdict)}"
            else:
                what = "SLO recovered" if verdict.level == "OK" else f"SLO {badge_text(verdict)}"
            self.event(BADGE_EVENT[verdict.level], f"{what}: {verdict.reason}")
        if verdict != self.verdict:
            self.verdict = verdict
            self.version += 1
        return verdict
