"""``gpuwatch load`` with a mix of kinds, tenants and classes, over real HTTP: each kind goes
to its endpoint with its shape, tenants and classes travel in the Gateway API Inference
Extension's headers with the asked-for skew, and the report splits every figure by them."""

from __future__ import annotations

import asyncio
import json
import re
import statistics
import sys
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest
from aiohttp import web

from gpuwatch.aioserve import serve
from gpuwatch.load import LoadRun, LoadSpec, build_report
from gpuwatch.load.spec import Dist, EmbedShape, ImageShape, Tenancy
from gpuwatch.sim.profiles import get_profile
from gpuwatch.sim.server import start_sim
from tests.functional.test_sim_mix import scrape
from tests.helpers import eventually

PROFILE = get_profile("rtx4090-llama3-8b-awq")


async def test_each_kind_goes_to_its_endpoint_with_its_shape() -> None:
    _, sim = await start_sim(PROFILE, time_scale=10.0, seed=8, embed=True, image=True)
    try:
        spec = LoadSpec(
            url=sim.url, rate=30.0, requests=60, seed=8,
            lane_mix={"chat": 0.5, "embed": 0.3, "image": 0.2},
            prompt_tokens=Dist("fixed", 32), output_tokens=Dist("fixed", 8),
            embed=EmbedShape(Dist("fixed", 3), Dist("fixed", 100)),
            image=ImageShape(((512, 512),), Dist("fixed", 10), Dist("fixed", 2)),
        )  # fmt: skip
        run = LoadRun(spec)
        results = await run.run()
        assert all(r.ok for r in results), Counter(r.status for r in results)
        kinds = Counter(r.lane for r in results)
        assert set(kinds) == {"chat", "embed", "image"} and kinds["chat"] > kinds["image"]
        m = await scrape(sim.url)
        # Embeddings: one batched request of 3 inputs of 100 tokens each.
        assert m['te_request_count_total{"method": "batch"}'] == kinds["embed"]
        assert m["te_request_input_length_count{}"] == 3 * kinds["embed"]
        assert m["te_request_input_length_sum{}"] == 300 * kinds["embed"]
        # Images: n=2 at 512x512, 10 steps each.
        assert m["sim_image_images_total{}"] == 2 * kinds["image"]
        assert m["sim_image_steps_total{}"] == 20 * kinds["image"]
        assert m["sim_image_pixels_total{}"] == 2 * 512 * 512 * kinds["image"]
        for r in results:
            assert r.e2e is not None
            assert (r.ttft is not None) == (r.lane == "chat")
        report = build_report(spec, results, run.ended - run.started)
        by_lane = report["by_lane"]
        assert {k: v["completed"] for k, v in by_lane.items()} == dict(kinds)
        assert by_lane["image"]["count_ttft"] == 0 and by_lane["image"]["p99_e2el_ms"] > 0
        assert by_lane["chat"]["count_ttft"] == kinds["chat"]
        # Without tenants or classes there is nothing to split by.
        assert report["by_tenant"] == {} and report["by_class"] == {}
    finally:
        await sim.close()


async def test_failures_are_split_by_lane() -> None:
    _, sim = await start_sim(PROFILE, time_scale=10.0, seed=9)  # no embeddings served
    try:
        spec = LoadSpec(url=sim.url, rate=40.0, requests=30, seed=9,
                        lane_mix={"chat": 0.5, "embed": 0.5},
                        prompt_tokens=Dist("fixed", 16), output_tokens=Dist("fixed", 4))  # fmt: skip
        run = LoadRun(spec)
        results = await run.run()
        report = build_report(spec, results, run.ended - run.started)
        embed, chat = report["by_lane"]["embed"], report["by_lane"]["chat"]
        assert embed["completed"] == 0 and embed["failures_by_status"] == {"404": embed["failed"]}
        assert chat["failed"] == 0 and chat["completed"] == chat["requests"] > 0
        assert embed["requests"] + chat["requests"] == 30
    finally:
        await sim.close()


