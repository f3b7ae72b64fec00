"""The pure model of images and embeddings on the text engine's GPU (gpuwatch/sim/sidework.py):
what a request costs, how time slicing shares the GPU, what waits for VRAM."""

from __future__ import annotations

import pytest

from gpuwatch.sim.profiles import BGE_LARGE, GIB, RTX4090, SDXL
from gpuwatch.sim.sidework import EmbedJob, EmbedQueue, ImageJob, ImagePool, text_slowdown

MP = 1024 * 1024


def job(name: str, w: int = 1024, h: int = 1024, steps: int = 30, n: int = 1) -> ImageJob:
    return ImageJob(name, w, h, steps, n, arrival=0.0)


def test_cost_is_steps_times_pixels_times_n_and_vram_by_resolution_and_batch() -> None:
    one = SDXL.seconds(RTX4090, MP, 30, 1)
    assert one == pytest.approx((30 * 11e12 + 15e12) / (165.2e12 * 0.45))
    assert SDXL.seconds(RTX4090, MP // 4, 60, 2) == pytest.approx(
        one * 0.5 * (60 * 11 + 15) / (30 * 11 + 15)
    )
    assert SDXL.bytes_for(MP, 2) == 5 * GIB and SDXL.bytes_for(512 * 512, 1) == GIB * 5 // 8
    assert SDXL.weight(512 * 512, 1) == 0.25 and SDXL.weight(2048 * 2048, 1) == 1.0


def test_time_slicing_one_image_halves_chat_two_make_it_a_third() -> None:
    pool = ImagePool(SDXL, RTX4090, 5 * GIB)
    pool.others = 1.0  # the text engine is busy
    pool.add(job("a"))
    assert text_slowdown(pool.weight) == 2.0 and pool.speed == 0.5
    pool.add(job("b"))
    assert text_slowdown(pool.weight) == 3.0 and pool.speed == pytest.approx(1 / 3)
    pool.add(job("c"))  # 7.5 GiB of activations would not fit in 5
    assert len(pool.running) == 2 and len(pool.queue) == 1 and pool.bytes_in_use == 5 * GIB
    alone = SDXL.seconds(RTX4090, MP, 30, 1)
    done = pool.advance(3 * alone - 1e-6)
    assert done == []
    done = pool.advance(3 * alone + 1e-6)
    assert [j.rid for j in done] == ["a", "b"] and [j.rid for j in pool.running] == ["c"]
    assert pool.images_done == 2 and pool.steps_done == 60


def test_an_image_alone_on_an_idle_gpu_runs_at_full_speed_and_small_ones_weigh_less() -> None:
    pool = ImagePool(SDXL, RTX4090, 5 * GIB)
    small = job("s", 512, 512)
    pool.add(small)
    assert pool.speed == 1.0
    pool.others = 1.0
    assert pool.speed == pytest.approx(1 / 1.25) and text_slowdown(pool.weight) == 1.25
    assert pool.abort(small) and pool.weight == 0 and not pool.abort(small)


def test_embedding_batches_take_whole_requests_up_to_the_token_budget() -> None:
    queue = EmbedQueue(BGE_LARGE, RTX4090)
    for i, sizes in enumerate(([512] * 16, [512] * 16, [100])):
        queue.add(EmbedJob(str(i), list(sizes), arrival=0.0))
    batch, tokens, seconds = queue.next_batch()
    assert [j.rid for j in batch] == ["0", "1"] and tokens == 16384
    assert seconds == pytest.approx(0.002 + 2 * 335e6 * 16384 / (165.2e12 * 0.5))
    assert BGE_LARGE.weight(tokens) == 1.0
    batch, tokens, _ = queue.next_batch()
    assert [j.rid for j in batch] == ["2"] and tokens == 100
    assert queue.next_batch() == ([], 0, 0.0)


def test_the_demo_runs_the_mix_each_profile_holds() -> None:
    from gpuwatch.demo import fitting_workloads
    from gpuwatch.sim.profiles import PROFILES, ProfileError, with_side_models

    assert fitting_workloads(None) == ("embed", "image")
    # 70B FP8 on an 80 GB H100: no room for SDXL and its reserve, embeddings fit.
    assert fitting_workloads("h100-llama3-70b-fp8") == ("embed",)
    with pytest.raises(ProfileError, match=r"weights 67\.7 GiB > usable"):
        with_side_models(PROFILES["h100-llama3-70b-fp8"], embed=True, image=True)
    shared = with_side_models(PROFILES["rtx4090-llama3-8b-awq"], embed=True, image=True)
    assert shared.gpu_memory_utilization == 0.47 and shared.kv_tokens == 40_720


def test_the_image_queue_is_capped_and_a_request_that_starts_now_is_never_refused() -> None:
    """Review 2: the queue had no bound; each waiter holds a connection and memory."""
    pool = ImagePool(SDXL, RTX4090, 5 * GIB, max_waiting=1)
    for name in "ab":  # 2.5 GiB each: both run
        assert not pool.would_wait_past_cap(job(name))
        pool.add(job(name))
    assert not pool.would_wait_past_cap(job("c"))  # waits, the first to
    pool.add(job("c"))
    assert pool.would_wait_past_cap(job("d")) and pool.would_wait_past_cap(job("tiny", 8, 8))
    pool.abort(pool.running[0])  # c starts: the queue has room again
    assert not pool.would_wait_past_cap(job("d"))


async def test_an_aborted_image_credits_the_others_up_to_the_abort_first() -> None:
    """Review 2: siderun removed a running image without running the pool up to now, so the
    others were credited at their speed without it for time they ran beside it, and a waiter
    let in got the last tick's time as its start. Deterministic: the clock is ours and no pool
    task runs."""
    import asyncio

    from prometheus_client import CollectorRegistry

    from gpuwatch.sim.gpu import VirtualGpu
    from gpuwatch.sim.profiles import DEFAULT_PROFILE, get_profile
    from gpuwatch.sim.siderun import SideWork

    now = [0.0]
    profile = get_profile(DEFAULT_PROFILE)
    side = SideWork(
        profile, VirtualGpu(profile, 0), CollectorRegistry(), lambda: now[0], 1.0,
        lambda: False, embed=False, image=True, image_reserve=5 * GIB,
    )  # fmt: skip
    jobs = [side.new_image(1024, 1024, 30, 1) for _ in range(3)]
    tasks = [asyncio.create_task(side.generate(j)) for j in jobs]
    await asyncio.sleep(0)
    pool = side.images
    assert pool is not None and pool.running == jobs[:2] and list(pool.queue) == [jobs[2]]
    now[0] = 1.0
    tasks[1].cancel()
    await asyncio.gather(tasks[1], return_exceptions=True)
    # One second at half speed (two images of weight 1 shared the GPU), then b left.
    assert jobs[0].remaining == pytest.approx(jobs[0].alone - 0.5)
    assert jobs[2].started == 1.0 and pool.running == [jobs[0], jobs[2]]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
