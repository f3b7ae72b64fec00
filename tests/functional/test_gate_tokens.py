"""The token budget at the upstream: the sum of (prompt + max_tokens) in flight never exceeds
a lane's max_inflight_tokens (counted at the simulator), a request over the whole budget is a
400 at once, both limits apply, and every way a request ends gives its tokens back."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from gpuwatch.aioserve import serve
from gpuwatch.gate.config import GateConfig
from gpuwatch.gate.limits import DEFAULT_LANES, Lane
from gpuwatch.gate.prompt import estimate_prompt
from gpuwatch.gate.server import start_gate
from gpuwatch.sim.profiles import get_profile
from gpuwatch.sim.server import SimNode, start_sim
from tests.functional.gatekit import Rig, rig
from tests.functional.upstreams import CountingUpstream

PROFILE = get_profile("rtx4090-llama3-8b-awq")


def chat(chars: int, max_tokens: int | None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "x" * chars}]}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return {**body, **extra}


def need(body: dict[str, Any], default: int = 512) -> int:
    prompt = estimate_prompt(body) or 0
    return prompt + (body.get("max_tokens") or default) * body.get("n", 1)


async def lane_status(url: str, lane: str = "chat") -> dict[str, Any]:
    async with aiohttp.ClientSession() as s, s.get(f"{url}/admin/status") as r:
        return (await r.json())["lanes"][lane]  # type: ignore[no-any-return]


async def wait_for(predicate: Any, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        await asyncio.sleep(0.01)


async def patch(r: Rig, lane: dict[str, Any]) -> None:
    status, body = await r.patch({"lanes": {"chat": lane}})
    assert status == 200, body


def in_flight_at_sim(node: SimNode) -> int:
    """What the simulator's engines hold: prompt + max_tokens of each running or waiting."""
    return sum(
        req.prompt_len + req.max_output
        for engine in node.engines
        for req in (*engine.running, *engine.waiting)
    )


async def test_the_budget_holds_at_the_simulator(tmp_path: Path) -> None:
    budget = 4000
    node, sim = await start_sim(PROFILE, time_scale=20.0, seed=3)
    peak = {"at_submit": 0, "polled": 0}
    submit = node.submit

    def counting_submit(job: Any, arrival: float | None = None) -> Any:
        # The sum only grows when a request arrives: check it at that very moment.
        out = submit(job, arrival)
        peak["at_submit"] = max(peak["at_submit"], in_flight_at_sim(node))
        return out

    node.submit = counting_submit  # type: ignore[method-assign]
    _, gate = await start_gate(sim.url, GateConfig(DEFAULT_LANES), state_file=tmp_path / "s.json")
    stop = asyncio.Event()

    async def poll() -> None:
        while not stop.is_set():
            peak["polled"] = max(peak["polled"], in_flight_at_sim(node))
            await asyncio.sleep(0.002)

    rng = random.Random(7)
    try:
        async with aiohttp.ClientSession() as s:
            lane = {"max_inflight": 64, "max_queue": 256, "max_inflight_tokens": budget}
            async with s.patch(f"{gate.url}/admin/limits", json={"lanes": {"chat": lane}}) as r:
                assert r.status == 200

            async def one(body: dict[str, Any]) -> int:
                async with s.post(f"{gate.url}/v1/chat/completions", json=body) as r:
                    await r.read()
                    return r.status

            poller = asyncio.create_task(poll())
            statuses: list[int] = []
            for _ in range(4):  # bursts: many at once, then a pause
                bodies = [
                    chat(rng.randint(40, 4000), rng.randint(8, 600), model=node.model_name)
                    for _ in range(rng.randint(15, 30))
                ]
                assert all(need(b) <= budget for b in bodies)
                statuses += await asyncio.gather(*(one(b) for b in bodies))
                await asyncio.sleep(0.05)
            stop.set()
            await poller
        assert statuses and all(code == 200 for code in statuses), statuses
        assert peak["at_submit"] <= budget and peak["polled"] <= budget, peak
        assert peak["at_submit"] > budget // 2, peak  # the budget was actually what held them
        status = await lane_status(gate.url)
        assert status["inflight_tokens"] == 0 and status["inflight"] == 0
        assert status["max_inflight_tokens"] == budget
    finally:
        await gate.close()
        await sim.close()


