"""Deterministic dashboard data: the simulator's engine fast-forwarded under a seeded load,
its real /metrics text scraped through the data layer into a ``Monitor`` on a simulated clock.

Screenshots, snapshot tests and the dashboard benchmark use it: the same pipeline as live
(prometheus_client exposition -> prefiltered parse -> dialect -> history -> health), with no
sockets and no wall clock, so the pictures are the same on every machine.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import generate_latest

from gpuwatch.adminapi import (
    AdaptiveDecision,
    AdaptiveStatus,
    GateStatus,
    LaneLimits,
    LaneStatus,
    Limits,
)
from gpuwatch.demo import DEMO_GATE_TOML, IMAGE_BURST, IMAGE_SIZE
from gpuwatch.gate.admission import AdmissionLane
from gpuwatch.gate.classes import FAIRNESS_HEADER, OBJECTIVE_HEADER, Fairness, parse_fairness
from gpuwatch.gate.latency import WINDOWS_S, LaneLatency, Record
from gpuwatch.gate.metrics import GateMetrics
from gpuwatch.gate.offline import OfflineLane, SimClock
from gpuwatch.gate.tenantstatus import Shares, lane_status
from gpuwatch.load.spec import Dist, Tenancy
from gpuwatch.monitor.state import Monitor
from gpuwatch.series import window_label
from gpuwatch.session.node import DashboardOptions, live_session, replay_session
from gpuwatch.sim.engine import Engine, Request
from gpuwatch.sim.gpu import VirtualGpu
from gpuwatch.sim.metrics import EngineRecorder, SimMetrics
from gpuwatch.sim.profiles import (
    DEFAULT_PROFILE,
    IMAGE_RESERVE_BYTES,
    SDXL,
    get_profile,
    with_side_models,
)
from gpuwatch.sim.sidework import ImageJob, ImagePool, text_slowdown
from gpuwatch.sources.nvml import FakeNvml, NvmlReader
from gpuwatch.sources.scrape import map_page
from gpuwatch.tui.app import GpuwatchApp, Shell

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

if TYPE_CHECKING:
    from gpuwatch.tui.replay import ReplayApp

SIM_URL = "http://127.0.0.1:8000/metrics"
GATE_URL = "http://127.0.0.1:9000"
GATE_METRICS_URL = f"{GATE_URL}/metrics"
WALL_START = 1_796_000_000.0  # a fixed wall clock for the pictures


@dataclass
class Scenario:
    monitor: Monitor
    engine: Engine


class FairChat:
    """The chat lane as the real gate admits it (gate/admission.py: classes first, turns across
    tenants, sheddable work evicted when full), on simulated time (gate/offline.py), and what
    its /admin/status says about classes and tenants (gate/tenantstatus.py). Tenants and classes
    are drawn as ``gpuwatch load`` draws them and mapped from the headers as the demo's gate
    maps them.

    Waits are shorter than the lane's 20 s queue timeout, as in the plain scenario."""

    def __init__(self, limits: tuple[int, int], tenancy: Tenancy, classes: dict[str, float],
                 seed: int) -> None:  # fmt: skip
        self.fairness: Fairness = parse_fairness(
            Path("demo gate.toml"), tomllib.loads(DEMO_GATE_TOML)["fairness"]
        )
        self.clock = SimClock()
        lane = AdmissionLane("chat", LaneLimits(*limits, queue_timeout_s=20.0), clock=self.clock)
        self.gate: OfflineLane[str] = OfflineLane(lane)
        self.lane = self.gate.lane
        self.rng = random.Random(seed + 3)  # apart, so the arrivals are the plain scenario's
        self.tenants = tenancy.weights()
        self.classes = classes
        self.requests: dict[str, Request] = {}
        self.refused: list[Request] = []

    def arrive(self, request: Request, now: float) -> list[Request]:
        """``request`` at the gate now; the requests admitted (to the engine) as a result."""
        headers = {
            FAIRNESS_HEADER: self.rng.choices(list(self.tenants), list(self.tenants.values()))[0],
            OBJECTIVE_HEADER: self.rng.choices(list(self.classes), list(self.classes.values()))[0],
        }
        self.clock.now = now
        self.requests[request.rid] = request
        return self._moved(self.gate.arrive(request.rid, 0, self.fairness.who(headers)))

    def finished(self, rid: str) -> list[Request]:
        """``rid`` answered: its slot goes back and the queue moves on."""
        self.requests.pop(rid, None)
        return self._moved(self.gate.finished(rid))

    def _moved(self, admitted: list[str]) -> list[Request]:
        self.refused.extend(self.requests.pop(rid) for rid, _ in self.gate.refused)
        self.gate.refused.clear()
        return [self.requests[rid] for rid in admitted]

    def set_limits(self, limits: tuple[int, int]) -> list[Request]:
        return self._moved(self.gate.set_limits(LaneLimits(*limits, queue_timeout_s=20.0)))

    def close(self) -> None:
        self.gate.close()

    def status(self) -> Shares:
        return lane_status(self.lane, self.fairness)


