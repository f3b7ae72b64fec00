"""The issue's "done when", against the simulator through the gate (real HTTP both ways): the
image and embedding caps, classes under saturation, and a noisy tenant's share of a lane."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuwatch.gate.classes import FAIRNESS_HEADER, OBJECTIVE_HEADER, Fairness
from gpuwatch.gate.config import GateConfig
from gpuwatch.gate.limits import DEFAULT_LANES
from gpuwatch.gate.server import start_gate
from gpuwatch.sim.profiles import get_profile
from gpuwatch.sim.server import start_sim
from tests.helpers import eventually

PROFILE = get_profile("rtx4090-llama3-8b-awq")
FAIRNESS = Fairness(objectives={"interactive": "critical", "batch": "sheddable"})
IMAGES = "/v1/images/generations"


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[tuple[str, str]]:
    _, sim = await start_sim(PROFILE, time_scale=10.0, seed=5, embed=True, image=True)
    config = GateConfig(DEFAULT_LANES, fairness=FAIRNESS)
    _, gate = await start_gate(sim.url, config, state_file=tmp_path / "state.json")
    yield gate.url, sim.url
    await gate.close()
    await sim.close()


async def call(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], **headers: str
) -> tuple[int, dict[str, str], Any]:
    async with session.post(url, json=body, headers=headers) as r:
        return r.status, dict(r.headers), await r.json()


async def patch(session: aiohttp.ClientSession, gate: str, body: dict[str, Any]) -> None:
    async with session.patch(f"{gate}/admin/limits", json=body) as r:
        assert r.status == 200, await r.text()


async def metric(url: str, name: str) -> float:
    async with aiohttp.ClientSession() as s, s.get(f"{url}/metrics") as r:
        text = await r.text()
    return sum(
        s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name
    )


async def test_image_over_max_pixels_clamped_or_refused(stack: tuple[str, str]) -> None:
    gate, sim = stack
    async with aiohttp.ClientSession() as s:
        await patch(s, gate, {"lanes": {"image": {"max_pixels": 512 * 512, "max_steps": 20}}})
        body = {"prompt": "a cat", "size": "1024x768", "steps": 50}
        status, headers, data = await call(s, f"{gate}{IMAGES}", body)
        assert status == 200, data
        # What the simulator generated (and paid for) is the clamped request.
        assert (data["size"], data["steps"]) == ("584x440", 20)
        assert headers["X-Gpuwatch-Clamped"] == "size 1024x768->584x440; steps 50->20"
        made = await metric(sim, "sim_image_requests_total")
        assert made >= 1
        await patch(s, gate, {"lanes": {"image": {"media_policy": "reject"}}})
        status, _, data = await call(s, f"{gate}{IMAGES}", body)
        assert status == 400 and data["error"]["code"] == "max_pixels"
        assert await metric(sim, "sim_image_requests_total") == made  # never reached it


@pytest.mark.parametrize("policy", ["clamp", "reject"])
async def test_steps_under_another_name_still_bind_the_simulator(
    stack: tuple[str, str], policy: str
) -> None:
    """Regression: ``num_inference_steps: 10`` skipped the cap, and the simulator (which reads
    ``steps``) ran its default 30 against a cap of 20, under clamp and reject alike."""
    gate, _ = stack
    async with aiohttp.ClientSession() as s:
        await patch(s, gate, {"lanes": {"image": {"max_steps": 20, "media_policy": policy}}})
        for name in ("num_inference_steps", "step"):
            body = {"prompt": "a cat", "size": "256x256", name: 10}
            status, headers, data = await call(s, f"{gate}{IMAGES}", body)
            assert status == 200, data
            assert data["steps"] == 10, data  # what the simulator ran
            body[name] = 50
            status, headers, data = await call(s, f"{gate}{IMAGES}", body)
            if policy == "reject":
                assert status == 400 and data["error"]["code"] == "max_steps", data
            else:
                assert status == 200 and data["steps"] == 20, data


async def test_embeddings_over_max_inputs_refused_naming_the_limit(stack: tuple[str, str]) -> None:
    gate, sim = stack
    async with aiohttp.ClientSession() as s:
        await patch(s, gate, {"lanes": {"embed": {"max_inputs": 8}}})
        status, _, data = await call(s, f"{gate}/v1/embeddings", {"input": ["x"] * 8})
        assert status == 200 and len(data["data"]) == 8
        served = await metric(sim, "te_request_count_total")
        assert served >= 1
        status, _, data = await call(s, f"{gate}/v1/embeddings", {"input": ["x"] * 9})
        assert status == 400
        assert (
            data["error"]["code"] == "max_inputs" and "max_inputs is 8" in data["error"]["message"]
        )
        assert await metric(sim, "te_request_count_total") == served


async def test_under_saturation_only_sheddable_is_refused(stack: tuple[str, str]) -> None:
    gate, _ = stack
    async with aiohttp.ClientSession() as s:
        await patch(s, gate, {"lanes": {"chat": {"max_inflight": 2, "max_queue": 4}}})
        url = f"{gate}/v1/completions"
        long = {"prompt": "hi " * 50, "max_tokens": 400, "ignore_eos": True}
        batch = [
            asyncio.create_task(call(s, url, long, **{OBJECTIVE_HEADER: "batch"})) for _ in range(6)
        ]
        await _queued(s, gate, 4)
        short = {"prompt": "hi", "max_tokens": 4}
        critical = [
            asyncio.create_task(call(s, url, short, **{OBJECTIVE_HEADER: "interactive"}))
            for _ in range(4)
        ]
        results = await asyncio.gather(*critical)
        assert [status for status, _, _ in results] == [200] * 4
        refused = [t.result() for t in batch if t.done() and t.result()[0] != 200]
        assert len(refused) == 4 and {d["error"]["code"] for _, _, d in refused} == {"evicted"}
        async with s.get(f"{gate}/admin/status") as r:
            classes = (await r.json())["lanes"]["chat"]["classes"]
        assert classes["critical"]["rejected_total"] == {}
        assert classes["sheddable"]["rejected_total"] == {"evicted": 4}
        await asyncio.gather(*batch)


async def test_a_tenant_sending_10x_gets_no_more_than_its_share(stack: tuple[str, str]) -> None:
    gate, _ = stack
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as s:
        # Everyone waits first (0 admits nothing new), then one slot: the order in which the
        # lane hands it out is the order in which answers come back.
        await patch(s, gate, {"lanes": {"chat": {"max_inflight": 0, "max_queue": 200}}})
        done: list[str] = []
        body = {"prompt": "hi", "max_tokens": 2}

        async def send(tenant: str) -> None:
            status, _, _ = await call(
                s, f"{gate}/v1/completions", body, **{FAIRNESS_HEADER: tenant}
            )
            assert status == 200
            done.append(tenant)

        plan = ["noisy"] * 40 + [t for t in ("a", "b", "c") for _ in range(4)]
        tasks = [asyncio.create_task(send(t)) for t in plan]
        await _queued(s, gate, len(plan))
        await patch(s, gate, {"lanes": {"chat": {"max_inflight": 1}}})
        await asyncio.gather(*tasks)
        # While the others had work waiting (the first 16 answers), noisy got one in four.
        assert done[:16].count("noisy") == 4, done
        assert sorted(set(done[:16])) == ["a", "b", "c", "noisy"]


async def _queued(s: aiohttp.ClientSession, gate: str, n: int) -> None:
    async def reached() -> bool:
        async with s.get(f"{gate}/admin/status") as r:
            return bool((await r.json())["lanes"]["chat"]["queued"] >= n)

    await eventually(reached, message=f"never {n} queued")