async def test_a_request_over_the_whole_budget_is_a_400_at_once(tmp_path: Path) -> None:
    async with rig(tmp_path, hold=True) as r:
        await patch(r, {"max_inflight_tokens": 1000})
        body = chat(2000, 600)  # 500 + a few prompt tokens + 600 > 1000
        reply = await r.request("POST", "/v1/chat/completions", json.dumps(body).encode())
        assert reply.status == 400
        error = reply.json()["error"]
        assert error["code"] == "over_token_budget"
        assert str(need(body)) in error["message"] and "1000" in error["message"]
        assert r.upstream.bodies == []
        status = await lane_status(r.url)
        assert status["queued"] == 0 and status["rejected_total"] == {"over_token_budget": 1}


async def test_no_bound_reserves_the_lane_cap_or_the_default(tmp_path: Path) -> None:
    async with rig(tmp_path, hold=True) as r, aiohttp.ClientSession() as s:
        await patch(r, {"max_inflight_tokens": 100_000})
        url = f"{r.url}/v1/chat/completions"
        first = asyncio.create_task(s.post(url, json=chat(400, None)))
        await r.upstream.wait_until(lambda: r.upstream.active == 1)
        assert (await lane_status(r.url))["inflight_tokens"] == need(chat(400, None), 512)
        await patch(r, {"max_output_tokens": 100})
        second = asyncio.create_task(s.post(url, json=chat(400, None, n=2)))
        await r.upstream.wait_until(lambda: r.upstream.active == 2)
        # Capped to 50 per answer, 2 answers: 100 output tokens reserved.
        expected = need(chat(400, None), 512) + need(chat(400, 50, n=2))
        assert (await lane_status(r.url))["inflight_tokens"] == expected
        free(r, 2)
        for task in (first, second):
            async with await task as reply:
                assert reply.status == 200
        await wait_for(lambda: _tokens_are(r.url, 0))


def free(r: Rig, n: int) -> None:
    for _ in range(n):
        r.upstream.release.release()


async def _tokens_are(url: str, value: int) -> bool:
    return (await lane_status(url))["inflight_tokens"] == value


async def test_both_limits_apply_and_show(tmp_path: Path) -> None:
    async with rig(tmp_path, hold=True) as r, aiohttp.ClientSession() as s:
        url = f"{r.url}/v1/chat/completions"
        await patch(r, {"max_inflight": 2, "max_inflight_tokens": 10_000})
        tasks = [asyncio.create_task(s.post(url, json=chat(40, 10))) for _ in range(3)]
        await wait_for(lambda: _counts(r.url, inflight=2, queued=1))  # held by the count
        free(r, 3)
        for t in tasks:
            async with await t as reply:
                assert reply.status == 200
        await patch(r, {"max_inflight": 16, "max_inflight_tokens": 1000})
        tasks = [asyncio.create_task(s.post(url, json=chat(40, 600))) for _ in range(2)]
        await wait_for(lambda: _counts(r.url, inflight=1, queued=1))  # held by the tokens
        one = need(chat(40, 600))
        status = await lane_status(r.url)
        assert status["inflight_tokens"] == one and status["max_inflight_tokens"] == 1000
        async with s.get(f"{r.url}/metrics") as m:
            metrics = await m.text()
        assert f'gpuwatch_gate_inflight_tokens{{lane="chat"}} {float(one)}' in metrics
        assert 'gpuwatch_gate_limit_max_inflight_tokens{lane="chat"} 1000.0' in metrics
        free(r, 2)
        for t in tasks:
            async with await t as reply:
                assert reply.status == 200
        await wait_for(lambda: _tokens_are(r.url, 0))


