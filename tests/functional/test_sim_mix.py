"""The simulator's embeddings and images over real HTTP: what they cost, what /metrics and the
virtual GPU say about them, what they take from the text engine, and hostile bodies."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuwatch.sim.node import SimNode
from gpuwatch.sim.profiles import BGE_LARGE, SDXL, get_profile
from gpuwatch.sim.server import start_sim
from tests.functional.test_sim_hostile import RAW, assert_openai_error, post
from tests.helpers import eventually

PROFILE = get_profile("rtx4090-llama3-8b-awq")
SCALE = 10.0
IMAGES = "/v1/images/generations"
EMBEDDINGS = "/v1/embeddings"


@pytest.fixture
async def mix() -> AsyncIterator[tuple[SimNode, str]]:
    node, served = await start_sim(
        PROFILE, time_scale=SCALE, seed=3, model_name="sim-model", embed=True, image=True
    )
    yield node, served.url
    await served.close()


async def scrape(url: str) -> dict[str, float]:
    async with aiohttp.ClientSession() as s, s.get(f"{url}/metrics") as r:
        text = await r.text()
    return {
        s.name + json.dumps(s.labels, sort_keys=True): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


async def gpu(url: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as s, s.get(f"{url}/sim/gpu") as r:
        data: dict[str, Any] = (await r.json())["gpus"][0]
        return data


async def ask(url: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    return await post(url, path, json.dumps(body).encode())


async def test_image_cost_is_steps_times_pixels_times_n(mix: tuple[SimNode, str]) -> None:
    _, url = mix
    status, data = await ask(url, IMAGES, {"prompt": "a cat", "size": "1024x1024", "steps": 30})
    assert status == 200 and len(data["data"]) == 1 and data["data"][0]["b64_json"]
    m = await scrape(url)
    alone = SDXL.seconds(PROFILE.gpu, 1024 * 1024, 30, 1) / SCALE
    big = m["sim_image_request_duration_seconds_sum{}"]
    assert alone * 0.97 < big < alone * 1.15, (big, alone)
    # A quarter of the pixels, twice the images, twice the steps: the same cost.
    status, data = await ask(url, IMAGES, {"prompt": "a dog", "size": "512x512", "n": 2,
                                           "steps": 60})  # fmt: skip
    assert status == 200 and len(data["data"]) == 2
    m = await scrape(url)
    small = m["sim_image_request_duration_seconds_sum{}"] - big
    assert abs(small - big) / big < 0.15, (small, big)
    assert m["sim_image_images_total{}"] == 3
    assert m["sim_image_steps_total{}"] == 30 + 2 * 60
    assert m["sim_image_pixels_total{}"] == 1024 * 1024 + 2 * 512 * 512
    assert m['sim_image_requests_total{"outcome": "ok"}'] == 2


async def test_image_vram_by_resolution_and_batch_and_the_gpu_is_busy(
    mix: tuple[SimNode, str],
) -> None:
    node, url = mix
    idle = await gpu(url)
    base = idle["memory_used"]
    # Weights of both side models are held from the start, beside vLLM's smaller share.
    assert base == int(node.profile.cuda_context_bytes + node.profile.usable_bytes) + (
        SDXL.weight_bytes + BGE_LARGE.weight_bytes
    )
    assert base <= idle["memory_total"]
    task = asyncio.create_task(
        ask(url, IMAGES, {"prompt": "x", "size": "1024x768", "n": 2, "steps": 40})
    )
    expected = int(SDXL.activation_bytes * 1024 * 768 / (1024 * 1024) * 2)

    async def holding() -> bool:
        return bool((await gpu(url))["memory_used"] == base + expected)

    await eventually(holding, 30, message="the running image's activations are not in memory")
    m = await scrape(url)
    assert m["sim_image_memory_bytes{}"] == expected
    assert m["sim_image_requests_running{}"] == 1

    async def busy() -> bool:
        return bool((await gpu(url))["utilization_gpu"] >= 90)

    await eventually(busy, 30, message="an image alone does not show as GPU utilization")
    status, _ = await task
    assert status == 200
    assert (await gpu(url))["memory_used"] == base


async def test_images_that_do_not_fit_queue_and_too_big_is_a_400(mix: tuple[SimNode, str]) -> None:
    _, url = mix
    # 5 GiB reserve: two 1024x1024 (2.5 GiB each) run, the third waits for VRAM.
    tasks = [asyncio.create_task(ask(url, IMAGES, {"prompt": "p", "steps": 20}))
             for _ in range(3)]  # fmt: skip

    async def one_waits() -> bool:
        m = await scrape(url)
        return m.get("sim_image_requests_waiting{}") == 1 and (
            m.get("sim_image_requests_running{}") == 2
        )

    await eventually(one_waits, 30, message="the third image did not wait for VRAM")
    assert all(s == 200 for s, _ in await asyncio.gather(*tasks))
    status, data = await ask(url, IMAGES, {"prompt": "p", "size": "2048x2048"})
    message = assert_openai_error(status, data, 400)
    assert "10.0 GiB" in message and "image reserve of 5.0 GiB" in message


async def test_past_the_image_queue_cap_a_request_is_a_429_with_a_reason(
    mix: tuple[SimNode, str],
) -> None:
    """Review 2: the image queue had no cap; each waiter holds a connection and memory."""
    node, url = mix
    assert node.side.images is not None
    node.side.images.max_waiting = 1
    long = {"prompt": "p", "steps": 100}  # about 3 s of wall time for the three at this scale
    tasks = [asyncio.create_task(ask(url, IMAGES, long)) for _ in range(3)]

    async def one_waits() -> bool:
        m = await scrape(url)
        return m.get("sim_image_requests_waiting{}") == 1

    await eventually(one_waits, 30, message="no image was left waiting (max_waiting 1)")
    async with aiohttp.ClientSession() as s, s.post(f"{url}{IMAGES}", json=long) as r:
        status, data, retry = r.status, await r.json(), r.headers.get("Retry-After")
    message = assert_openai_error(status, data, 429)
    assert "image queue is full" in message and "max 1" in message and retry == "5"
    assert (await scrape(url))['sim_image_requests_total{"outcome": "queue_full"}'] == 1
    # The refused one never queued: the three before it all finish.
    assert [s for s, _ in await asyncio.gather(*tasks)] == [200, 200, 200]


async def test_past_the_embeddings_queue_cap_a_request_is_a_429_like_tei_s(
    mix: tuple[SimNode, str],
) -> None:
    """TEI refuses past `max_concurrent_requests` (512) with 429 "Model is overloaded"; the
    simulator's queue had no cap. Here the cap is 0, so the next request is past it."""
    node, url = mix
    assert node.side.embeds is not None
    node.side.embeds.max_waiting = 0
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"{url}{EMBEDDINGS}", json={"input": "a text"}) as r,
    ):
        status, data, retry = r.status, await r.json(), r.headers.get("Retry-After")
    message = assert_openai_error(status, data, 429)
    assert "Model is overloaded" in message and "max 0" in message and retry == "1"
    assert (await scrape(url))['te_request_failure_total{"err": "overloaded"}'] == 1
    node.side.embeds.max_waiting = 512
    status, _ = await ask(url, EMBEDDINGS, {"input": "a text"})
    assert status == 200


