"""The other work on the simulated GPU, pure and clock-free: image generation and embeddings.

How they share the GPU with the text engine: time slicing between busy processes, weighted by
how much of the GPU each one keeps busy. The text engine, while it has work, weighs 1; a
running image request weighs ``DiffusionModel.weight`` (1 for 1024x1024 or more, less for
smaller ones); an embedding batch ``EmbeddingModel.weight``. With total weight W:

- the text engine's steps take ``text_slowdown(others) = 1 + others`` times as long (it gets
  1 / W of the GPU): one 1024x1024 image doubles them, two at once triple them;
- each image runs at ``min(1, 1 / W)`` of its speed alone on an idle GPU.

Images (``ImagePool``): a request costs ``steps x pixels x n`` (gpuwatch/sim/profiles.py,
``DiffusionModel``). Requests start first come first served while their activations fit in
the image reserve of VRAM; the ones that do not fit wait in the queue, at most
``max_waiting`` of them: past that a new request is refused (429, as TEI answers past
``max_concurrent_requests``), since each waiter holds a connection and memory.

Embeddings (``EmbedQueue``): requests queue; a batch takes whole requests in arrival order up
to the model's ``max_batch_tokens`` (at least one), as TEI batches, and runs for the model's
time for that many tokens.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from gpuwatch.sim.profiles import DiffusionModel, EmbeddingModel, Gpu

# Image requests that may wait for VRAM at once (a few minutes of work on one GPU).
IMAGE_MAX_WAITING = 64
# Embedding requests that may wait for a batch at once: TEI's `max_concurrent_requests`
# default; past it TEI answers 429 "Model is overloaded".
EMBED_MAX_WAITING = 512


def text_slowdown(others: float) -> float:
    """Step-time factor for the text engine while other work of weight ``others`` runs."""
    return 1.0 + max(0.0, others)


@dataclass(eq=False)
class ImageJob:
    rid: str
    width: int
    height: int
    steps: int
    n: int
    arrival: float
    alone: float = 0.0  # seconds alone on an idle GPU
    weight: float = 0.0
    bytes: int = 0
    remaining: float = 0.0  # seconds alone still to go
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
    # The weight of the rest of the GPU's work now: 1 while the text engine is busy, plus an
    # embedding batch's. The caller sets it before ``advance``.
    others: float = 0.0
    queue: deque[ImageJob] = field(default_factory=deque)
    running: list[ImageJob] = field(default_factory=list)
    images_done: int = 0
    max_waiting: int = IMAGE_MAX_WAITING
    steps_done: int = 0

    def cost(self, job: ImageJob) -> None:
        """Fill in what the job costs: its time alone, its weight and its activations."""
        job.alone = job.remaining = self.model.seconds(self.gpu, job.pixels, job.steps, job.n)
        job.weight = self.model.weight(job.pixels, job.n)
        job.bytes = self.model.bytes_for(job.pixels, job.n)

    def fits_ever(self, job: ImageJob) -> bool:
        return job.bytes <= self.reserve_bytes

    def would_wait_past_cap(self, job: ImageJob) -> bool:
        """True when ``job`` would have to wait and ``max_waiting`` already do."""
        starts_now = not self.queue and self.bytes_in_use + job.bytes <= self.reserve_bytes
        return not starts_now and len(self.queue) >= self.max_waiting

    @property
    def bytes_in_use(self) -> int:
        return sum(j.bytes for j in self.running)

    @property
    def weight(self) -> float:
        """The running images' weight against the rest of the GPU's work."""
        return sum(j.weight for j in self.running)

    @property
    def speed(self) -> float:
        """Each running image's speed, as a fraction of its speed alone on an idle GPU."""
        return min(1.0, 1.0 / (self.others + self.weight)) if self.running else 0.0

    def add(self, job: ImageJob) -> None:
        if not job.alone:
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
        return self.now + min(j.remaining for j in self.running) / self.speed

    def advance(self, to: float) -> list[ImageJob]:
        """Run the pool until ``to``; return the jobs that finished, in order."""
        done: list[ImageJob] = []
        while self.running:
            finish = self.next_finish()
            assert finish is not None
            until = min(finish, to)
            speed = self.speed
            for j in self.running:
                j.remaining -= speed * (until - self.now)
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
    max_waiting: int = EMBED_MAX_WAITING

    @property
    def full(self) -> bool:
        return len(self.queue) >= self.max_waiting

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
