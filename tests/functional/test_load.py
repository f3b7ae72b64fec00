"""``gpuwatch load`` against the simulator and the gate on loopback."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest
from aiohttp import web

from gpuwatch.aioserve import serve
from gpuwatch.gate.config import GateConfig
from gpuwatch.gate.limits import DEFAULT_LANES
from gpuwatch.gate.server import start_gate
from gpuwatch.load import LoadRun, LoadSpec, build_report
from gpuwatch.load.report import percentile
from gpuwatch.load.spec import Dist
from gpuwatch.sim.profiles import get_profile
from gpuwatch.sim.server import start_sim
from gpuwatch.sources.scrape import map_page
from tests.helpers import eventually_sync, refusing_port

PROFILE = get_profile("rtx4090-llama3-8b-awq")


async def test_client_ttft_agrees_with_the_servers_histogram_at_light_load() -> None:
    _, sim = await start_sim(PROFILE, time_scale=1.0, seed=5)
    try:
        spec = LoadSpec(url=sim.url, rate=4.0, requests=12, prompt_tokens=Dist("fixed", 64),
                        output_tokens=Dist("fixed", 8), seed=5)  # fmt: skip
        run = LoadRun(spec)
        results = await run.run()
        assert all(r.ok for r in results)
        assert all(r.output_tokens == 8 and len(r.itl) == 7 for r in results)
        async with aiohttp.ClientSession() as s, s.get(f"{sim.url}/metrics") as resp:
            [engine] = map_page("sim", await resp.text()).engines
        server = engine.histograms["ttft"]
        assert server.count == 12
        ttfts = [r.ttft for r in results if r.ttft is not None]
        assert len(ttfts) == len(results)  # every request saw its first token
        client_mean = sum(ttfts) / len(results)
        assert server.sum is not None
        server_mean = server.sum / server.count
        # Within a few milliseconds: the client also counts the HTTP round trip and the event
        # loop it shares with the simulator in this test.
        assert abs(client_mean - server_mean) < 0.008, (client_mean, server_mean)
        assert engine.prompt_tokens_total == 12 * 64  # prompts made to the requested length
    finally:
        await sim.close()


async def test_gate_refusals_show_up_by_status(tmp_path: Path) -> None:
    _, sim = await start_sim(PROFILE, time_scale=1.0, seed=6)
    _, served = await start_gate(sim.url, GateConfig(DEFAULT_LANES), state_file=tmp_path / "s.json")
    try:
        async with aiohttp.ClientSession() as s:
            body = {"lanes": {"chat": {"max_inflight": 1, "max_queue": 2, "queue_timeout_s": 0.3}}}
            async with s.patch(f"{served.url}/admin/limits", json=body) as r:
                assert r.status == 200
        spec = LoadSpec(url=served.url, rate=60.0, requests=60, prompt_tokens=Dist("fixed", 32),
                        output_tokens=Dist("fixed", 40), seed=6)  # fmt: skip
        run = LoadRun(spec)
        results = await run.run()
        report = build_report(spec, results, run.ended - run.started)
        assert report["failures_by_status"].get("429", 0) > 0
        assert report["failures_by_status"].get("503", 0) > 0
        assert report["completed"] + report["failed"] == 60
        assert set(report["failures_by_status"]) <= {"429", "503"}
    finally:
        await served.close()
        await sim.close()


def gw(*args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuwatch", *args], capture_output=True, text=True, timeout=60, **kw
    )


@pytest.fixture
def sim_process() -> Iterator[str]:
    proc = subprocess.Popen([sys.executable, "-m", "gpuwatch", "sim", "--listen", "127.0.0.1:0", "--time-scale", "4"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout is not None
    url = proc.stdout.readline().split(" on ")[1].split(" ")[0]
    yield url
    proc.terminate()
    proc.wait(10)


def test_cli_json_report(sim_process: str, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = gw("load", "--url", sim_process, "--requests", "20", "--rate", "20", "--burstiness", "0.5",
              "--prompt-tokens", "32:256", "--output-tokens", "lognormal:mean=20,sigma=0.3",
              "--slo", "ttft=5,tpot=1,e2e=30", "--json", str(out), "--quiet", "--api", "completions")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "TTFT" in proc.stdout and "goodput" in proc.stdout
    assert "TTFT (s) of each request by send time; SLO 5 s" in proc.stdout  # plotext's chart
    assert "\x1b[" not in proc.stdout  # plain text: no colour codes in a report
    report = json.loads(out.read_text())
    assert report["completed"] == 20 and report["failed"] == 0
    assert report["request_goodput"] > 0
    assert report["model_id"] == "meta-llama/Llama-3.1-8B-Instruct-AWQ"  # from GET /v1/models
    for key in ("mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "mean_itl_ms",
                "p99_e2el_ms", "request_throughput", "output_throughput", "duration", "failures_by_status"):  # fmt: skip
        assert report[key] is not None, key
    # vllm bench serve's own keys, so notebooks written for it read this unchanged.
    assert report["backend"] == "openai" and report["num_prompts"] == 20
    assert report["request_rate"] == 20 and report["max_concurrency"] is None
    assert re.fullmatch(r"\d{8}-\d{6}", report["date"])
    for key in ("input_lens", "output_lens", "ttfts", "itls", "errors"):
        assert len(report[key]) == 20, key
    assert report["errors"] == [""] * 20
    assert all(32 <= n <= 256 for n in report["input_lens"])
    assert sum(report["output_lens"]) == report["total_output_tokens"]
    pairs = zip(report["itls"], report["output_lens"], strict=True)
    assert all(len(gaps) == n - 1 for gaps, n in pairs)
    assert percentile(report["ttfts"], 99) * 1000 == pytest.approx(report["p99_ttft_ms"])


def test_cli_nothing_listening_is_one_line_and_exit_1() -> None:
    with refusing_port() as port:
        _nothing_listening(f"http://127.0.0.1:{port}")


def _nothing_listening(url: str) -> None:
    proc = gw("load", "--url", url, "--requests", "5", "--rate", "10", "--quiet")
    assert proc.returncode == 1
    assert proc.stderr.strip() == f"gpuwatch load: nothing listening at {url} (connection refused)"
    proc = gw("load", "--url", url, "--requests", "5", "--rate", "10", "--quiet", "--model", "m")
    assert proc.returncode == 1
    assert proc.stderr.strip() == f"gpuwatch load: nothing listening at {url} (connection refused)"


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--prompt-tokens", "abc"], "--prompt-tokens"), (["--slo", "ttft=x"], "--slo"),
     (["--pattern", "spike:period=0"], "--pattern"), (["--rate", "-1"], "--rate")],
)  # fmt: skip
def test_cli_bad_input_exits_2_naming_it(args: list[str], message: str) -> None:
    base = ["load", "--url", "http://127.0.0.1:9", "--requests", "1"]
    if "--rate" not in args:
        base += ["--rate", "1"]
    proc = gw(*base, *args)
    assert proc.returncode == 2 and message in proc.stderr


def test_ctrl_c_prints_a_partial_report(sim_process: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuwatch", "load", "--url", sim_process, "--duration", "60",
         "--rate", "5", "--output-tokens", "20", "--prompt-tokens", "64", "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip

    # Wait until requests are completing at the simulator, then interrupt.
    def completing() -> bool:
        [engine] = map_page("sim", httpx.get(f"{sim_process}/metrics").text).engines
        return (engine.generation_tokens_total or 0) >= 40

    eventually_sync(completing, 20, message="no request completed at the simulator")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 130
    assert "interrupted; partial report" in err
    assert "completed" in out and "TTFT" in out
    assert "Traceback" not in err


async def test_lane_mix_sends_each_lane_to_its_endpoint() -> None:
    _, sim = await start_sim(PROFILE, time_scale=10.0, seed=7)
    try:
        spec = LoadSpec(url=sim.url, rate=40.0, requests=60, lane_mix={"chat": 0.5, "embed": 0.5},
                        prompt_tokens=Dist("fixed", 16), output_tokens=Dist("fixed", 4), seed=7)  # fmt: skip
        run = LoadRun(spec)
        results = await run.run()
        chat = [r for r in results if r.lane == "chat"]
        embed = [r for r in results if r.lane == "embed"]
        assert 20 <= len(chat) <= 40 and len(chat) + len(embed) == 60
        assert all(r.ok for r in chat)
        # The simulator serves no embeddings: that lane fails by status, as a real 404 would.
        assert {r.status for r in embed} == {404}
        report = build_report(spec, results, run.ended - run.started)
        assert report["failures_by_status"] == {"404": len(embed)}
    finally:
        await sim.close()


async def test_a_stream_of_json_that_is_not_an_object_is_a_failed_request() -> None:
    """A server's chunk that is JSON but not an object (``data: [1]``) fails that request with
    a status, like any bad answer; the run ends with every result accounted for."""

    async def odd(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"data: [1, 2]\n\ndata: [DONE]\n\n")
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", odd)
    served = await serve(app, "127.0.0.1", 0)
    try:
        spec = LoadSpec(url=served.url, rate=20.0, requests=5, prompt_tokens=Dist("fixed", 8),
                        output_tokens=Dist("fixed", 4), seed=1, model="m")  # fmt: skip
        results = await asyncio.wait_for(LoadRun(spec).run(), 30)
    finally:
        await served.close()
    assert len(results) == 5
    assert all(not r.ok and r.status == "ValueError" for r in results), [r.status for r in results]