async def test_an_image_in_progress_slows_text_decode_by_its_weight(
    mix: tuple[SimNode, str],
) -> None:
    node, url = mix
    body = {"prompt": "hello " * 20, "max_tokens": 60, "ignore_eos": True}

    async def itl_mean() -> float:
        m0 = await scrape(url)
        status, _ = await ask(url, "/v1/completions", body)
        assert status == 200
        m1 = await scrape(url)
        key = 'vllm:inter_token_latency_seconds_{}{{"engine": "0", "model_name": "sim-model"}}'
        total = m1[key.format("sum")] - m0[key.format("sum")]
        return total / (m1[key.format("count")] - m0[key.format("count")])

    alone = await itl_mean()
    image = asyncio.create_task(ask(url, IMAGES, {"prompt": "p", "steps": 200}))
    await eventually(lambda: node.side.weight > 0, 30, message="the image did not start")
    shared = await itl_mean()
    m = await scrape(url)
    assert m["sim_image_gpu_weight{}"] == 1.0
    # One 1024x1024 image weighs as much as the text engine: decode steps take twice as long.
    assert 1.7 < shared / alone < 2.3, (alone, shared)
    # The client goes away: the image is dropped and gives its GPU time back.
    image.cancel()

    async def dropped() -> bool:
        m = await scrape(url)
        return m.get('sim_image_requests_total{"outcome": "abort"}') == 1 and (
            m["sim_image_gpu_weight{}"] == 0
        )

    await eventually(dropped, 30, message="a cancelled image kept its GPU time")


async def test_embeddings_batched_inputs_cost_by_tokens() -> None:
    node, served = await start_sim(PROFILE, time_scale=1.0, seed=4, embed=True)
    url = served.url
    try:
        status, data = await ask(url, EMBEDDINGS, {"input": "one short text"})
        assert status == 200 and len(data["data"]) == 1
        assert len(data["data"][0]["embedding"]) == 1024
        assert data["usage"]["prompt_tokens"] == 4  # 14 characters at 4 a token
        small = (await scrape(url))["te_request_inference_duration_sum{}"]
        inputs = ["w" * 2048] * 32  # 512 tokens each: one full batch of 16,384 tokens
        status, data = await ask(url, EMBEDDINGS, {"input": inputs, "encoding_format": "base64"})
        assert status == 200 and [d["index"] for d in data["data"]] == list(range(32))
        assert data["usage"]["total_tokens"] == 32 * 512
        assert isinstance(data["data"][0]["embedding"], str)
        m = await scrape(url)
        big = m["te_request_inference_duration_sum{}"] - small
        expected = BGE_LARGE.batch_seconds(PROFILE.gpu, 32 * 512)
        assert expected * 0.95 < big < expected * 1.5, (big, expected)
        assert big > 10 * small
        assert m['te_request_count_total{"method": "single"}'] == 1
        assert m['te_request_success_total{"method": "batch"}'] == 1
        assert m["te_request_input_length_count{}"] == 33
        assert m["te_batch_next_tokens_sum{}"] == 4 + 32 * 512
        # Embeddings only: no image model, no image endpoint.
        status, data = await ask(url, IMAGES, {"prompt": "p"})
        assert status == 404
        assert (await gpu(url))["memory_used"] == int(
            node.profile.cuda_context_bytes + node.profile.usable_bytes
        ) + BGE_LARGE.weight_bytes
    finally:
        await served.close()