class Recorder:
    """An embeddings endpoint that records each request's headers and answers at once."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, str | None, str | None]] = []

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        text = body["input"] if isinstance(body["input"], str) else body["input"][0]
        match = re.match(r"req (\d+)", text)
        assert match is not None, text
        tag = int(match.group(1))
        headers = request.headers
        # The llm-d router's names (the x-gateway-inference-* ones are its deprecated aliases).
        tenant, objective = "x-llm-d-inference-fairness-id", "x-llm-d-inference-objective"
        self.seen.append((tag, headers.get(tenant), headers.get(objective)))
        return web.json_response({"object": "list", "data": []})


async def test_tenants_and_classes_travel_in_headers_with_zipf_skew() -> None:
    recorder = Recorder()
    app = web.Application()
    app.router.add_post("/v1/embeddings", recorder.handle)
    served = await serve(app, "127.0.0.1", 0)
    try:
        spec = LoadSpec(
            url=served.url, rate=400.0, requests=600, seed=10, lane_mix={"embed": 1.0},
            embed=EmbedShape(Dist("fixed", 1), Dist("fixed", 8)),
            tenancy=Tenancy(tenants=5, skew=1.0, noisy=4.0),
            classes={"critical": 0.25, "sheddable": 0.75},
        )  # fmt: skip
        run = LoadRun(spec)
        results = await run.run()
        assert len(recorder.seen) == 600 and all(r.ok for r in results)
        # What arrived is what the generator says it sent, request by request.
        for tag, tenant, klass in recorder.seen:
            assert (tenant, klass) == (results[tag].tenant, results[tag].klass)
        tenants = Counter(t for _, t, _ in recorder.seen)
        assert set(tenants) == {"t01", "t02", "t03", "t04", "t05", "noisy"}
        # Zipf: t01 twice t02, five times t05; noisy four times t01 (weights 4 : 1 : 1/2 ...).
        assert tenants["t01"] > tenants["t02"] > tenants["t05"]
        assert 2.8 < tenants["noisy"] / tenants["t01"] < 5.5, tenants
        classes = Counter(c for _, _, c in recorder.seen)
        assert 0.18 < classes["critical"] / 600 < 0.32, classes
        report = build_report(spec, results, run.ended - run.started)
        assert {k: v["requests"] for k, v in report["by_tenant"].items()} == dict(tenants)
        assert {k: v["requests"] for k, v in report["by_class"].items()} == dict(classes)
        assert report["tenants"][:5] == [r.tenant for r in results[:5]]
    finally:
        await served.close()


async def _cli(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpuwatch", "load", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_cli_prints_the_split_and_refuses_bad_mixes(tmp_path: Any) -> None:
    _, sim = await start_sim(PROFILE, time_scale=10.0, seed=11, embed=True, image=True)
    try:
        path = tmp_path / "r.json"
        code, out, err = await _cli(
            "--url", sim.url, "--requests", "30", "--rate", "30", "--quiet", "--seed", "3",
            "--mix", "chat=0.6,embed=0.3,image=0.1", "--prompt-tokens", "32",
            "--output-tokens", "8", "--image-size", "256x256", "--image-steps", "5",
            "--tenants", "3", "--classes", "critical=1,standard=1", "--json", str(path),
        )  # fmt: skip
        assert code == 0, err
        for title in ("by lane", "by class", "by tenant"):
            assert title in out
        report = json.loads(path.read_text())
        assert sum(g["requests"] for g in report["by_tenant"].values()) == 30
        assert set(report["by_class"]) == {"critical", "standard"}
    finally:
        await sim.close()
    bad = {
        ("--mix", "chat=1,video=1"): "unknown kind 'video'",
        ("--noisy-tenant", "3"): "--noisy-tenant needs --tenants",
        ("--classes", "crit ical=1"): "is not a name",
        ("--image-size", "big"): "expected WIDTHxHEIGHT",
    }
    for extra, message in bad.items():
        code, _, err = await _cli("--url", "http://127.0.0.1:9", "--requests", "1",
                                  "--rate", "1", *extra)  # fmt: skip
        assert code == 2 and message in err, (extra, err)


async def test_a_stream_read_to_its_end_is_a_whole_answer_at_the_gate() -> None:
    """Regression: the generator closed its connection at ``[DONE]``, under the gate's last
    write, and the gate counted a few percent of whole answers as abandoned ("failed"). The
    demo's stack (simulator and gate in their own processes), as the demo showed it."""
    import httpx

    from gpuwatch.demo import start_stack

    stack = await asyncio.to_thread(start_stack, None, 10.0, 12, workloads=())
    try:
        spec = LoadSpec(url=stack.gate_url, rate=60.0, requests=200, seed=12,
                        prompt_tokens=Dist("fixed", 16), output_tokens=Dist("fixed", 4))  # fmt: skip
        results = await LoadRun(spec).run()
        assert all(r.ok for r in results)
        headers = {"Authorization": f"Bearer {stack.token}"}
        async with httpx.AsyncClient(headers=headers) as client:
            url = f"{stack.gate_url}/admin/status"
            status = (await client.get(url, params={"ttft_s": "100"})).json()
        goodput = status["lanes"]["chat"]["goodput"]["5m"]
        assert goodput["ended"] == 200 and goodput["failed"] == 0, goodput
    finally:
        await asyncio.to_thread(stack.stop)