async def _counts(url: str, inflight: int, queued: int) -> bool:
    status = await lane_status(url)
    return bool(status["inflight"] == inflight and status["queued"] == queued)


async def test_tokens_come_back_when_the_client_leaves(tmp_path: Path) -> None:
    async with rig(tmp_path, hold=True) as r:
        await patch(r, {"max_inflight_tokens": 1000})
        body = json.dumps(chat(40, 600)).encode()
        held = asyncio.create_task(r.request("POST", "/v1/chat/completions", body, {}))
        await r.upstream.wait_until(lambda: r.upstream.active == 1)
        queued = asyncio.create_task(r.request("POST", "/v1/chat/completions", body, {}))
        await wait_for(lambda: _counts(r.url, inflight=1, queued=1))
        for task in (queued, held):  # the queued one, then the one in flight, go away
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await wait_for(lambda: _counts(r.url, inflight=0, queued=0))
        assert (await lane_status(r.url))["inflight_tokens"] == 0


async def test_tokens_come_back_when_the_upstream_fails(tmp_path: Path) -> None:
    # A port nothing listens on: every request is a 502.
    async with rig(tmp_path, hold=True) as r:
        await patch(r, {"max_inflight_tokens": 1000})
        await r.upstream.stop()
        reply = await r.request("POST", "/v1/chat/completions", json.dumps(chat(40, 10)).encode())
        assert reply.status == 502
        status = await lane_status(r.url)
        assert status["inflight_tokens"] == 0 and status["inflight"] == 0


@pytest.mark.parametrize(
    ("value", "status"), [(0, 400), ("96000", 400), (True, 400), (10**9, 400), (None, 200)]
)
async def test_patch_checks_the_budget(tmp_path: Path, value: Any, status: int) -> None:
    async with rig(tmp_path) as r:
        code, body = await r.patch({"lanes": {"chat": {"max_inflight_tokens": value}}})
        assert code == status, body


