"""The simulated node: engines driven in real time, their /metrics, and the virtual GPUs.

Nothing here knows the OpenAI API: a job arrives already validated (``Job``), and the node
serves only what a node exports (vLLM's /metrics, /sim/gpu, /health). The OpenAI surface
(gpuwatch/sim/openai.py) is composed with it in gpuwatch/sim/server.py.

Latencies in /metrics are wall-clock seconds (simulated seconds / time scale), so they agree
with what a client or the gate measures.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gpuwatch.sim.engine import Engine, Event, Request
from gpuwatch.sim.gpu import VirtualGpu
from gpuwatch.sim.metrics import EngineRecorder, SimMetrics
from gpuwatch.sim.mig import MigSlice
from gpuwatch.sim.profiles import IMAGE_RESERVE_BYTES, Profile, with_side_models
from gpuwatch.sim.siderun import SideWork
from gpuwatch.sim.sidework import text_slowdown
from gpuwatch.sim.tracing import SimTracing

# Back-to-back steps keep simulated time continuous (a busy GPU has no gaps) unless the event
# loop falls this far behind the wall clock.
_MAX_LAG_S = 0.05


@dataclass(frozen=True)
class Job:
    """One generation request as the engines see it."""

    prompt_len: int
    hashes: tuple[int, ...]
    max_tokens: int
    ignore_eos: bool


@dataclass
class Slot:
    """Where an engine's events for one request are delivered."""

    queue: asyncio.Queue[Event] = field(default_factory=asyncio.Queue)


