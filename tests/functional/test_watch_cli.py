"""``gpuwatch watch`` as a script runs it: a real process polling a simulator and a gate."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from gpuwatch.gate.config import GateConfig
from gpuwatch.gate.limits import DEFAULT_LANES
from gpuwatch.gate.server import start_gate
from gpuwatch.load import LoadRun, LoadSpec
from gpuwatch.load.spec import Dist
from gpuwatch.sim.profiles import get_profile
from gpuwatch.sim.server import start_sim
from tests.conftest import fixture_text

PROFILE = get_profile("rtx4090-llama3-8b-awq")


async def watch(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpuwatch", "watch", "--no-gpu", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[tuple[str, str]]:
    """A simulator behind a gate, under steady load: (sim URL, gate URL)."""
    _, sim = await start_sim(PROFILE, time_scale=4.0, seed=3)
    _, gate = await start_gate(sim.url, GateConfig(DEFAULT_LANES), state_file=tmp_path / "s.json")
    spec = LoadSpec(
        url=gate.url, rate=6, duration_s=30, prompt_tokens=Dist("fixed", 64),
        output_tokens=Dist("fixed", 16), seed=1,
    )  # fmt: skip
    load = LoadRun(spec)
    task = asyncio.create_task(load.run())
    yield sim.url, gate.url
    load.stop()
    await asyncio.gather(task, return_exceptions=True)
    await gate.close()
    await sim.close()


async def test_json_lines_carry_each_value_with_its_window(node: tuple[str, str]) -> None:
    sim, gate = node
    code, out, err = await watch(
        "--metrics", f"{sim}/metrics", "--metrics", f"{gate}/metrics", "--admin", gate,
        "--interval", "0.5", "--count", "3", "--json",
    )  # fmt: skip
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 3
    frames = [json.loads(line) for line in lines]
    last = frames[-1]
    assert last["health"]["level"] in ("OK", "TIGHT", "OVERLOADED", "NO DATA")
    dialects = {e["dialect"] for e in last["engines"]}
    assert dialects == {"vllm", "gate"}
    vllm = next(e for e in last["engines"] if e["dialect"] == "vllm")
    for key in ("ttft_p50_1m", "ttft_p99_1m", "itl_p99_1m", "gen_tps_10s", "prompt_tps_10s",
                "preemptions_per_min_1m", "prefix_hit_rate_1m", "running", "kv_cache_usage"):  # fmt: skip
        assert key in vllm, key
    assert vllm["state"] == "UP" and vllm["kv_tokens_total"] == PROFILE.kv_tokens
    # Under load, a second and third look see the tokens flow.
    assert any((f["engines"][0].get("gen_tps_10s") or 0) > 0 for f in frames[1:])
    breakdown = last["ttft_breakdown"]
    assert breakdown["measured_at"] == "gate" and "ttft_p99_1m" in breakdown
    assert set(breakdown["parts"]) == {"gate_queue", "engine_queue", "prefill"}
    # goodput overall and per lane, with its window, and each lane's exact tails (issue 26)
    users = last["users"]
    assert users["window"] == "1m" and users["measured_at"] == "gate"
    assert users["ended_1m"] > 0 and users["goodput_1m"] == users["good_1m"] / users["ended_1m"]
    chat = users["lanes"]["chat"]
    assert chat["judged"] is True and chat["requests_1m"] > 0
    assert chat["goodput_1m"] == chat["good_1m"] / chat["ended_1m"]
    for kind in ("ttft_1m", "queue_wait_1m", "itl_1m", "e2e_1m"):
        assert {"count", "p50", "p99", "max"} <= set(chat[kind]), kind
    worst = users["lanes"][users["worst_lane"]]
    assert users["ttft_p99_1m"] == worst["ttft_1m"]["p99"] == breakdown["ttft_p99_1m"]
    gate_entry = next(e for e in last["engines"] if e["dialect"] == "gate")
    assert gate_entry["tails_from"] == "exact" and gate_entry["exact_lane"] == users["worst_lane"]
    assert gate_entry["ttft_p99_1m"] == users["ttft_p99_1m"]
    assert vllm["tails_from"] == "histogram" and vllm["exact_lane"] is None
    lanes = last["gate"]["lanes"]
    assert lanes["chat"]["max_inflight"] == 16 and "refused_per_s_10s" in lanes["chat"]
    assert frames[0]["time"] < frames[-1]["time"]


async def test_table_and_exit_status_when_a_source_is_dead(node: tuple[str, str]) -> None:
    sim, _ = node
    dead = "http://127.0.0.1:9/metrics"  # the discard port: nothing serves HTTP there
    code, out, err = await watch(
        "--metrics", f"{sim}/metrics", "--metrics", dead, "--interval", "0.5", "--count", "2"
    )
    assert code == 1, err
    lines = out.splitlines()
    assert lines[0].startswith("engine") and "latency over 1m, gen/s over 10s" in lines[0]
    assert any(line.startswith("vllm/Llama-3.1-8B") for line in lines)
    assert any(line.startswith(dead) and "DOWN" in line for line in lines)


async def test_bad_arguments_exit_2() -> None:
    code, _, err = await watch("--count", "0")
    assert code == 2 and "--count" in err


async def test_the_first_line_waits_for_a_source_slower_than_the_interval() -> None:
    """Regression: the first line was printed on the interval alone, so `watch --count 1`
    against an endpoint slower than the interval (a busy machine) said WAITING and exited 1."""
    page = fixture_text("vllm-1.prom")

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(0.5)  # the scenario: a scrape takes 10 intervals
        return web.Response(text=page)

    app = web.Application()
    app.router.add_get("/metrics", slow)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    try:
        code, out, err = await watch(
            "--metrics", f"http://127.0.0.1:{port}/metrics", "--interval", "0.05", "--count", "1"
        )
    finally:
        await runner.cleanup()
    assert code == 0, out + err
    assert "WAITING" not in out and " UP" in out, out