@pytest.mark.parametrize("image_inflight", [1, 16], ids=["demo lane of one", "loose lane"])
async def test_the_demo_gate_queues_an_image_burst_and_chat_keeps_its_ttft(
    tmp_path: Any, image_inflight: int
) -> None:
    """Point 6, as the demo wires it (its gate config, its image shape): the burst waits in the
    image lane's queue, one image runs at a time, and chat's TTFT stays near its calm level
    (one 512x512 image weighs a quarter of the text engine: measured x1.5 on the median). A
    loose image lane lets eight run at once (all the VRAM reserve holds): chat's steps take
    three times as long (measured x5.6 on the median), and the same bound fails."""
    import httpx

    from gpuwatch.demo import DEMO_GATE_TOML, IMAGE_SIZE
    from gpuwatch.gate.config import load_gate_config
    from gpuwatch.gate.server import start_gate

    toml = DEMO_GATE_TOML.replace("max_inflight = 1\n", f"max_inflight = {image_inflight}\n")
    (tmp_path / "gate.toml").write_text(toml)
    config = load_gate_config(tmp_path / "gate.toml")
    node, sim = await start_sim(PROFILE, time_scale=2.0, seed=13, embed=True, image=True)
    pool = node.side.images
    assert pool is not None
    _, gate = await start_gate(sim.url, config, state_file=tmp_path / "s.json")
    chat = LoadSpec(url=gate.url, rate=8.0, requests=16, seed=13,
                    prompt_tokens=Dist("fixed", 1024), output_tokens=Dist("fixed", 16))  # fmt: skip
    try:
        calm = [r.ttft for r in await LoadRun(chat).run() if r.ttft is not None]
        images = LoadSpec(url=gate.url, rate=1.0, requests=12, lane_mix={"image": 1.0},
                          image=ImageShape((IMAGE_SIZE,)), seed=14)  # fmt: skip
        burst = LoadRun(images, shapes=[(0.05 * i, "image", 0, 0) for i in range(12)])
        burst_task = asyncio.create_task(burst.run())
        async with httpx.AsyncClient() as client:

            async def started() -> bool:
                lanes = (await client.get(f"{gate.url}/admin/status")).json()["lanes"]
                image = lanes["image"]
                if image_inflight == 1:  # one at the simulator, the rest of the burst queued
                    return bool(image["inflight"] == 1 and image["queued"] >= 8)
                return len(pool.running) >= 6  # as many as the VRAM reserve holds

            await eventually(started, 10, message="the burst did not reach the lane")
            # Other prompts (another seed): the calm run's are in the prefix cache.
            again = LoadRun(replace(chat, seed=99))
            during = [r.ttft for r in await again.run() if r.ttft is not None]
        assert all(r.ok for r in await burst_task)
        m = await scrape(sim.url)
        assert m["sim_image_images_total{}"] == 12
        calm_p50, during_p50 = statistics.median(calm), statistics.median(during)
        kept = during_p50 < 2.5 * calm_p50
        assert kept == (image_inflight == 1), (image_inflight, calm_p50, during_p50)
    finally:
        await gate.close()
        await sim.close()
