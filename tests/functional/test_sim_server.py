"""The simulator as a server: real HTTP on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuwatch.model import GpuReading
from gpuwatch.sim.node import SimNode
from gpuwatch.sim.profiles import get_profile
from gpuwatch.sim.server import start_sim
from gpuwatch.sources.nvml import FakeNvml, NvmlReader, SimGpuSource
from gpuwatch.sources.scrape import map_page
from tests.conftest import fixture_text
from tests.helpers import eventually

PROFILE = get_profile("rtx4090-llama3-8b-awq")


async def metrics(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    async with session.get(f"{url}/metrics") as resp:
        text = await resp.text()
    return {
        (s.name + json.dumps(s.labels, sort_keys=True)): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def value(m: dict[str, float], name: str, **labels: str) -> float:
    key = name + json.dumps({"engine": "0", "model_name": "sim-model", **labels}, sort_keys=True)
    return m[key]


def families(text: str) -> dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]]:
    """name -> (type, label names, bucket bounds) for vllm:* families."""
    out = {}
    for fam in text_string_to_metric_families(text):
        if not fam.name.startswith("vllm:") or fam.name.endswith("_created"):
            continue
        labels = tuple(sorted({k for s in fam.samples for k in s.labels if k != "le"}))
        bounds = tuple(
            s.labels["le"]
            for s in fam.samples
            if s.name.endswith("_bucket") and s.labels.get("engine", "0") == "0"
        )
        out[fam.name] = (fam.type, labels, bounds)
    return out


async def test_metrics_match_the_real_vllm_v1_scrape_family_by_family(
    sim: tuple[SimNode, str],
) -> None:
    _, url = sim
    async with aiohttp.ClientSession() as s, s.get(f"{url}/metrics") as resp:
        ours = families(await resp.text())
    real = families(fixture_text("vllm-3.prom"))
    wanted = {
        "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
        "vllm:num_preemptions", "vllm:prompt_tokens", "vllm:generation_tokens",
        "vllm:request_success", "vllm:prefix_cache_queries", "vllm:prefix_cache_hits",
        "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
        "vllm:request_prompt_tokens", "vllm:request_generation_tokens",
        "vllm:iteration_tokens_total", "vllm:request_params_n",
    }  # fmt: skip
    for name in sorted(wanted):
        assert name in real, name
        ours_type, ours_labels, ours_bounds = ours[name]
        real_type, real_labels, real_bounds = real[name]
        assert ours_type == real_type, name
        assert ours_labels == real_labels, name
        if name in {"vllm:request_prompt_tokens", "vllm:request_generation_tokens"}:
            # 1-2-5 buckets up to max_model_len: theirs is 40960, ours 16384.
            assert real_bounds[: len(ours_bounds) - 1] == ours_bounds[:-1], name
        else:
            assert ours_bounds == real_bounds, name
    # The families only V1 pages beyond the fixture's excerpt carry are there too.
    for name in ("vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
                 "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
                 "vllm:cache_config_info"):  # fmt: skip
        assert name in ours


async def test_streaming_completion_and_the_data_layer_reads_it_as_vllm(
    sim: tuple[SimNode, str],
) -> None:
    _, url = sim
    body = {"model": "sim-model", "prompt": "x" * 400, "max_tokens": 12, "stream": True,
            "stream_options": {"include_usage": True}, "ignore_eos": True}  # fmt: skip
    chunks = []
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{url}/v1/completions", json=body) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            async for line in resp.content:
                if line.startswith(b"data: "):
                    chunks.append(line[6:].strip())
        async with s.get(f"{url}/metrics") as resp:
            page = await resp.text()
    assert chunks[-1] == b"[DONE]"
    parsed = [json.loads(c) for c in chunks[:-1]]
    texts = [p["choices"][0]["text"] for p in parsed if p["choices"] and p["choices"][0]["text"]]
    assert len(texts) == 12
    assert parsed[-2]["choices"][0]["finish_reason"] == "length"
    assert parsed[-1]["usage"] == {
        "prompt_tokens": 100,
        "completion_tokens": 12,
        "total_tokens": 112,
    }
    [engine] = map_page(url, page).engines
    assert (engine.dialect, engine.model) == ("vllm", "sim-model")
    assert engine.generation_tokens_total == 12 and engine.prompt_tokens_total == 100
    assert engine.histograms["ttft"].count == 1
    assert engine.histograms["itl"].count == 11
    assert engine.histograms["e2e"].count == 1 and engine.running == 0
    # V1's deprecated TPOT family (what vLLM's Grafana dashboard reads): the same 11 gaps, in
    # the inter-token latency buckets of a real V1 page.
    real_itl_bounds = families(fixture_text("vllm-3.prom"))["vllm:inter_token_latency_seconds"][2]
    assert families(page)["vllm:time_per_output_token_seconds"] == (
        "histogram",
        ("engine", "model_name"),
        real_itl_bounds,
    )
    samples = {
        s.name: s.value
        for f in text_string_to_metric_families(page)
        for s in f.samples
        if s.name.startswith("vllm:time_per_output_token_seconds")
    }
    assert samples["vllm:time_per_output_token_seconds_count"] == 11


async def test_chat_non_streaming(sim: tuple[SimNode, str]) -> None:
    _, url = sim
    body = {
        "messages": [{"role": "user", "content": "hello there"}],
        "max_tokens": 5,
        "ignore_eos": True,
    }
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"{url}/v1/chat/completions", json=body) as resp,
    ):
        data = await resp.json()
    assert resp.status == 200 and data["object"] == "chat.completion"
    assert data["choices"][0]["message"]["role"] == "assistant"
    assert len(data["choices"][0]["message"]["content"].split()) == 5
    assert data["usage"]["completion_tokens"] == 5


@pytest.mark.parametrize(
    ("path", "body", "status", "message"),
    [
        (
            "/v1/completions",
            {"prompt": "x" * 70000, "max_tokens": 1},
            400,
            "maximum context length is 16384",
        ),
        ("/v1/completions", {"prompt": "hi", "max_tokens": 16384}, 400, "maximum context length"),
        ("/v1/completions", {"prompt": "hi", "n": 2}, 400, "n > 1"),
        (
            "/v1/completions",
            {"prompt": "hi", "model": "other"},
            404,
            "The model `other` does not exist.",
        ),
        ("/v1/chat/completions", {"messages": []}, 400, "messages must be a non-empty list"),
    ],
)
async def test_bad_requests_get_openai_errors_with_vllm_status(
    sim: tuple[SimNode, str], path: str, body: dict[str, object], status: int, message: str
) -> None:
    node, url = sim
    async with aiohttp.ClientSession() as s, s.post(url + path, json=body) as resp:
        data = await resp.json()
    assert resp.status == status
    assert message in data["error"]["message"] and data["error"]["code"] == status
    assert node.engines[0].idle


async def test_client_disconnect_aborts_and_frees_blocks(sim: tuple[SimNode, str]) -> None:
    node, url = sim
    body = {"prompt": "y" * 8000, "max_tokens": 4000, "stream": True, "ignore_eos": True}
    session = aiohttp.ClientSession()
    resp = await session.post(f"{url}/v1/completions", json=body)
    await resp.content.readline()  # the first token has arrived: blocks are held
    engine = node.engines[0]
    assert engine.used_blocks > 0 and len(engine.running) == 1
    resp.close()
    await session.close()

    async def freed() -> dict[str, float] | bool:
        async with aiohttp.ClientSession() as s:
            m = await metrics(s, url)
        return (
            engine.used_blocks == 0
            and value(m, "vllm:request_success_total", finished_reason="abort") == 1
            and m
        )

    m = await eventually(freed, 30)
    assert value(m, "vllm:num_requests_running") == 0
    assert value(m, "vllm:kv_cache_usage_perc") == 0
    assert engine.blocks_allocated == engine.blocks_freed


async def test_time_scale_runs_faster_than_real_time() -> None:
    node, served = await start_sim(PROFILE, time_scale=20.0, seed=1)
    try:
        body = {"prompt": "z" * 40, "max_tokens": 200, "ignore_eos": True}
        started = time.monotonic()
        async with (
            aiohttp.ClientSession() as s,
            s.post(f"{served.url}/v1/completions", json=body) as resp,
        ):
            assert resp.status == 200
        wall = time.monotonic() - started
        sim_seconds = node.engines[0].now
        # 200 decode steps of ~9 ms simulated: ~1.8 s simulated, ~0.09 s at x20.
        assert sim_seconds > 1.0
        assert wall < sim_seconds / 5
        async with aiohttp.ClientSession() as s:
            m = await metrics(s, served.url)
        e2e = m[
            'vllm:e2e_request_latency_seconds_sum{"engine": "0", "model_name": "'
            + node.model_name
            + '"}'
        ]
        assert e2e == pytest.approx(wall, abs=0.05)  # metrics are in wall-clock seconds
    finally:
        await served.close()


async def test_virtual_gpu_through_the_nvml_fake_backend() -> None:
    _, served = await start_sim(PROFILE, engines=2, time_scale=10.0, seed=2)
    try:
        reader = NvmlReader(FakeNvml(SimGpuSource(f"{served.url}/sim/gpu")))
        idle = await asyncio.to_thread(reader.read)
        assert idle.error is None and len(idle.gpus) == 2
        g = idle.gpus[0]
        assert g.name == "NVIDIA GeForce RTX 4090" and g.memory_total_bytes == 24 * 2**30
        # Flat and nearly full: context + weights + the whole KV pool, with no load at all.
        assert g.memory_used_bytes is not None
        assert 0.9 < g.memory_used_bytes / g.memory_total_bytes < 0.95
        assert g.utilization_gpu == 0 and g.processes[0].pid > 0
        assert g.processes[0].used_memory_bytes == g.memory_used_bytes
        body = {"prompt": "w" * 400, "max_tokens": 3000, "stream": True, "ignore_eos": True}
        async with aiohttp.ClientSession() as s:
            resps = [await s.post(f"{served.url}/v1/completions", json=body) for _ in range(4)]

            async def busy() -> GpuReading | None:
                reading = await asyncio.to_thread(reader.read)
                return (
                    reading
                    if all(x.utilization_gpu and x.utilization_gpu > 0.5 for x in reading.gpus)
                    else None
                )

            loaded = await eventually(busy, 30)
            for r in resps:
                r.close()
        assert loaded.gpus[0].memory_used_bytes == g.memory_used_bytes  # still flat under load
        assert loaded.gpus[0].power_w > g.power_w
        async with aiohttp.ClientSession() as s, s.get(f"{served.url}/metrics") as resp:
            page = await resp.text()
        assert 'vllm:num_requests_running{engine="1",model_name=' in page
    finally:
        await served.close()


def test_sim_command_serves_and_stops_on_sigterm() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuwatch", "sim", "--listen", "127.0.0.1:0", "--time-scale", "5"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "gpuwatch sim: meta-llama/Llama-3.1-8B-Instruct-AWQ on http://127.0.0.1:" in line
        url = line.split(" on ")[1].split(" ")[0]
        out = subprocess.run(
            [sys.executable, "-m", "gpuwatch", "snapshot", "--json", "--metrics", f"{url}/metrics",
             "--fake-gpu-from", f"{url}/sim/gpu"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        data = json.loads(out.stdout)
        assert data["engines"][0]["dialect"] == "vllm"
        assert data["gpus"][0]["name"] == "NVIDIA GeForce RTX 4090"
        assert data["gpus"][0]["fan_percent"] is not None
    finally:
        proc.terminate()
        assert proc.wait(10) == 0


def test_sim_bad_profile_and_list() -> None:
    bad = subprocess.run(
        [sys.executable, "-m", "gpuwatch", "sim", "--profile", "nope"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "unknown profile 'nope'" in bad.stderr
    listed = subprocess.run(
        [sys.executable, "-m", "gpuwatch", "sim", "--list-profiles"], capture_output=True, text=True
    )
    assert listed.returncode == 0
    assert "rtx4090-llama3-8b-awq" in listed.stdout and "125,264 tokens" in listed.stdout
    assert "KV 128 KiB/token" in listed.stdout