def gate_state(
    inflight: int,
    max_inflight: int,
    max_queue: int,
    queued: int,
    rejected: dict[str, int],
    version: int = 1,
    paused: bool = False,
    users: LaneLatency | None = None,
    ttft_slo: float | None = None,
    image: tuple[int, int, int, int] = (4, 16, 0, 0),
    chat: Shares | None = None,
) -> tuple[Limits, GateStatus]:
    """The gate's limits and status; ``image`` = the image lane's (max_inflight, max_queue,
    in flight, queued); ``chat``: more of the chat lane's status (its classes and tenants)."""
    lanes = {
        "chat": (max_inflight, max_queue, inflight, queued, rejected),
        "embed": (32, 128, 0, 0, {}),
        "image": (*image, {}),
        "default": (16, 64, 0, 0, {}),
    }
    configured = {
        name: LaneLimits(mi, mq, queue_timeout_s=20.0) for name, (mi, mq, *_) in lanes.items()
    }
    status = {
        name: LaneStatus(inflight=infl, queued=q, rejected_total=dict(rej))
        for name, (_, _, infl, q, rej) in lanes.items()
    }
    if chat is not None:
        status["chat"] = replace(
            status["chat"],
            classes=chat.classes,
            tenants=chat.tenants,
            tenant_count=chat.tenant_count,
        )
    if users is not None:
        # What the real gate serves in /admin/status, from the same code (gate/latency.py).
        status["chat"] = replace(
            status["chat"],
            latency={window_label(w): users.summary(w) for w in WINDOWS_S},
            goodput={window_label(w): users.goodput(w, ttft_slo, None) for w in WINDOWS_S},
        )
    return Limits(version, paused, configured), GateStatus(version, paused, status)