class SimNode:
    """Engines with their metrics recorders and virtual GPUs, each engine stepped in real time
    (scaled by ``time_scale``) by its own task; requests come in as jobs, events go out to
    per-request slots."""

    def __init__(
        self,
        profile: Profile,
        engines: int = 1,
        time_scale: float = 1.0,
        seed: int = 0,
        model_name: str | None = None,
        *,
        embed: bool = False,
        image: bool = False,
        image_reserve: int = IMAGE_RESERVE_BYTES,
        mig: Sequence[MigSlice] = (),
    ) -> None:
        # Serving embeddings or images too leaves vLLM a smaller share of the GPU.
        profile = with_side_models(profile, embed, image, image_reserve)
        profile.validate()
        self.profile = profile
        self.model_name = model_name or profile.model.name
        self.time_scale = time_scale
        self.rng = random.Random(seed)
        self.engines = [Engine(profile, seed=seed + i) for i in range(engines)]
        self.metrics = SimMetrics(profile, self.model_name, engines)
        self.recorders = [
            EngineRecorder(self.metrics, i, e, time_scale) for i, e in enumerate(self.engines)
        ]
        self.gpus = [VirtualGpu(profile, i, seed, mig) for i in range(engines)]
        # The other workloads run beside engine 0, on the first GPU.
        self.side = SideWork(
            profile, self.gpus[0], self.metrics.registry, self.sim_now, time_scale,
            lambda: not self.engines[0].idle,
            embed=embed, image=image, image_reserve=image_reserve,
        )  # fmt: skip
        self._wake = [asyncio.Event() for _ in self.engines]
        # Cleared while the engines are stalled (``stall``): steps stop, the rest answers.
        self._going = asyncio.Event()
        self._going.set()
        self._resume_timer: asyncio.TimerHandle | None = None
        self.stalled_since: float | None = None  # wall clock (time.time()), while stalled
        self.stalled_until: float | None = None  # wall clock, a stall for a number of seconds
        self._slots: dict[str, Slot] = {}
        self._t0 = time.monotonic()
        self._tasks: list[asyncio.Task[None]] = []
        self.created = int(time.time())
        # The traceparents requests came with; spans too where export is on (start_sim).
        self.tracing = SimTracing()

    # -- time -----------------------------------------------------------------------------

    def sim_now(self) -> float:
        return (time.monotonic() - self._t0) * self.time_scale

    def wall_at(self, sim_t: float) -> float:
        return self._t0 + sim_t / self.time_scale

    # -- engine loops ---------------------------------------------------------------------

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._run(i)) for i in range(len(self.engines))]
        self.side.start()

    async def stop(self) -> None:
        self.resume()  # no timer left behind
        await self.side.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _run(self, i: int) -> None:
        engine, recorder, gpu, wake = (
            self.engines[i],
            self.recorders[i],
            self.gpus[i],
            self._wake[i],
        )
        while True:
            if engine.idle:
                wake.clear()
                await wake.wait()
                # An idle GPU does not work in the past: the next step starts now.
                engine.now = max(engine.now, self.sim_now())
            elif self.sim_now() - engine.now > _MAX_LAG_S * self.time_scale:
                # The CPU fell behind the simulated GPU; skip ahead rather than drift.
                engine.now = self.sim_now()
            if not self._going.is_set():
                await self._going.wait()
                # The GPU did nothing while stalled: the next step starts now, not in the past.
                engine.now = max(engine.now, self.sim_now())
            if i == 0:
                engine.slowdown = text_slowdown(self.side.weight)
            result = engine.step()
            if result.duration == 0:
                wake.clear()
                await wake.wait()
                continue
            end = self.wall_at(engine.now)
            delay = end - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            gpu.busy(self.wall_at(result.start), end, result.intensity)
            recorder.step(result)
            for ev in result.events:
                slot = self._slots.get(ev.request.rid)
                if slot is not None:
                    slot.queue.put_nowait(ev)

    # -- stalls -----------------------------------------------------------------------------

    def stall(self, seconds: float | None = None) -> None:
        """Stop every text engine's steps (for ``seconds`` of wall time, else until
        ``resume``): the failure of an engine stuck in a collective or a kernel. /health and
        /metrics keep answering, requests stay running and their counters stay where they are;
        the embeddings and images beside engine 0 go on (they are other processes)."""
        if self._resume_timer is not None:
            self._resume_timer.cancel()
            self._resume_timer = None
        if self.stalled_since is None:
            self.stalled_since = time.time()
        self._going.clear()
        self.stalled_until = None
        if seconds is not None:
            self.stalled_until = time.time() + seconds
            self._resume_timer = asyncio.get_running_loop().call_later(seconds, self.resume)

    def resume(self) -> None:
        """The engines step again (nothing happens when they were not stalled)."""
        if self._resume_timer is not None:
            self._resume_timer.cancel()
            self._resume_timer = None
        self.stalled_since = self.stalled_until = None
        self._going.set()

    def toggle_stall(self) -> None:
        """Stall until toggled again, or resume (SIGUSR1 of ``gpuwatch sim``)."""
        if self.stalled_since is None:
            self.stall()
        else:
            self.resume()

    def stall_state(self) -> dict[str, Any]:
        since, until = self.stalled_since, self.stalled_until
        now = time.time()
        return {
            "stalled": since is not None,
            "since": since,
            "for_s": None if since is None else round(now - since, 3),
            "until": until,
        }

    # -- requests -------------------------------------------------------------------------

    def submit(self, job: Job, arrival: float | None = None) -> tuple[int, Request, Slot]:
        """Queue ``job`` on the least loaded engine; its events arrive in the returned slot."""
        i = min(
            range(len(self.engines)),
            key=lambda k: len(self.engines[k].running) + len(self.engines[k].waiting),
        )
        engine = self.engines[i]
        eos_at = None
        if not job.ignore_eos:
            natural = max(1, int(self.rng.lognormvariate(math.log(256), 0.8)))
            eos_at = natural if natural < job.max_tokens else None
        req = Request(
            rid=uuid.uuid4().hex,
            prompt_len=job.prompt_len,
            max_output=job.max_tokens,
            arrival=self.sim_now() if arrival is None else arrival,
            block_hashes=job.hashes,
            eos_at=eos_at,
        )
        slot = Slot()
        self._slots[req.rid] = slot
        engine.add(req)
        self.recorders[i].gauges()
        self._wake[i].set()
        return i, req, slot

    def release(self, i: int, req: Request) -> None:
        """The client is gone or done: drop the request and its blocks at once."""
        self._slots.pop(req.rid, None)
        if self.engines[i].abort(req):
            self.recorders[i].finished(req, "abort", self.engines[i].now)
            self.recorders[i].gauges()

    def gpu_state(self) -> dict[str, Any]:
        now = time.monotonic()
        return {"gpus": [g.state(now) for g in self.gpus]}


class NodeRoutes:
    """The node's own endpoints: what a scraper and the fake NVML backend read."""

    def __init__(self, node: SimNode) -> None:
        self.node = node

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/health", self.health),
            web.get("/metrics", self.metrics),
            web.get("/sim/gpu", self.gpu),
        ]

    async def health(self, _: web.Request) -> web.Response:
        return web.Response(status=200)

    async def metrics(self, _: web.Request) -> web.Response:
        for recorder in self.node.recorders:
            recorder.gauges()
        body = generate_latest(self.node.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def gpu(self, _: web.Request) -> web.Response:
        return web.json_response(self.node.gpu_state())