HOSTILE = {
    "embed no input": (EMBEDDINGS, {"model": "BAAI/bge-large-en-v1.5"}, "input must be"),
    "embed empty list": (EMBEDDINGS, {"input": []}, "input must be"),
    "embed number": (EMBEDDINGS, {"input": 5}, "input must be"),
    "embed mixed list": (EMBEDDINGS, {"input": ["a", {"x": 1}]}, "input[1] must be"),
    "embed too many": (EMBEDDINGS, {"input": ["a"] * 33}, "over max_inputs 32"),
    "embed too long": (EMBEDDINGS, {"input": ["a", "b" * 4000]}, "over max_input_tokens 512"),
    "embed empty string": (EMBEDDINGS, {"input": ["a", ""]}, "input[1] is empty"),
    "embed negative id": (EMBEDDINGS, {"input": [[101, -5]]}, "token id outside 0..30521"),
    "embed huge id": (EMBEDDINGS, {"input": [2**63]}, "token id outside 0..30521"),
    "embed bad encoding": (EMBEDDINGS, {"input": "a", "encoding_format": 1}, "encoding_format"),
    "embed wrong model": (EMBEDDINGS, {"input": "a", "model": "nope"}, "does not exist"),
    "image no prompt": (IMAGES, {"size": "512x512"}, "prompt must be"),
    "image size words": (IMAGES, {"prompt": "p", "size": "big"}, "WIDTHxHEIGHT"),
    "image size odd": (IMAGES, {"prompt": "p", "size": "1001x1024"}, "multiple of 8"),
    "image size huge": (IMAGES, {"prompt": "p", "size": "99999x99999"}, "multiple of 8"),
    "image size digits": (IMAGES, {"prompt": "p", "size": "9" * 5000 + "x8"}, "WIDTHxHEIGHT"),
    "image n zero": (IMAGES, {"prompt": "p", "n": 0}, "n must be between 1 and 10"),
    "image n string": (IMAGES, {"prompt": "p", "n": "2"}, "n must be an integer"),
    "image steps bool": (IMAGES, {"prompt": "p", "steps": True}, "steps must be an integer"),
    "image steps huge": (IMAGES, {"prompt": "p", "steps": 10**9}, "steps must be between"),
    "image format": (IMAGES, {"prompt": "p", "response_format": "gif"}, "response_format"),
}


@pytest.mark.parametrize(("path", "body", "reason"), HOSTILE.values(), ids=HOSTILE.keys())
async def test_hostile_bodies_are_400s_with_a_reason(
    mix: tuple[SimNode, str], path: str, body: dict[str, Any], reason: str
) -> None:
    _, url = mix
    status, data = await ask(url, path, body)
    expected = 404 if "does not exist" in reason else 400
    assert reason in assert_openai_error(status, data, expected)


async def test_undecodable_bodies_are_400s_and_the_node_goes_on(mix: tuple[SimNode, str]) -> None:
    _, url = mix
    for body in RAW.values():
        for path in (EMBEDDINGS, IMAGES):
            status, data = await post(url, path, body)
            assert_openai_error(status, data, 400)
    status, _ = await ask(url, EMBEDDINGS, {"input": "still here"})
    assert status == 200
    m = await scrape(url)
    assert m['te_request_failure_total{"err": "validation"}'] == len(RAW)


async def test_models_lists_every_served_model(mix: tuple[SimNode, str]) -> None:
    _, url = mix
    async with aiohttp.ClientSession() as s, s.get(f"{url}/v1/models") as r:
        ids = [m["id"] for m in (await r.json())["data"]]
    assert ids == ["sim-model", BGE_LARGE.name, SDXL.name]


def test_sim_cli_refuses_unknown_workloads_and_a_mix_that_does_not_fit() -> None:
    import subprocess
    import sys

    def sim(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gpuwatch", "sim", "--listen", "127.0.0.1:0",
                               *args], capture_output=True, text=True, timeout=30)  # fmt: skip

    bad = sim("--workloads", "embed,video")
    assert bad.returncode == 2 and "unknown 'video' (known: embed, image)" in bad.stderr
    # 67.7 GiB of 70B weights leave no room for SDXL and its reserve on an 80 GB H100.
    full = sim("--profile", "h100-llama3-70b-fp8", "--workloads", "image")
    assert full.returncode == 2 and "weights 67.7 GiB > usable" in full.stderr
    assert "Traceback" not in bad.stderr + full.stderr
