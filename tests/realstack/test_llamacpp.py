"""Every claim gpuwatch makes about a serving stack, against one nobody here wrote: llama.cpp."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gpuwatch.gate.config import GateConfig
from gpuwatch.gate.limits import DEFAULT_LANES
from gpuwatch.gate.server import Gate, start_gate
from gpuwatch.httpclient import async_client
from gpuwatch.load import LoadRun, LoadSpec, build_report
from gpuwatch.load.spec import Dist
from gpuwatch.session.node import DashboardOptions, live_session
from gpuwatch.sources.scrape import scrape
from gpuwatch.tui.app import GpuwatchApp
from tests.functional.test_tui import text
from tests.helpers import eventually

# Minutes of generation on a busy 2-core machine: aiohttp's default of 300 s a request is
# not what the tests with long answers are about (the gate's queue_timeout_s is 900 there).
LONG = aiohttp.ClientTimeout(total=900)


def snapshot(url: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "gpuwatch", "snapshot", "--no-gpu", "--json", "--metrics", f"{url}/metrics"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    [engine] = json.loads(out.stdout)["engines"]
    return engine


async def complete(session: aiohttp.ClientSession, url: str, max_tokens: int, **extra: Any) -> dict:
    body = {
        "prompt": "the node is in its boring zone",
        "max_tokens": max_tokens,
        "ignore_eos": True,
        **extra,
    }
    async with session.post(f"{url}/v1/completions", json=body) as r:
        assert r.status == 200
        return await r.json()


async def test_snapshot_reports_llamacpp_with_counters_matching_what_was_sent(
    llama_server: str,
) -> None:
    before = snapshot(llama_server)
    assert before["dialect"] == "llamacpp" and before["model"] is None
    sizes = [5, 7, 11]
    async with aiohttp.ClientSession() as s:
        answers = [await complete(s, llama_server, n) for n in sizes]
    after = snapshot(llama_server)
    assert after["generation_tokens_total"] - before["generation_tokens_total"] == sum(sizes)
    processed = sum(
        a["usage"]["prompt_tokens"]
        - a["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)
        for a in answers
    )
    assert after["prompt_tokens_total"] - before["prompt_tokens_total"] == processed
    assert (after["running"], after["waiting"]) == (0, 0)
    assert after["kv_cache_usage"] is None  # not exported by llama.cpp: unknown, never 0


async def test_more_long_requests_than_slots_are_seen_waiting(llama_server: str) -> None:
    seen_waiting = 0
    seen_running = 0
    async with aiohttp.ClientSession(timeout=LONG) as s, async_client() as client:
        # 3 requests for 2 slots: one waits, and an HTTP thread is left for /metrics.
        tasks = [asyncio.create_task(complete(s, llama_server, 1800)) for _ in range(3)]
        errors = []
        while not all(t.done() for t in tasks):
            result = await scrape(client, f"{llama_server}/metrics")
            if result.error:
                errors.append(result.error)
            for engine in result.engines:
                seen_waiting = max(seen_waiting, engine.waiting or 0)
                seen_running = max(seen_running, engine.running or 0)
            await asyncio.sleep(0.01)
        await asyncio.gather(*tasks)
    assert errors == []  # /metrics answers while every slot is busy
    assert seen_running == 2  # -np 2 slots
    assert seen_waiting > 0


async def sse(session: aiohttp.ClientSession, url: str) -> list[bytes]:
    # Greedy, seeded and without the prompt cache: the same request gives the same chunks.
    body = {"prompt": "tokens flow", "max_tokens": 24, "stream": True, "temperature": 0, "seed": 1,
            "ignore_eos": True, "cache_prompt": False, "stream_options": {"include_usage": True}}  # fmt: skip
    async with session.post(f"{url}/v1/completions", json=body) as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/event-stream")
        return [line.strip() for line in (await r.read()).split(b"\n") if line.strip()]


@pytest.fixture
async def gated(llama_server: str, tmp_path: Path) -> AsyncIterator[tuple[Gate, str]]:
    """A gate with default lanes in front of llama-server."""
    gate, served = await start_gate(
        llama_server, GateConfig(DEFAULT_LANES), state_file=tmp_path / "s.json"
    )
    yield gate, served.url
    await served.close()


def stable(chunk: bytes) -> Any:
    """A chunk without what differs between two runs of the same request (ids, clocks)."""
    if chunk == b"data: [DONE]":
        return "[DONE]"
    data = json.loads(chunk.removeprefix(b"data: "))
    for key in ("id", "created", "timings"):
        data.pop(key, None)
    return data


async def test_through_the_gate_chunks_pass_untouched_in_order(
    llama_server: str, gated: tuple[Gate, str]
) -> None:
    gate, gate_url = gated
    async with aiohttp.ClientSession() as s:
        direct = await sse(s, llama_server)
        via_gate = await sse(s, gate_url)
    assert via_gate[-1] == b"data: [DONE]"
    assert [stable(c) for c in via_gate] == [stable(c) for c in direct]
    usage = [stable(c)["usage"] for c in via_gate[:-1] if "usage" in stable(c)]
    assert usage and usage[-1]["completion_tokens"] == 24  # include_usage honoured


async def test_gate_max_inflight_bounds_requests_processing(
    llama_server: str, gated: tuple[Gate, str]
) -> None:
    gate, gate_url = gated
    async with aiohttp.ClientSession(timeout=LONG) as s, async_client() as client:
        # Four 1,500-token answers one at a time take minutes on a busy 2-core machine: the
        # queue must outlast them (this test is about the in-flight bound, not the timeout).
        limits = {"max_inflight": 1, "queue_timeout_s": 900}
        async with s.patch(f"{gate_url}/admin/limits", json={"lanes": {"chat": limits}}) as r:
            assert r.status == 200
        tasks = [asyncio.create_task(complete(s, gate_url, 1500)) for _ in range(4)]
        peak_processing = peak_deferred = peak_gate_queue = 0
        while not all(t.done() for t in tasks):
            [engine] = (await scrape(client, f"{llama_server}/metrics")).engines
            peak_processing = max(peak_processing, engine.running or 0)
            peak_deferred = max(peak_deferred, engine.waiting or 0)
            peak_gate_queue = max(peak_gate_queue, len(gate.lanes["chat"].queue))
            await asyncio.sleep(0.005)
        await asyncio.gather(*tasks)
    assert peak_processing == 1 and peak_deferred == 0
    assert peak_gate_queue >= 2  # the gate held them, not llama.cpp


async def test_disconnect_mid_stream_frees_the_slot(
    llama_server: str, gated: tuple[Gate, str]
) -> None:
    gate, gate_url = gated
    before = snapshot(llama_server)["generation_tokens_total"]
    session = aiohttp.ClientSession()
    body = {"prompt": "the node", "max_tokens": 2000, "stream": True, "ignore_eos": True}
    resp = await session.post(f"{gate_url}/v1/completions", json=body)
    assert (await resp.content.readline()).startswith(b"data: ")
    async with aiohttp.ClientSession() as s, s.get(f"{llama_server}/slots") as r:
        assert any(slot["is_processing"] for slot in await r.json())
    resp.close()
    await session.close()

    async def free() -> bool:
        async with aiohttp.ClientSession() as s, s.get(f"{llama_server}/slots") as r:
            return not any(slot["is_processing"] for slot in await r.json())

    # Not a deadline (a busy machine is slow to notice too) but what a freed slot proves:
    # the generation was cut short, not run to its 2,000 tokens (llama.cpp counts a
    # request's tokens when it ends, however it ends).
    await eventually(free, 60, message="the slot stayed busy after the client left")
    generated = snapshot(llama_server)["generation_tokens_total"] - before
    assert generated < 2000, f"{generated} tokens: the generation ran to its end"
    assert gate.lanes["chat"].inflight == 0


async def test_load_through_the_gate_completes_with_a_full_report(
    llama_server: str, gated: tuple[Gate, str]
) -> None:
    gate, gate_url = gated
    spec = LoadSpec(url=gate_url, rate=8.0, requests=24, api="completions", burstiness=0.5,
                    prompt_tokens=Dist("uniform", 16, 64), output_tokens=Dist("fixed", 40), seed=3)  # fmt: skip
    run = LoadRun(spec)
    results = await run.run()
    report = build_report(spec, results, run.ended - run.started)
    assert report["completed"] == 24 and report["failed"] == 0
    assert run.model and run.model.endswith("tiny.gguf")  # from llama.cpp's /v1/models
    for key in ("mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "mean_itl_ms", "p99_e2el_ms"):
        assert report[key] is not None and report[key] > 0, key
    assert report["total_output_tokens"] == 24 * 40  # from usage, not from chunk counts


async def test_dashboard_pointed_at_llama_server(llama_server: str) -> None:
    app = GpuwatchApp(
        live_session(DashboardOptions(urls=[f"{llama_server}/metrics"], interval_s=0.25))
    )
    async with aiohttp.ClientSession(timeout=LONG) as s, app.run_test(size=(160, 48)) as pilot:
        tasks = [asyncio.create_task(complete(s, llama_server, 3000)) for _ in range(3)]

        def engines() -> str:
            return text(app, "#engines")

        await eventually(
            lambda: "llamacpp" in engines() and "run 2" in engines() and "wait 1" in engines(),
            20, pause=pilot.pause, message=engines,
        )  # fmt: skip
        # Tokens flow: the 10 s generation rate is a number above zero. llama.cpp adds a
        # request's tokens to its counter when the request ends, so wait for the first answer
        # (a minute for 3,000 tokens on a busy 2-core machine), then for the rate to show it.
        await eventually(lambda: any(t.done() for t in tasks), 90, pause=pilot.pause)
        await eventually(
            lambda: (m := re.search(r"gen (\d+)", engines())) and int(m[1]) > 0,
            20, pause=pilot.pause, message=engines,
        )  # fmt: skip
        engines = text(app, "#engines")
        assert "KV ········ N/A" in engines  # llama.cpp does not export it: shown unknown
        await asyncio.gather(*tasks)


async def test_gate_counts_prompts_with_the_upstream_tokenizer(
    llama_server: str, tmp_path: Path
) -> None:
    from gpuwatch.gate.limits import Lane, LaneLimits

    chat = Lane("chat", DEFAULT_LANES[0].prefixes, LaneLimits(max_prompt_tokens=8), tokenize=True)
    config = GateConfig((chat, *DEFAULT_LANES[1:]))
    gate, served = await start_gate(llama_server, config, state_file=tmp_path / "s.json")
    try:
        async with aiohttp.ClientSession() as s:
            async with s.post(f"{llama_server}/tokenize", json={"content": "abcdefghij"}) as r:
                real = len((await r.json())["tokens"])
            # 10 characters: 3 tokens by the 4-characters estimate, more by the real tokenizer.
            assert real > 8
            body = {"prompt": "abcdefghij", "max_tokens": 2}
            async with s.post(f"{served.url}/v1/completions", json=body) as r:
                refusal = await r.json()
            assert r.status == 400 and refusal["error"]["code"] == "prompt_too_long"
            assert f"prompt is {real} tokens" in refusal["error"]["message"]
            async with s.post(
                f"{served.url}/v1/completions", json={"prompt": "the", "max_tokens": 2}
            ) as r:
                assert r.status == 200
    finally:
        await served.close()


async def test_queued_streams_never_meet_a_connection_llamacpp_closed(
    llama_server: str, gated: tuple[Gate, str]
) -> None:
    """Regression: llama.cpp closes its connection after every streamed answer while announcing
    keep-alive. The gate gave that connection to the next queued request, which died with
    ServerDisconnectedError: a 502 for 1-2 requests in 18 with max_inflight 1."""
    gate, gate_url = gated
    async with aiohttp.ClientSession() as s:
        async with s.patch(
            f"{gate_url}/admin/limits", json={"lanes": {"chat": {"max_inflight": 1}}}
        ) as r:
            assert r.status == 200

        async def stream() -> tuple[int, bytes]:
            body = {"prompt": "the node", "max_tokens": 8, "stream": True, "ignore_eos": True}
            async with s.post(f"{gate_url}/v1/completions", json=body) as r:
                return r.status, await r.read()

        results = []
        for _ in range(5):
            results += await asyncio.gather(*(stream() for _ in range(6)))
        async with s.get(f"{gate_url}/metrics") as r:
            page = await r.text()
    assert [status for status, _ in results] == [200] * 30, [b for _, b in results if b[:1] == b"{"]
    assert all(body.rstrip().endswith(b"data: [DONE]") for _, body in results)
    assert "gpuwatch_gate_upstream_errors_total 0.0" in page
    assert gate.lanes["chat"].inflight == 0
