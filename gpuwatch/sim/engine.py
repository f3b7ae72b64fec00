"""A continuous-batching engine on a virtual GPU: pure, clock-free, deterministic for a seed.

Each ``step()`` follows vLLM V1's scheduler: a token budget of ``max_num_batched_tokens``;
running requests first (a decode token each, or the next prefill chunk), preempting the most
recently admitted running request when no KV block is free; then waiting requests first come
first served while the budget, ``max_num_seqs`` and free blocks allow. The step's duration comes
from a roofline: memory time (weights + KV read) against compute time (2 x params x tokens).

Times are simulated seconds; the server maps them to the wall clock.
"""

from __future__ import annotations

import random
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from enum import Enum

from gpuwatch.sim.profiles import Profile


class Finish(str, Enum):
    LENGTH = "length"
    STOP = "stop"
    ABORT = "abort"


@dataclass(eq=False)
class Request:
    rid: str
    prompt_len: int
    max_output: int
    arrival: float
    block_hashes: tuple[int, ...] = ()
    # A natural end (EOS) before max_output, decided by the caller's seeded draw.
    eos_at: int | None = None
    computed: int = 0
    output: int = 0
    hashed: list[int] = field(default_factory=list)
    private: int = 0
    admitted_seq: int = -1
    first_scheduled: float | None = None
    first_token: float | None = None
    last_token: float | None = None
    finish: Finish | None = None
    preemptions: int = 0

    @property
    def target(self) -> int:
        """Tokens whose KV must exist before the next token can be sampled."""
        return self.prompt_len + self.output

    @property
    def blocks(self) -> int:
        return len(self.hashed) + self.private


@dataclass
class Event:
    kind: str  # "scheduled" | "token" | "finished" | "preempted"
    request: Request
    time: float
    gap: float | None = None  # for a token after the first: time since the previous one


@dataclass
class StepResult:
    duration: float
    start: float
    tokens: int
    prefill_tokens: int
    decode_tokens: int
    kv_read_bytes: int
    events: list[Event]
    # How compute-bound the step was (0 = all memory traffic, 1 = all math): power follows it.
    intensity: float = 0.0


