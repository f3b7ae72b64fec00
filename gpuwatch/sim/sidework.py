"""The other work on the simulated GPU, pure and clock-free: image generation and embeddings.

Images (``ImagePool``): a job costs ``steps x pixels x n`` (gpuwatch/sim/profiles.py,
``DiffusionModel``). Jobs start first come first served while their activations fit in the
image reserve of VRAM; the ones that do not fit wait in the queue. Running jobs share the
image part of the GPU (processor sharing): alone, a job takes ``gpu_share`` of the GPU for its
standalone time; together they get at most ``MAX_SHARE`` of it, split in proportion to their
shares, so two big images each run at less than their standalone speed.

Embeddings (``EmbedQueue``): requests queue; a batch takes whole requests in arrival order up
to the model's ``max_batch_tokens`` (at least one), as TEI batches, and runs for the model's
time for that many tokens.

Both take a share of the GPU from the text engine while they run: ``text_slowdown`` turns the
shares in use into the factor the text engine's step times are multiplied by (time slicing:
the text engine gets the rest of the GPU).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from gpuwatch.sim.profiles import DiffusionModel, EmbeddingModel, Gpu

# The text engine always keeps a tenth of the GPU: time slicing never starves a process.
MAX_SHARE = 0.9


def text_slowdown(share: float) -> float:
    """Step-time factor for the text engine when other work takes ``share`` of the GPU."""
    return 1.0 / (1.0 - min(MAX_SHARE, max(0.0, share)))


@dataclass(eq=False)
class ImageJob:
    rid: str
    width: int
    height: int
    steps: int
    n: int
    arrival: float
    work: float = 0.0  # GPU-seconds: standalone time x its share
    demand: float = 0.0  # its share of the GPU when alone
    bytes: int = 0
    remaining: float = 0.0
    started: float | None = None
    finished: float | None = None

    @property
    def pixels(self) -> int:
        return self.width * self.height


@dataclass
class ImagePool:
    model: DiffusionModel
    gpu: Gpu
    reserve_bytes: int
    now: float = 0.0
    queue: deque[ImageJob] = field(default_factory=deque)
    running: list[ImageJob] = field(default_factory=list)
    images_done: int = 0
    steps_done: int = 0

    def cost(self, job: ImageJob) -> None:
        """Fill in what the job costs: GPU-seconds, its share and its activations."""
        alone = self.model.seconds(self.gpu, job.pixels, job.steps, job.n)
        job.demand = self.model.share(job.pixels, job.n)
        job.work = job.remaining = alone * job.demand
        job.bytes = self.model.bytes_for(job.pixels, job.n)

    def fits_ever(self, job: ImageJob) -> bool:
        return job.bytes <= self.reserve_bytes

    @property
    def bytes_in_use(self) -> int:
        return sum(j.bytes for j in self.running)

    @property
    def share(self) -> float:
        """The part of the GPU the running images take."""
        return min(MAX_SHARE, sum(j.demand for j in self.running))

    def _rate(self, job: ImageJob) -> float:
        """GPU-seconds of work per second this job gets now."""
        total = sum(j.demand for j in self.running)
        return job.demand * (self.share / total) if total else 0.0

    def add(self, job: ImageJob) -> None:
        if not job.work:
            self.cost(job)
        self.queue.append(job)
        self._admit()

    def abort(self, job: ImageJob) -> bool:
        if job in self.queue:
            self.queue.remove(job)
        elif job in self.running:
            self.running.remove(job)
        else:
            return False
        self._admit()
        return True

    def _admit(self) -> list[ImageJob]:
        started = []
        while self.queue and self.bytes_in_use + self.queue[0].bytes <= self.reserve_bytes:
            job = self.queue.popleft()
            job.started = self.now
            self.running.append(job)
            started.append(job)
        return started

    def next_finish(self) -> float | None:
        """Simulated time of the next completion if nothing arrives before it."""
        if not self.running:
            return None
        return self.now + min(j.remaining / self._rate(j) for j in self.running)

    def advance(self, to: float) -> list[ImageJob]:
        """Run the pool until ``to``; return the jobs that finished, in order."""
        done: list[ImageJob] = []
        while self.running:
            finish = self.next_finish()
            assert finish is not None
            until = min(finish, to)
            rates = {id(j): self._rate(j) for j in self.running}
            for j in self.running:
                j.remaining -= rates[id(j)] * (until - self.now)
            self.now = until
            if finish > to:
                break
            for j in [j for j in self.running if j.remaining <= 1e-9]:
                self.running.remove(j)
                j.finished = self.now
                self.images_done += j.n
                self.steps_done += j.steps * j.n
                done.append(j)
            self._admit()
        self.now = max(self.now, to)
        return done


@dataclass(eq=False)
class EmbedJob:
    rid: str
    tokens: list[int]  # per input
    arrival: float
    started: float | None = None
    finished: float | None = None

    @property
    def total(self) -> int:
        return sum(self.tokens)


@dataclass
class EmbedQueue:
    model: EmbeddingModel
    gpu: Gpu
    queue: deque[EmbedJob] = field(default_factory=deque)

    def add(self, job: EmbedJob) -> None:
        self.queue.append(job)

    def abort(self, job: EmbedJob) -> bool:
        if job in self.queue:
            self.queue.remove(job)
            return True
        return False

    def next_batch(self) -> tuple[list[EmbedJob], int, float]:
        """(requests, tokens, seconds) of the next batch; empty when nothing waits."""
        batch: list[EmbedJob] = []
        tokens = 0
        while self.queue and (
            not batch or tokens + self.queue[0].total <= self.model.max_batch_tokens
        ):
            job = self.queue.popleft()
            batch.append(job)
            tokens += job.total
        if not batch:
            return [], 0, 0.0
        return batch, tokens, self.model.batch_seconds(self.gpu, tokens)
