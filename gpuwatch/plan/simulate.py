"""One probe in simulated time (pure, no wall clock, no sockets): the simulator's engine
(``gpuwatch.sim.engine.Engine``) with the gate's own chat lane in front, fed the sweep's
traffic.

The gate is the gate: its ``AdmissionLane`` (gate/admission.py) driven on the probe's simulated
clock (gate/offline.py), with the lane's ``LaneLimits`` as the real gate would hold them. So
every limit the lane enforces is simulated by the code that enforces it: in flight and its
token budget, the queue's length, its timeout and its time bound, and the fair queue's order.
Each request reserves what the proxy would reserve (gate/caps.py ``check_text``: prompt +
output bound, after the prompt and output caps). No limits (None) is a server without a gate:
everything goes straight into the engine's own queue.

Order within a step, as on a live gate: requests that arrive while the engine runs a step are
seen by the gate at their arrival time (the lane as it was), waits that run out during it are
refused, and then come the step's tokens and ends at the step's end (first tokens, released
tickets, the queue moving on); what is admitted starts at the next step.

Per request: TTFT from its arrival at the gate to its first token (queue wait included, as the
user feels it), its largest gap between tokens, and its status. Arrivals stop at the probe's
duration; requests still in flight then are run to their end, so every arrived request counts.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

from gpuwatch.gate.admission import AdmissionLane
from gpuwatch.gate.caps import CapRefused, check_text
from gpuwatch.gate.classes import Who
from gpuwatch.gate.config import GateConfig
from gpuwatch.gate.limits import LaneLimits
from gpuwatch.gate.offline import OfflineLane, SimClock
from gpuwatch.gate.request import Output
from gpuwatch.plan.probe import Outcome, ProbeResult, Target, summarize
from gpuwatch.plan.traffic import Arrival, Traffic
from gpuwatch.series import sample_quantile
from gpuwatch.sim.engine import Engine, Event, Request
from gpuwatch.sim.profiles import Profile

CHAT_PATH = "/v1/chat/completions"  # what the load generator sends chat requests to


@dataclass
class _Tracked:
    at_gate: float
    request: Request
    first: float | None = None
    max_gap: float = 0.0
    status: str = "ok"
    counted: bool = True  # chat requests count toward goodput; embed ones only load the engine


class _Probe:
    def __init__(
        self,
        profile: Profile,
        limits: LaneLimits | None,
        seed: int,
        default_output_tokens: int,
        who: Who,
        slo_ttft_s: float | None,
    ) -> None:
        self.engine = Engine(profile, seed=seed)
        self.max_len = profile.model.max_model_len
        self.limits = limits
        self.default_output_tokens = default_output_tokens
        self.who = who
        self.clock = SimClock()
        self.gate: OfflineLane[str] | None = None
        if limits is not None:
            lane = AdmissionLane("chat", limits, slo_ttft_s=slo_ttft_s, clock=self.clock)
            self.gate = OfflineLane(lane)
        self.tracked: dict[str, _Tracked] = {}
        self.gaps: list[float] = []
        self.last_finish = 0.0

    def start(self, rids: list[str]) -> None:
        for rid in rids:
            req = self.tracked[rid].request
            req.arrival = self.clock.now
            self.engine.add(req)

    def settle(self, rids: list[str]) -> None:
        """Start what the gate admitted; mark what it refused."""
        self.start(rids)
        if self.gate is not None:
            for rid, reason in self.gate.refused:
                self.tracked[rid].status = reason
            self.gate.refused.clear()

    def arrive(self, n: int, a: Arrival) -> None:
        self.clock.now = a.t
        prompt = min(a.prompt, self.max_len - 1)
        if a.lane == "embed":
            rid = f"e{n}"
            self.tracked[rid] = _Tracked(a.t, Request(rid, prompt, 1, a.t), counted=False)
            self.start([rid])
            return
        rid = f"r{n}"
        output = Output({"max_tokens": a.output})
        tr = _Tracked(a.t, Request(rid, prompt, 1, a.t))
        self.tracked[rid] = tr
        if self.gate is None or self.limits is None:
            tr.request.max_output = max(1, min(a.output, self.max_len - prompt))
            self.start([rid])
            return
        try:
            # What the proxy does before the lane: the caps, and the tokens to reserve.
            clamp, tokens = check_text(
                output, self.limits, "chat", CHAT_PATH, prompt, self.default_output_tokens
            )
        except CapRefused as exc:
            self.gate.refuse(rid, exc.reason, str(exc), self.who)
            self.settle([])
            return
        max_tokens = clamp.edits.get("max_tokens", a.output)
        tr.request.max_output = max(1, min(max_tokens, self.max_len - prompt))
        self.settle(self.gate.arrive(rid, tokens, self.who))

    def events(self, events: list[Event]) -> None:
        for ev in events:
            tr = self.tracked.get(ev.request.rid)
            if tr is None or not tr.counted:
                continue
            if ev.kind == "token":
                if tr.first is None:
                    tr.first = ev.time
                    if self.gate is not None:
                        self.settle(self.gate.first_token(ev.request.rid))
                if ev.gap is not None:
                    self.gaps.append(ev.gap)
                    tr.max_gap = max(tr.max_gap, ev.gap)
            elif ev.kind == "finished":
                self.last_finish = ev.time
                if self.gate is not None:
                    self.settle(self.gate.finished(ev.request.rid))


def run_probe(
    profile: Profile,
    traffic: Traffic,
    rate: float,
    duration_s: float,
    target: Target,
    limits: LaneLimits | None = None,
    seed: int = 0,
    default_output_tokens: int = GateConfig.default_output_tokens,
    who: Who | None = None,
    slo_ttft_s: float | None = GateConfig.slo_ttft_s,
) -> ProbeResult:
    """Simulate ``duration_s`` seconds of arrivals at ``rate`` through a chat lane with
    ``limits`` (None: no gate) and judge them against ``target``. ``default_output_tokens``
    and ``slo_ttft_s`` are the gate's config (``default_output_tokens``, ``[slo]
    ttft_p99_s``: a lane without a wait budget or target of its own derives its budget from
    it); ``who`` is every request's tenant and class."""
    wall0 = time.perf_counter()
    p = _Probe(profile, limits, seed, default_output_tokens, who or Who(), slo_ttft_s)
    engine, gate = p.engine, p.gate
    arrivals = deque(traffic.arrivals(rate, duration_s, seed))
    batches: list[int] = []
    # Requests waiting anywhere: the gate's queue and the engine's own.
    queue_peak = kv_peak_blocks = 0
    n = 0

    def arrive_until(t: float) -> None:
        nonlocal n
        while arrivals and arrivals[0].t <= t:
            p.arrive(n, arrivals.popleft())
            n += 1

    while True:
        if engine.idle:
            if arrivals:
                # Nothing runs until the next arrival: time jumps to it.
                engine.now = max(engine.now, arrivals[0].t)
                arrive_until(engine.now)
            elif gate is not None and (shed := gate.next_deadline()) is not None:
                # Waiters that nothing will admit (no slot will free): their time runs out.
                p.clock.now = engine.now = max(engine.now, shed)
                p.settle(gate.tick())
            else:
                break
            queue_peak = max(queue_peak, (gate.queued if gate else 0) + len(engine.waiting))
            continue
        result = engine.step()
        if result.duration == 0:
            # Nothing could be scheduled (cannot happen with a validated profile, whose pool
            # holds max_model_len): wait for the next arrival, or stop; the rest count as misses.
            if not arrivals:
                break
            engine.now = arrivals[0].t
            continue
        batches.append(len(engine.running) + len(engine.waiting))
        kv_peak_blocks = max(kv_peak_blocks, engine.used_blocks)
        arrive_until(engine.now)  # they came while the step ran
        p.clock.now = engine.now
        if gate is not None:
            p.settle(gate.tick())  # waits that ran out during the step, before it ended
        p.events(result.events)
        queue_peak = max(queue_peak, (gate.queued if gate else 0) + len(engine.waiting))
    if gate is not None:
        gate.close()
    outcomes = [
        Outcome(
            tr.first - tr.at_gate if tr.first is not None else None,
            tr.max_gap if tr.first is not None else None,
            tr.status if tr.first is not None or tr.status != "ok" else "failed",
        )
        for tr in p.tracked.values()
        if tr.counted
    ]
    result_, _ = summarize(
        rate, duration_s, outcomes, p.gaps, target, max(duration_s, p.last_finish)
    )
    batches.sort()
    result_.kv_peak = kv_peak_blocks / engine.total_blocks if engine.total_blocks else None
    result_.preemptions = engine.preemptions
    result_.queue_peak = queue_peak
    result_.batch_p99 = round(sample_quantile(batches, 0.99)) if batches else 0
    result_.batch_max = batches[-1] if batches else 0
    result_.wall_s = time.perf_counter() - wall0
    return result_
