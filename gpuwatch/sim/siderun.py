"""Images and embeddings driven in real time on the node's clock, on the first virtual GPU.

The pure models are in gpuwatch/sim/sidework.py; this module runs them as asyncio tasks,
keeps their metrics (gpuwatch/sim/sidemetrics.py), tells the text engine how much of the GPU
they weigh against it (``weight``) and the virtual GPU how much VRAM and time they use.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable

from prometheus_client import CollectorRegistry

from gpuwatch.sim.gpu import VirtualGpu
from gpuwatch.sim.profiles import BGE_LARGE, IMAGE_RESERVE_BYTES, SDXL, Profile
from gpuwatch.sim.sidemetrics import EmbedMetrics, ImageMetrics
from gpuwatch.sim.sidework import EmbedJob, EmbedQueue, ImageJob, ImagePool

_TICK_S = 0.25


class SideWork:
    """The embedding and image servers that share a node's first GPU with its text engine."""

    def __init__(
        self,
        profile: Profile,
        gpu: VirtualGpu,
        registry: CollectorRegistry,
        clock: Callable[[], float],
        time_scale: float,
        text_busy: Callable[[], bool],
        *,
        embed: bool,
        image: bool,
        image_reserve: int = IMAGE_RESERVE_BYTES,
    ) -> None:
        self.gpu = gpu
        self.clock = clock  # simulated seconds
        self.text_busy = text_busy
        self.scale = time_scale
        self.embed_model = BGE_LARGE if embed else None
        self.image_model = SDXL if image else None
        self.images = ImagePool(SDXL, profile.gpu, image_reserve) if image else None
        self.embeds = EmbedQueue(BGE_LARGE, profile.gpu) if embed else None
        self.image_metrics = ImageMetrics(registry) if image else None
        self.embed_metrics = EmbedMetrics(registry) if embed else None
        self.weights = (BGE_LARGE.weight_bytes if embed else 0) + (
            SDXL.weight_bytes if image else 0
        )
        self._embed_weight = 0.0
        self._image_wake = asyncio.Event()
        self._embed_wake = asyncio.Event()
        self._done: dict[str, asyncio.Future[None]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._sync_gpu()

    # -- what the text engine and the GPU see ---------------------------------------------

    @property
    def weight(self) -> float:
        """What the images and embeddings running now weigh against the text engine."""
        return (self.images.weight if self.images else 0.0) + self._embed_weight

    def _sync_gpu(self) -> None:
        held = self.images.bytes_in_use if self.images else 0
        self.gpu.side_bytes = self.weights + held
        if self.images and self.image_metrics:
            m = self.image_metrics
            m.running.set(len(self.images.running))
            m.waiting.set(len(self.images.queue))
            m.memory.set(held)
            m.weight.set(self.images.weight)

    def _wall(self, sim_seconds: float) -> float:
        return sim_seconds / self.scale

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        if self.images:
            self._tasks.append(asyncio.create_task(self._run_images()))
        if self.embeds:
            self._tasks.append(asyncio.create_task(self._run_embeds()))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- images ---------------------------------------------------------------------------

    def new_image(self, width: int, height: int, steps: int, n: int) -> ImageJob:
        """A costed job, not yet queued: the caller checks ``fits_ever`` first."""
        assert self.images is not None
        job = ImageJob(uuid.uuid4().hex, width, height, steps, n, arrival=self.clock())
        self.images.cost(job)
        return job

    async def generate(self, job: ImageJob) -> None:
        """Queue the job and wait until its images are done (cancelled: the job is dropped)."""
        pool = self.images
        assert pool is not None and self.image_metrics is not None
        self._advance()
        done = asyncio.get_running_loop().create_future()
        self._done[job.rid] = done
        pool.add(job)
        self._sync_gpu()
        self._image_wake.set()
        try:
            await done
        except asyncio.CancelledError:
            # Up to now at the speeds that held until now: removing the job first would credit
            # the others at their speed without it, and admit a waiter with a stale start.
            self._advance()
            if pool.abort(job):
                self.image_metrics.requests.labels("abort").inc()
                self._sync_gpu()
                self._image_wake.set()
            raise
        finally:
            self._done.pop(job.rid, None)

    async def _run_images(self) -> None:
        pool = self.images
        assert pool is not None
        while True:
            self._image_wake.clear()
            start = self.clock()
            finish = pool.next_finish()
            if finish is None:
                await self._image_wake.wait()
            else:
                # Wake at least every quarter second so the GPU's busy time stays current.
                wait = min(_TICK_S, max(0.0, self._wall(finish - start)))
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._image_wake.wait(), wait)
            now = self.clock()
            busy = bool(pool.running)
            self._advance()
            if busy:
                wall_now = time.monotonic()
                self.gpu.busy(wall_now - self._wall(now - start), wall_now, 1.0)
            self._sync_gpu()

    def _advance(self) -> None:
        """Run the images up to now, at the speed the rest of the GPU's work left them."""
        pool = self.images
        assert pool is not None
        for job in pool.advance(self.clock()):
            self._finish_image(job)
        pool.others = (1.0 if self.text_busy() else 0.0) + self._embed_weight

    def _finish_image(self, job: ImageJob) -> None:
        m = self.image_metrics
        assert m is not None and job.finished is not None and job.started is not None
        m.requests.labels("ok").inc()
        m.images.inc(job.n)
        m.steps.inc(job.steps * job.n)
        m.pixels.inc(job.pixels * job.n)
        m.duration.observe(self._wall(job.finished - job.arrival))
        m.queue.observe(self._wall(job.started - job.arrival))
        done = self._done.get(job.rid)
        if done is not None and not done.done():
            done.set_result(None)

    # -- embeddings -----------------------------------------------------------------------

    async def embed(self, tokens: list[int], batched: bool) -> EmbedJob:
        """Queue one request's inputs; return the job when its batch has run."""
        queue, m = self.embeds, self.embed_metrics
        assert queue is not None and m is not None
        method = "batch" if batched else "single"
        m.request_count.labels(method).inc()
        job = EmbedJob(uuid.uuid4().hex, tokens, arrival=self.clock())
        for t in tokens:
            m.input_length.observe(t)
        done = asyncio.get_running_loop().create_future()
        self._done[job.rid] = done
        queue.add(job)
        m.queue_size.set(len(queue.queue))
        self._embed_wake.set()
        try:
            await done
        except asyncio.CancelledError:
            queue.abort(job)
            m.queue_size.set(len(queue.queue))
            m.request_failure.labels("cancelled").inc()
            raise
        finally:
            self._done.pop(job.rid, None)
        m.request_success.labels(method).inc()
        assert job.started is not None and job.finished is not None
        m.request_duration.observe(self._wall(job.finished - job.arrival))
        m.queue_duration.observe(self._wall(job.started - job.arrival))
        m.inference_duration.observe(self._wall(job.finished - job.started))
        return job

    async def _run_embeds(self) -> None:
        queue, m, model = self.embeds, self.embed_metrics, self.embed_model
        assert queue is not None and m is not None and model is not None
        while True:
            self._embed_wake.clear()
            batch, tokens, seconds = queue.next_batch()
            if not batch:
                await self._embed_wake.wait()
                continue
            start = self.clock()
            for job in batch:
                job.started = start
            m.queue_size.set(len(queue.queue))
            m.batch_current_size.set(len(batch))
            m.batch_next_size.observe(len(batch))
            m.batch_next_tokens.observe(tokens)
            self._embed_weight = model.weight(tokens)
            begin = time.monotonic()
            try:
                await asyncio.sleep(self._wall(seconds))
            finally:
                self._embed_weight = 0.0
                m.batch_current_size.set(0)
            self.gpu.busy(begin, time.monotonic(), 1.0)
            end = self.clock()
            for job in batch:
                job.finished = end
                done = self._done.get(job.rid)
                if done is not None and not done.done():
                    done.set_result(None)