async def test_an_old_state_file_without_the_key_loads(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    lanes = {"chat": {"max_inflight": 3, "max_queue": 5, "queue_timeout_s": 9.0}}
    state.write_text(json.dumps({"schema": 2, "limits": {"version": 4, "lanes": lanes}}))
    async with rig(tmp_path) as r, aiohttp.ClientSession() as s:
        async with s.get(f"{r.url}/admin/limits") as reply:
            chat_limits = (await reply.json())["lanes"]["chat"]
        assert chat_limits["max_inflight"] == 3 and chat_limits["max_inflight_tokens"] is None


class TokenizingUpstream(CountingUpstream):
    """A counting upstream with a /tokenize that counts every prompt as 1000 tokens."""

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_post("/v1/{tail:.*}", self.handle)
        self.served = await serve(app, "127.0.0.1", 0)
        return self.served.url

    async def tokenize(self, _: web.Request) -> web.Response:
        return web.json_response({"count": 1000})


@contextlib.asynccontextmanager
async def tokenizing_gate(tmp_path: Path, upstream: Any) -> AsyncIterator[tuple[Any, Any]]:
    """A gate whose chat lane counts prompts with ``upstream``'s /tokenize, in front of it:
    (the gate's listener, the upstream)."""
    url = await upstream.start()
    lanes = tuple(
        Lane(lane.name, lane.prefixes, lane.limits, tokenize=True) if lane.name == "chat" else lane
        for lane in DEFAULT_LANES
    )
    _, gate = await start_gate(url, GateConfig(lanes), state_file=tmp_path / "s.json")
    try:
        yield gate, upstream
    finally:
        await gate.close()
        await upstream.stop()


async def test_a_lane_that_tokenizes_reserves_the_upstreams_count(tmp_path: Path) -> None:
    async with (
        tokenizing_gate(tmp_path, TokenizingUpstream(hold=True)) as (gate, upstream),
        aiohttp.ClientSession() as s,
    ):
        patch_body = {"lanes": {"chat": {"max_inflight_tokens": 5000}}}
        async with s.patch(f"{gate.url}/admin/limits", json=patch_body) as r:
            assert r.status == 200
        task = asyncio.create_task(s.post(f"{gate.url}/v1/chat/completions", json=chat(8, 30)))
        await upstream.wait_until(lambda: upstream.active == 1)
        assert (await lane_status(gate.url))["inflight_tokens"] == 1000 + 30
        upstream.release.release()
        async with await task as reply:
            assert reply.status == 200
        await wait_for(lambda: _tokens_are(gate.url, 0))


async def test_a_batch_of_prompts_reserves_each_prompts_output(tmp_path: Path) -> None:
    """Regression: 50 prompts with max_tokens 64 reserved 64 output tokens, not 3,200."""
    async with rig(tmp_path, hold=True) as r, aiohttp.ClientSession() as s:
        await patch(r, {"max_inflight_tokens": 100_000})
        body = {"prompt": ["hi"] * 50, "max_tokens": 64}
        task = asyncio.create_task(s.post(f"{r.url}/v1/completions", json=body))
        await r.upstream.wait_until(lambda: r.upstream.active == 1)
        assert (await lane_status(r.url))["inflight_tokens"] == 50 * 1 + 50 * 64
        free(r, 1)
        async with await task as reply:
            assert reply.status == 200
        await patch(r, {"max_inflight_tokens": 3000})
        reply2 = await r.request("POST", "/v1/completions", json.dumps(body).encode())
        assert reply2.status == 400 and reply2.json()["error"]["code"] == "over_token_budget"


async def test_a_lane_that_tokenizes_counts_token_ids_too(tmp_path: Path) -> None:
    """Regression: with tokenize on, a prompt of token ids sent empty text to the tokenizer,
    whose count replaced the ids: 100,000 ids passed a 2,000-token cap."""
    async with tokenizing_gate(tmp_path, TokenizingUpstream(hold=False)) as (gate, upstream):
        async with aiohttp.ClientSession() as s:
            patch_body = {"lanes": {"chat": {"max_prompt_tokens": 2000}}}
            async with s.patch(f"{gate.url}/admin/limits", json=patch_body) as r:
                assert r.status == 200
            for prompt in ([1] * 100_000, [[1] * 1500, [2] * 1500]):
                body = {"prompt": prompt, "max_tokens": 1}
                async with s.post(f"{gate.url}/v1/completions", json=body) as reply:
                    assert reply.status == 400
                    assert (await reply.json())["error"]["code"] == "prompt_too_long"
            # Text and ids together: the tokenizer's 1000 for the text, plus the ids.
            for ids, status in ((1500, 400), (500, 200)):
                body = {"prompt": [1] * ids, "suffix": "x", "max_tokens": 1}
                async with s.post(f"{gate.url}/v1/completions", json=body) as reply:
                    assert reply.status == status
        assert len(upstream.bodies) == 1


class SilentTokenizer(TokenizingUpstream):
    async def tokenize(self, _: web.Request) -> web.Response:
        await asyncio.Event().wait()  # never answers
        raise AssertionError("unreachable")


async def test_a_tokenizer_that_never_answers_falls_back_to_the_estimate(tmp_path: Path) -> None:
    """Regression: the /tokenize side request had no timeout: a silent tokenizer held every
    request of a tokenizing lane before admission, for as long as the client waited."""
    async with tokenizing_gate(tmp_path, SilentTokenizer(hold=False)) as (gate, upstream):
        async with aiohttp.ClientSession() as s:
            lane = {"upstream_first_byte_timeout_s": 0.3, "max_prompt_tokens": 100}
            async with s.patch(f"{gate.url}/admin/limits", json={"lanes": {"chat": lane}}) as r:
                assert r.status == 200
            async with s.post(f"{gate.url}/v1/completions", json={"prompt": "hi"}) as reply:
                assert reply.status == 200
            async with s.post(f"{gate.url}/v1/completions", json={"prompt": "x" * 800}) as reply:
                assert reply.status == 400  # the estimate (200 tokens) still holds the cap
        assert len(upstream.bodies) == 1