class Engine:
    def __init__(self, profile: Profile, seed: int = 0, prefix_caching: bool = True) -> None:
        self.profile = profile
        self.block_size = profile.block_size
        self.total_blocks = profile.num_blocks
        self.rng = random.Random(seed)
        self.prefix_caching = prefix_caching
        self.now = 0.0
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.used_blocks = 0
        self.block_ref: dict[int, int] = {}
        # Hashes of freed blocks whose contents are kept until their block is reused (LRU).
        self.cached_free: OrderedDict[int, None] = OrderedDict()
        self._seq = 0
        # Totals: the server's counters and the tests' invariants read these.
        self.blocks_allocated = 0
        self.blocks_freed = 0
        self.preemptions = 0
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.steps = 0
        # Other work on the same GPU (images, embeddings) stretches every step by this factor;
        # the node sets it before each step (gpuwatch/sim/sidework.py, text_slowdown).
        self.slowdown = 1.0

    # -- requests -------------------------------------------------------------------------

    def add(self, request: Request) -> None:
        if request.prompt_len + request.max_output > self.profile.model.max_model_len:
            raise ValueError("request longer than max_model_len")
        self.waiting.append(request)

    def abort(self, request: Request) -> bool:
        """Drop a request wherever it is; its blocks are freed at once."""
        if request.finish is not None:
            return False
        if request in self.running:
            self.running.remove(request)
        elif request in self.waiting:
            self.waiting.remove(request)
        else:
            return False
        self._free(request)
        request.finish = Finish.ABORT
        return True

    @property
    def idle(self) -> bool:
        return not self.running and not self.waiting

    @property
    def kv_usage(self) -> float:
        return self.used_blocks / self.total_blocks if self.total_blocks else 0.0

    # -- blocks ---------------------------------------------------------------------------

    @property
    def free_blocks(self) -> int:
        return self.total_blocks - self.used_blocks

    def _take_block(self) -> None:
        uncached_free = self.free_blocks - len(self.cached_free)
        if uncached_free <= 0:
            self.cached_free.popitem(last=False)  # evict the least recently freed contents
        self.used_blocks += 1
        self.blocks_allocated += 1

    def _allocate(self, req: Request, n: int) -> None:
        for _ in range(n):
            self._take_block()
        req.private += n

    def _free(self, req: Request) -> None:
        for h in req.hashed:
            self.block_ref[h] -= 1
            if self.block_ref[h] == 0:
                del self.block_ref[h]
                self.cached_free[h] = None
                self.used_blocks -= 1
                self.blocks_freed += 1
        self.used_blocks -= req.private
        self.blocks_freed += req.private
        req.hashed = []
        req.private = 0

    def _blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def _register_full_blocks(self, req: Request) -> None:
        """Publish newly completed prompt blocks so later requests can share them."""
        if not self.prefix_caching:
            return
        full = min(req.computed, req.prompt_len) // self.block_size
        while len(req.hashed) < min(full, len(req.block_hashes)) and req.private > 0:
            h = req.block_hashes[len(req.hashed)]
            if h in self.block_ref or h in self.cached_free:
                break
            self.block_ref[h] = 1
            req.hashed.append(h)
            req.private -= 1

    def _cache_hits(self, req: Request) -> list[int]:
        if not self.prefix_caching:
            return []
        # The last prompt token is always computed: its logits give the first output token.
        limit = min(len(req.block_hashes), (req.prompt_len - 1) // self.block_size)
        hits = []
        for h in req.block_hashes[:limit]:
            if h not in self.block_ref and h not in self.cached_free:
                break
            hits.append(h)
        return hits

    # -- scheduling -----------------------------------------------------------------------

    def _preempt_last(self, events: list[Event]) -> Request:
        """Preempt the most recently admitted running request (recompute later, like V1)."""
        victim = self.running.pop()
        self._free(victim)
        victim.computed = 0
        victim.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(victim)
        events.append(Event("preempted", victim, self.now))
        return victim

    def _schedule(self, events: list[Event]) -> list[tuple[Request, int]]:
        budget = self.profile.max_num_batched_tokens
        scheduled: list[tuple[Request, int]] = []
        running = self.running
        i = 0
        # Preemption takes from the end of ``running``, which this loop has not reached yet.
        while i < len(running) and budget > 0:
            req = running[i]
            n = min(req.target - req.computed, budget)
            need = self._blocks_for(req.computed + n) - req.blocks
            while need > self.free_blocks and self._preempt_last(events) is not req:
                pass
            if i >= len(running):  # req itself was the last one and got preempted
                break
            if need > 0:
                self._allocate(req, need)
            scheduled.append((req, n))
            budget -= n
            i += 1
        while self.waiting and budget > 0 and len(self.running) < self.profile.max_num_seqs:
            req = self.waiting[0]
            if req.arrival > self.now:
                break  # not arrived yet at this engine's clock
            hits = self._cache_hits(req)
            computed = len(hits) * self.block_size
            n = min(req.target - computed, budget)
            retake = sum(1 for h in hits if h not in self.block_ref)
            need = self._blocks_for(computed + n) - len(hits)
            if need + retake > self.free_blocks:
                break
            self.waiting.popleft()
            for h in hits:
                if h in self.block_ref:
                    self.block_ref[h] += 1
                else:
                    del self.cached_free[h]
                    self.block_ref[h] = 1
                    self.used_blocks += 1
                    self.blocks_allocated += 1
            req.hashed = list(hits)
            req.computed = computed
            self._allocate(req, need)
            self.prefix_queries += req.prompt_len
            self.prefix_hits += computed
            self._seq += 1
            req.admitted_seq = self._seq
            self.running.append(req)
            if req.first_scheduled is None:
                req.first_scheduled = self.now
                events.append(Event("scheduled", req, self.now))
            scheduled.append((req, n))
            budget -= n
        return scheduled

    def roofline(self, tokens: int, kv_read_bytes: int) -> tuple[float, float]:
        """(memory time, compute time) of a step, in seconds."""
        p = self.profile
        memory = (p.model.weight_bytes + kv_read_bytes) / (
            p.gpu.bandwidth_bytes_s * p.bandwidth_efficiency
        )
        compute = 2 * p.model.params * tokens / (p.gpu.fp16_flops * p.compute_efficiency)
        return memory, compute

    def step_duration(self, tokens: int, kv_read_bytes: int) -> float:
        memory, compute = self.roofline(tokens, kv_read_bytes)
        noise = max(0.9, min(1.1, 1 + self.rng.gauss(0, 0.02)))
        return (self.profile.step_overhead_s + max(memory, compute)) * noise * self.slowdown

    def step(self) -> StepResult:
        """Advance one scheduler step; return what happened (tokens, finishes, preemptions)."""
        events: list[Event] = []
        scheduled = self._schedule(events)
        if not scheduled and not self.running and self.waiting:
            # Nothing to do until the next request arrives: an idle GPU skips ahead to it.
            self.now = max(self.now, self.waiting[0].arrival)
            scheduled = self._schedule(events)
        start = self.now
        if not scheduled:
            return StepResult(0.0, start, 0, 0, 0, 0, events)
        kv_per_token = self.profile.model.kv_bytes_per_token
        tokens = prefill = 0
        kv_read = 0
        for req, n in scheduled:
            tokens += n
            if req.target - req.computed > 1 or req.output == 0:
                prefill += n
            kv_read += (req.computed + n) * kv_per_token
        duration = self.step_duration(tokens, kv_read)
        self.now += duration
        self.steps += 1
        for req, n in scheduled:
            req.computed += n
            self._register_full_blocks(req)
            if req.computed < req.target:
                continue  # a prefill chunk; no token sampled yet
            req.output += 1
            gap = None if req.last_token is None else self.now - req.last_token
            if req.first_token is None:
                req.first_token = self.now
            req.last_token = self.now
            events.append(Event("token", req, self.now, gap))
            length = req.output >= req.max_output
            if length or (req.eos_at is not None and req.output >= req.eos_at):
                self.running.remove(req)
                self._free(req)
                req.finish = Finish.LENGTH if length else Finish.STOP
                events.append(Event("finished", req, self.now))
        memory, compute = self.roofline(tokens, kv_read)
        intensity = compute / max(memory, compute)
        return StepResult(
            duration, start, tokens, prefill, tokens - prefill, kv_read, events, intensity
        )
