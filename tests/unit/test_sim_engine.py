"""The simulator's engine: pure, clock-free, no sockets."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from gpuwatch.sim.engine import Engine, Finish, Request
from gpuwatch.sim.profiles import GIB, PROFILES, Profile, ProfileError, get_profile

SMALL = get_profile("h100-llama3-70b-fp8")  # 1,054 blocks: easy to oversubscribe
BIG = get_profile("rtx4090-llama3-8b-awq")  # 7,829 blocks


def run_to_idle(
    engine: Engine, check: Callable[[Engine], None] | None = None, limit: int = 200_000
) -> int:
    steps = 0
    while not engine.idle:
        engine.step()
        steps += 1
        if check:
            check(engine)
        assert steps < limit, "engine did not drain"
    return steps


def invariants(engine: Engine) -> None:
    assert 0 <= engine.used_blocks <= engine.total_blocks
    assert engine.free_blocks >= len(engine.cached_free) >= 0
    held = sum(r.private for r in engine.running) + len(engine.block_ref)
    assert held == engine.used_blocks
    for req in engine.running:
        assert req.private >= 0 and req.computed >= 0
        assert req.blocks * engine.block_size >= req.computed
    assert all(r.blocks == 0 for r in engine.waiting)
    assert len(engine.running) <= engine.profile.max_num_seqs


def test_blocks_allocated_equal_blocks_freed_and_counts_stay_valid() -> None:
    engine = Engine(SMALL, seed=3)
    rng = random.Random(3)
    for i in range(120):
        engine.add(Request(f"r{i}", rng.randint(50, 3000), rng.randint(10, 800), 0.0))
    run_to_idle(engine, invariants)
    assert engine.blocks_allocated == engine.blocks_freed > 0
    assert engine.used_blocks == 0 and engine.block_ref == {}


def test_preemption_only_when_the_kv_pool_is_oversubscribed() -> None:
    light = Engine(SMALL, seed=1)
    for i in range(8):  # 8 x 600 tokens = 4,800 of 16,864
        light.add(Request(f"r{i}", 300, 300, 0.0))
    run_to_idle(light, invariants)
    assert light.preemptions == 0

    heavy = Engine(SMALL, seed=1)
    for i in range(40):  # 40 x 1,200 tokens = 48,000 of 16,864
        heavy.add(Request(f"r{i}", 200, 1000, 0.0))
    run_to_idle(heavy, invariants)
    assert heavy.preemptions > 0
    # Preempted requests are recomputed and still finish with every token they asked for.
    assert heavy.blocks_allocated == heavy.blocks_freed


def test_preemption_takes_the_most_recently_admitted_request() -> None:
    engine = Engine(SMALL, seed=1)
    reqs = [Request(f"r{i}", 200, 2000, 0.0) for i in range(20)]
    for r in reqs:
        engine.add(r)
    while engine.preemptions == 0:
        events = engine.step().events
    victims = [e.request for e in events if e.kind == "preempted"]
    admitted = sorted((r for r in reqs if r.admitted_seq > 0), key=lambda r: r.admitted_seq)
    assert victims[0] is admitted[-1]
    assert engine.waiting[0] is victims[-1]  # back at the head of the queue


def poisson_ttft_p99(rate: float, seed: int, n: int = 400) -> float:
    engine = Engine(BIG, seed=seed)
    rng = random.Random(seed)
    t, arrivals = 0.0, []
    for i in range(n):
        t += rng.expovariate(rate)
        arrivals.append(Request(f"r{i}", rng.randint(200, 1500), rng.randint(50, 400), t))
    done: list[Request] = []
    pending = list(arrivals)
    while pending or not engine.idle:
        while pending and pending[0].arrival <= engine.now:
            engine.add(pending.pop(0))
        if engine.idle:
            engine.now = pending[0].arrival
            continue
        for ev in engine.step().events:
            if ev.kind == "finished":
                done.append(ev.request)
    ttfts = sorted(r.first_token - r.arrival for r in done if r.first_token is not None)
    assert len(ttfts) == len(done)  # each finished request had its first token
    return ttfts[int(0.99 * len(ttfts)) - 1]


def test_ttft_p99_grows_with_offered_load() -> None:
    low = poisson_ttft_p99(rate=1.0, seed=11)
    mid = poisson_ttft_p99(rate=8.0, seed=11)
    high = poisson_ttft_p99(rate=40.0, seed=11)
    assert low < mid < high
    assert high > 10 * low  # loose admission: the tail explodes, not drifts


def test_prefix_cache_hits_identical_leading_blocks() -> None:
    engine = Engine(BIG, seed=0)
    shared = tuple(range(1, 41))  # 40 full blocks of identical prompt text
    first = Request("a", 40 * 16 + 5, 4, 0.0, block_hashes=shared)
    engine.add(first)
    run_to_idle(engine)
    second = Request("b", 40 * 16 + 5, 4, engine.now, block_hashes=shared)
    engine.add(second)
    engine.step()
    assert engine.prefix_hits == 40 * 16
    assert engine.prefix_queries == 2 * (40 * 16 + 5)
    run_to_idle(engine, invariants)
    assert engine.blocks_allocated == engine.blocks_freed


def test_prefix_hit_leaves_the_last_prompt_token_to_compute() -> None:
    engine = Engine(BIG, seed=0)
    hashes = (7, 8)
    engine.add(Request("a", 32, 2, 0.0, block_hashes=hashes))
    run_to_idle(engine)
    b = Request("b", 32, 2, engine.now, block_hashes=hashes)
    engine.add(b)
    engine.step()
    assert engine.prefix_hits == 16  # not 32: the last token must be computed for its logits


def test_abort_frees_blocks_at_once() -> None:
    engine = Engine(BIG, seed=0)
    req = Request("a", 3000, 500, 0.0)
    engine.add(req)
    engine.step()
    assert engine.used_blocks > 0
    assert engine.abort(req) is True
    assert engine.used_blocks == 0 and req.finish is Finish.ABORT and engine.idle
    assert engine.abort(req) is False


def test_chunked_prefill_respects_the_token_budget() -> None:
    engine = Engine(BIG, seed=0)
    req = Request("a", 5000, 3, 0.0)
    engine.add(req)
    result = engine.step()
    assert result.tokens == BIG.max_num_batched_tokens == 2048
    assert req.output == 0  # no token before the prompt is fully computed
    engine.step()
    engine.step()
    assert req.computed == 5000 and req.output == 1


def test_step_time_follows_the_roofline() -> None:
    engine = Engine(BIG, seed=0)
    weights = BIG.model.weight_bytes / (BIG.gpu.bandwidth_bytes_s * BIG.bandwidth_efficiency)
    decode = engine.step_duration(1, 0)
    assert decode == pytest.approx(BIG.step_overhead_s + weights, rel=0.1)
    compute = 2 * BIG.model.params * 2048 / (BIG.gpu.fp16_flops * BIG.compute_efficiency)
    prefill = engine.step_duration(2048, 0)
    assert compute > weights and prefill == pytest.approx(BIG.step_overhead_s + compute, rel=0.1)


def test_deterministic_for_a_seed() -> None:
    def trace(seed: int) -> list[tuple[float, list[tuple[str, str]]]]:
        engine = Engine(SMALL, seed=seed)
        for i in range(30):
            engine.add(Request(f"r{i}", 100 + 37 * i, 50 + 11 * i, 0.0))
        out = []
        while not engine.idle:
            r = engine.step()
            out.append((r.duration, [(e.kind, e.request.rid) for e in r.events]))
        return out

    assert trace(5) == trace(5)
    assert trace(5) != trace(6)


def test_eos_before_max_tokens_finishes_with_stop() -> None:
    engine = Engine(BIG, seed=0)
    req = Request("a", 10, 100, 0.0, eos_at=7)
    engine.add(req)
    run_to_idle(engine)
    assert (req.output, req.finish) == (7, Finish.STOP)


def test_profiles_have_sane_derived_numbers() -> None:
    p = get_profile("rtx4090-llama3-8b-awq")
    assert p.model.kv_bytes_per_token == 128 * 1024
    assert p.usable_bytes == pytest.approx(21.6 * GIB)
    assert p.num_blocks == int(
        (p.usable_bytes - p.model.weight_bytes - p.activation_bytes) // (16 * 128 * 1024)
    )
    for profile in PROFILES.values():
        profile.validate()


def test_profile_whose_weights_do_not_fit_says_the_arithmetic() -> None:
    too_big = Profile("4090-70b", BIG.gpu, SMALL.model)
    with pytest.raises(ProfileError, match=r"weights 67\.7 GiB > usable 21\.6 GiB"):
        too_big.validate()
    with pytest.raises(ProfileError, match="unknown profile 'nope'"):
        get_profile("nope")