def build(
    seconds: float = 180.0,
    rate: float = 1.5,
    spike_at: float | None = None,
    seed: int = 7,
    max_inflight: int = 64,
    max_queue: int = 256,
    gpus: int = 1,
    slo: dict[str, float | None] | None = None,
    tighten_at: float | None = None,
    tight: tuple[int, int] = (8, 16),
    images_at: float | None = None,
    images: int = IMAGE_BURST,
    image_size: tuple[int, int] = IMAGE_SIZE,
    tenancy: Tenancy | None = None,
    classes: dict[str, float] | None = None,
    on_monitor: Callable[[Monitor], object] | None = None,
    gate_page: bool = False,
) -> Scenario:
    """Run the engine for ``seconds`` of simulated time and scrape it once a second.

    Bursty arrivals (gamma, burstiness 0.5) at ``rate``, five times that from ``spike_at`` on.
    A gate in front bounds what the engine holds at once (``max_inflight``, 64 as in the demo);
    the rest wait at the gate, up to ``max_queue``, or are refused. ``tighten_at`` is the
    operator's move: from then on the gate allows ``tight`` = (max_inflight, max_queue).
    ``tenancy``: chat comes from tenants, each request of one of ``classes`` (by weight), and
    the chat lane is the real gate's admission with the demo's ``[fairness]`` (``FairChat``).
    ``on_monitor`` is given the monitor before the first reading (a recorder attaches there).
    ``gate_page``: the gate's own ``/metrics`` is scraped too (the real ``GateMetrics``, fed
    what the gate would observe), as a node watched with ``--metrics GATE/metrics`` has it.

    ``images_at``: the node also serves SDXL images (the simulator's ``--workloads image``, so
    vLLM has a smaller share of the GPU) and ``images`` requests of ``image_size`` arrive then,
    half a second apart, through an image lane of one in flight (as in the demo): its queue fills,
    and each running image takes GPU time from the text engine (gpuwatch/sim/sidework.py).
    """
    profile = get_profile(DEFAULT_PROFILE)
    pool: ImagePool | None = None
    image_arrivals: list[float] = []
    if images_at is not None:
        profile = with_side_models(profile, embed=False, image=True)
        pool = ImagePool(SDXL, profile.gpu, IMAGE_RESERVE_BYTES)
        image_arrivals = [images_at + 0.5 * i for i in range(images)][::-1]
    image_gate: list[ImageJob] = []
    engine = Engine(profile, seed=seed)
    metrics = SimMetrics(profile, profile.model.name, 1)
    recorder = EngineRecorder(metrics, 0, engine, 1.0)
    virtual = [VirtualGpu(profile, i, seed) for i in range(gpus)]
    clock = SimClock()
    urls = [SIM_URL, GATE_METRICS_URL] if gate_page else [SIM_URL]
    monitor = Monitor(
        urls, 1.0, slo, admin_url=GATE_URL, clock=clock, wall=lambda: WALL_START + clock.now
    )
    gate_metrics = GateMetrics(["chat", "embed", "image", "default"]) if gate_page else None
    chat_metrics = gate_metrics.lanes["chat"] if gate_metrics else None
    counted: dict[str, int] = {}  # refusals already in the gate page's counters
    if on_monitor is not None:
        on_monitor(monitor)
    rng = random.Random(seed)
    prompts, outputs = Dist("uniform", 256, 1536), Dist("lognormal", 200, 0.5)
    pending: list[Request] = []
    t = 0.0
    while t < seconds:
        r = rate * (5.0 if spike_at is not None and t >= spike_at else 1.0)
        t += rng.gammavariate(0.5, 1.0 / (r * 0.5))
        pending.append(Request(f"r{len(pending)}", prompts.sample(rng), outputs.sample(rng), t))
    pending.reverse()
    users = LaneLatency(clock)  # the gate's exact per-request record, on simulated time
    records: dict[str, tuple[Record, float]] = {}
    ttft_slo = monitor.health.slo.get("ttft_p99_s")
    gate_queue: list[Request] = []
    fair = FairChat((max_inflight, max_queue), tenancy, classes or {}, seed) if tenancy else None
    rejected = {"queue_full": 0}
    nvml = NvmlReader(FakeNvml(lambda: {"gpus": [g.state(clock.now) for g in virtual]}))
    next_scrape = 1.0
    version = 1
    while next_scrape <= seconds:
        if tighten_at is not None and version == 1 and engine.now >= tighten_at:
            before = (max_inflight, max_queue)
            max_inflight, max_queue = tight
            version = 2
            for admitted in fair.set_limits(tight) if fair else []:
                _admit(engine, admitted, records)
            monitor.event(
                "info",
                f"limits v2: chat.max_inflight {before[0]} -> {max_inflight}; "
                f"chat.max_queue {before[1]} -> {max_queue}",
            )
        while pending and pending[-1].arrival <= engine.now:
            arrived = pending.pop()
            records[arrived.rid] = (users.start(arrived.arrival), arrived.arrival)
            if fair is None:
                gate_queue.append(arrived)
                continue
            for admitted in fair.arrive(arrived, engine.now):
                _admit(engine, admitted, records)
            for refused in fair.refused:
                record, at_gate = records.pop(refused.rid)
                record.outcome, record.e2e_s = "refused", engine.now - at_gate
                users.end(record)
            fair.refused.clear()
        while (
            fair is None and gate_queue and len(engine.running) + len(engine.waiting) < max_inflight
        ):
            _admit(engine, gate_queue.pop(0), records)
        if len(gate_queue) > max_queue:
            rejected["queue_full"] += len(gate_queue) - max_queue
            for refused in gate_queue[max_queue:]:
                record, at_gate = records.pop(refused.rid)
                record.outcome, record.e2e_s = "refused", engine.now - at_gate
                users.end(record)
            del gate_queue[max_queue:]
        if pool is not None:
            if pool.running:
                virtual[0].busy(pool.now, engine.now, 1.0)
            pool.advance(engine.now)
            pool.others = 0.0 if engine.idle else 1.0
            while image_arrivals and image_arrivals[-1] <= engine.now:
                at = image_arrivals.pop()
                image_gate.append(ImageJob(f"i{len(image_arrivals)}", *image_size, 30, 1, at))
            while image_gate and not pool.running and not pool.queue:  # the lane: one at a time
                pool.add(image_gate.pop(0))
            engine.slowdown = text_slowdown(pool.weight)
            virtual[0].side_bytes = SDXL.weight_bytes + pool.bytes_in_use
        if engine.idle:
            wake = [pending[-1].arrival] if pending else []
            if pool is not None and (finish := pool.next_finish()) is not None:
                wake.append(finish)
            if image_arrivals:
                wake.append(image_arrivals[-1])
            engine.now = max(engine.now, min([*wake, next_scrape]))
        else:
            result = engine.step()
            recorder.step(result)
            for event in result.events:
                found = records.get(event.request.rid)
                if found is None:
                    continue
                record, at_gate = found
                if event.kind == "token" and event.gap is None:  # the first token
                    record.ttft_s = event.time - at_gate
                    if chat_metrics is not None:
                        chat_metrics.ttft.observe(record.ttft_s)
                        chat_metrics.queue_wait.observe(record.queue_wait_s or 0.0)
                elif event.kind == "token" and event.gap is not None:
                    users.itl.add((event.gap,))
                    record.max_itl_s = max(record.max_itl_s or 0.0, event.gap)
                if event.kind == "finished":
                    record.e2e_s = engine.now - at_gate
                    users.end(record)
                    if chat_metrics is not None:
                        chat_metrics.duration.observe(record.e2e_s)
                    del records[event.request.rid]
                    for admitted in fair.finished(event.request.rid) if fair else []:
                        _admit(engine, admitted, records)
            for g in virtual:
                g.busy(result.start, engine.now, result.intensity)
        while engine.now >= next_scrape and next_scrape <= seconds:
            clock.now = next_scrape
            monitor.apply_scrape(map_page(SIM_URL, generate_latest(metrics.registry).decode()))
            monitor.apply_gpus(nvml.read())
            inflight = len(engine.running) + len(engine.waiting)
            if gate_metrics is not None and chat_metrics is not None:
                chat_metrics.inflight.set(inflight)
                chat_metrics.queued.set(len(fair.lane.queue) if fair else len(gate_queue))
                for reason, n in (dict(fair.lane.rejected_total) if fair else rejected).items():
                    chat_metrics.rejected[reason].inc(n - counted.get(reason, 0))
                    counted[reason] = n
                page = generate_latest(gate_metrics.registry).decode()
                monitor.apply_scrape(map_page(GATE_METRICS_URL, page))
            limits, status = gate_state(
                inflight,
                max_inflight,
                max_queue,
                len(fair.lane.queue) if fair else len(gate_queue),
                dict(fair.lane.rejected_total) if fair else rejected,
                version=1 if max_inflight == 64 else 2,
                users=users,
                ttft_slo=ttft_slo,
                image=(1, 64, len(pool.running), len(image_gate)) if pool else (4, 16, 0, 0),
                chat=fair.status() if fair else None,
            )
            monitor.apply_gate(limits, status)
            monitor.evaluate()
            next_scrape += 1.0
    clock.now = seconds
    if fair is not None:
        fair.close()
    return Scenario(monitor, engine)


def _admit(engine: Engine, admitted: Request, records: dict[str, tuple[Record, float]]) -> None:
    """The gate hands ``admitted`` to the engine now."""
    record, at_gate = records[admitted.rid]
    record.queue_wait_s = engine.now - at_gate
    admitted.arrival = max(admitted.arrival, engine.now)  # the engine sees it now
    engine.add(admitted)


def app_for(sc: Scenario) -> GpuwatchApp:
    """The dashboard showing a scenario as a node named gpu-node-1 would see it."""
    options = DashboardOptions(
        urls=[], admin_url=GATE_URL, hostname="gpu-node-1", title_endpoint="127.0.0.1:8000"
    )
    return GpuwatchApp(live_session(options, sc.monitor))


def paint(app: Shell) -> None:
    """Paint the app's dashboard now (a scene's monitor does not tick)."""
    dash = app.dashboard()
    assert dash is not None
    dash.paint()


def with_adaptive(sc: Scenario) -> Scenario:
    """The scenario with its chat lane adaptive: the effective limit cut from 64 to 27 in three
    steps after the spike, in the shape the gate's /admin/status serves (gate/adaptive_loop.py)."""
    gate = sc.monitor.gate
    assert gate is not None and gate.limits is not None
    now = sc.monitor.wall()
    chat = replace(
        gate.limits.lanes["chat"],
        policy="adaptive",
        target_ttft_p99_s=1.5,
        min_inflight=8,
        min_inflight_tokens=None,
    )
    gate.limits = replace(gate.limits, lanes={**gate.limits.lanes, "chat": chat})
    history = [64] * 14 + [48] * 4 + [36] * 4 + [27] * 8
    adaptive = AdaptiveStatus(
        effective_max_inflight=27,
        effective_max_inflight_tokens=None,
        min_inflight=8,
        max_inflight=64,
        target_ttft_p99_s=1.5,
        last_decision=AdaptiveDecision(
            now - 9, "down", 36, 27, None, None, "-25%: p99 TTFT 2.6s > 1.5s"
        ),
        note="no queue: the limit is not binding",
        history=tuple((len(history) - i, n) for i, n in enumerate(history)),
    )
    live = replace(gate.lanes["chat"], effective_max_inflight=27, adaptive=adaptive)
    gate.lanes = {**gate.lanes, "chat": live}
    return sc


def replay_for(path: Path, at: float, **build_args: Any) -> ReplayApp:
    """A scenario recorded into ``path`` through the real recorder, and the replay app on it
    with its cursor ``at`` seconds into the run: ``gpuwatch replay`` as a person sees it."""
    from gpuwatch.record.player import Player
    from gpuwatch.record.recorder import Recorder
    from gpuwatch.tui.replay import ReplayApp

    recorder = Recorder(path)
    title = "127.0.0.1:8000"
    build(**build_args, on_monitor=lambda m: recorder.attach(m, host="gpu-node-1", title=title))
    recorder.close()
    player = Player(path)
    player.seek(WALL_START + at)
    options = DashboardOptions(
        urls=list(player.meta["urls"]),
        admin_url=GATE_URL,
        hostname="gpu-node-1",
        title_endpoint=title,
    )
    return ReplayApp(replay_session(player, options))
