"""Adaptive admission over real HTTP: in front of the simulator with a tight target the
controller cuts the effective limit (within the bounds, each change an audit line by
``adaptive`` and a metric, no new version), operators keep their If-Match, a pause wins, and
the upstream's preemptions read from its /metrics (a real vLLM page) cut too."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from gpuwatch.adminapi import AuditEntry, LimitsPatch
from gpuwatch.aioserve import serve
from gpuwatch.gate.audit import KEEP
from gpuwatch.gate.config import GateConfig
from gpuwatch.gate.limits import DEFAULT_LANES
from gpuwatch.gate.server import Gate, start_gate
from gpuwatch.sim.profiles import get_profile
from gpuwatch.sim.server import start_sim
from tests.functional import test_gate_cli
from tests.functional.test_gate_cli import gw
from tests.functional.upstreams import CountingUpstream
from tests.helpers import eventually

PROFILE = get_profile("rtx4090-llama3-8b-awq")
FIXTURE = Path(__file__).parent.parent / "fixtures" / "metrics" / "vllm-1.prom"


def adaptive_config(**limits: Any) -> GateConfig:
    lanes = tuple(
        replace(lane, limits=replace(lane.limits, **limits)) if lane.name == "chat" else lane
        for lane in DEFAULT_LANES
    )
    return GateConfig(lanes)


async def get(session: aiohttp.ClientSession, url: str) -> Any:
    async with session.get(url) as r:
        assert r.status == 200, await r.text()
        return await r.json() if "json" in r.content_type else await r.text()


async def test_a_tight_target_cuts_within_bounds_audited_apart_from_people(
    tmp_path: Path,
) -> None:
    node, sim = await start_sim(PROFILE, time_scale=5.0, seed=4)
    # Static at first: adaptive is switched on under load, and starts from what is in flight.
    config = adaptive_config(
        max_inflight=24,
        max_queue=2000,
        queue_timeout_s=120.0,
        max_queue_wait_s=120.0,  # this test is about the in-flight limit, not queue time
        target_ttft_p99_s=0.001,  # nothing meets this: every window is over target
        min_inflight=4,
        max_inflight_tokens=48_000,  # the effective budget moves with the count
    )
    gate, served = await start_gate(sim.url, config, state_file=tmp_path / "s.json")
    statuses: list[int] = []
    stop = asyncio.Event()
    seen_effective: list[int] = []

    async def load(s: aiohttp.ClientSession) -> None:
        body = {
            "model": node.model_name,
            "messages": [{"role": "user", "content": "x" * 1200}],
            "max_tokens": 32,
            "stream": True,
        }

        async def one() -> None:
            async with s.post(f"{served.url}/v1/chat/completions", json=body) as r:
                await r.read()
                statuses.append(r.status)

        tasks: set[asyncio.Task[None]] = set()
        while not stop.is_set():
            seen_effective.append(gate.lanes["chat"].limits.max_inflight)
            while len(tasks) < 40:  # always more than the limit: a queue stays
                task = asyncio.create_task(one())
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            await asyncio.sleep(0.01)
        await asyncio.gather(*tasks)

    try:
        async with aiohttp.ClientSession() as s:
            loader = asyncio.create_task(load(s))
            await eventually(lambda: gate.lanes["chat"].inflight == 24, timeout=30)
            async with s.patch(
                f"{served.url}/admin/limits",
                json={"lanes": {"chat": {"policy": "adaptive"}}},
                headers={"If-Match": '"1"', "X-Gpuwatch-Actor": "bob"},
            ) as r:
                assert r.status == 200, await r.text()
                switched = await r.json()
            # Switched on at 24 in flight: it starts there, not at its floor nor its ceiling.
            assert switched["effective"]["chat"]["max_inflight"] == 24

            async def two_cuts() -> list[dict[str, Any]]:
                audit = (await get(s, f"{served.url}/admin/audit"))["entries"]
                mine = [e for e in audit if e["actor"] == "adaptive"]
                return mine if len(mine) >= 2 else []

            cuts = await eventually(two_cuts, timeout=30, message="the controller never cut twice")
            status = (await get(s, f"{served.url}/admin/status"))["lanes"]["chat"]
            limits = await get(s, f"{served.url}/admin/limits")
            metrics = await get(s, f"{served.url}/metrics")

            # An operator's change made from the version before the controller's: no 409.
            async with s.patch(
                f"{served.url}/admin/limits",
                json={"lanes": {"chat": {"min_inflight": 20}}},
                headers={"If-Match": '"2"', "X-Gpuwatch-Actor": "alice"},
            ) as r:
                assert r.status == 200, await r.text()
                raised = await r.json()
            # A change from an old version is refused naming the person, not the controller.
            async with s.patch(
                f"{served.url}/admin/limits",
                json={"lanes": {"chat": {"max_queue": 10}}},
                headers={"If-Match": '"2"'},
            ) as r:
                assert r.status == 409
                conflict = await r.json()
            stop.set()
            await loader
    finally:
        await served.close()
        await sim.close()

    assert conflict["actor"] == "alice"

    for entry in cuts:
        assert entry["version"] == 2  # the configured limits did not change
        assert entry["reason"].startswith("-") and "p99 TTFT" in entry["reason"]
        assert "> 0.00s" in entry["reason"]
        new = entry["change"]["lanes"]["chat"]["effective_max_inflight"]
        assert 4 <= new < entry["before"]["max_inflight"] <= 24
    assert limits["version"] == 2 and limits["lanes"]["chat"]["max_inflight"] == 24
    assert limits["effective"]["chat"]["max_inflight"] < 24
    assert status["max_inflight"] == 24 and 4 <= status["effective_max_inflight"] < 24
    # 48,000 tokens for 24 in flight: 2,000 a slot, configured budget apart from effective.
    assert status["max_inflight_tokens"] == 48_000
    assert status["effective_max_inflight_tokens"] == 2_000 * status["effective_max_inflight"]
    adaptive = status["adaptive"]
    assert adaptive["last_decision"]["direction"] == "down"
    assert adaptive["target_ttft_p99_s"] == 0.001 and adaptive["min_inflight"] == 4
    assert all(4 <= n <= 24 for _, n in adaptive["history"])
    assert all(4 <= n <= 24 for n in seen_effective)  # bounds held at every moment sampled
    assert 'gpuwatch_gate_adaptive_decisions_total{direction="down",lane="chat"}' in metrics
    assert 'gpuwatch_gate_limit_max_inflight{lane="chat"} 24.0' in metrics
    # Raising the floor above the effective limit lifts it at once, and is a new version.
    assert raised["version"] == 3 and raised["effective"]["chat"]["max_inflight"] >= 20
    assert statuses and all(code == 200 for code in statuses), set(statuses)


@contextlib.asynccontextmanager
async def vllm_page() -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """A real vLLM /metrics page whose preemption counter the test sets (``broken`` serves a
    page no dialect reads)."""
    text = FIXTURE.read_text()
    page: dict[str, Any] = {"preemptions": 0.0, "waiting": 0.0, "broken": False}

    async def metrics(_: web.Request) -> web.Response:
        if page["broken"]:
            return web.Response(text="<html>oops</html>", content_type="text/html")
        body = (
            text.replace(
                'vllm:num_preemptions_total{model_name="facebook/opt-125m"} 0.0',
                f'vllm:num_preemptions_total{{model_name="facebook/opt-125m"}} {page["preemptions"]}',
            )
            .replace(
                'vllm:gpu_cache_usage_perc{model_name="facebook/opt-125m"} 0.0',
                'vllm:gpu_cache_usage_perc{model_name="facebook/opt-125m"} 0.5',
            )
            .replace(
                'vllm:num_requests_waiting{model_name="facebook/opt-125m"} 0.0',
                f'vllm:num_requests_waiting{{model_name="facebook/opt-125m"}} {page["waiting"]}',
            )
        )
        return web.Response(text=body, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    served = await serve(app, "127.0.0.1", 0)
    try:
        yield f"{served.url}/metrics", page
    finally:
        await served.close()


@contextlib.asynccontextmanager
async def adaptive_at(url: str, upstream: CountingUpstream, n: int) -> AsyncIterator[None]:
    """Hold ``n`` requests in flight at the upstream, then switch the chat lane to adaptive:
    it starts from those ``n`` (issue 24: from what is in flight, not its ceiling). The held
    requests are let go on the way out."""
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    async with aiohttp.ClientSession() as s:
        held = [asyncio.create_task(s.post(f"{url}/v1/chat/completions", json=body))
                for _ in range(n)]  # fmt: skip
        await upstream.wait_until(lambda: upstream.active == n, timeout=10)
        async with s.patch(f"{url}/admin/limits",
                           json={"lanes": {"chat": {"policy": "adaptive"}}}) as r:  # fmt: skip
            assert r.status == 200, await r.text()
            assert (await r.json())["effective"]["chat"]["max_inflight"] == n
        try:
            yield
        finally:
            for _ in range(n):
                upstream.release.release()
            for response in await asyncio.gather(*held):
                response.release()


@contextlib.asynccontextmanager
async def page_fed_gate(
    tmp_path: Path, inflight: int, **limits: Any
) -> AsyncIterator[tuple[Gate, Any, dict[str, Any]]]:
    """A gate whose chat lane has ``limits``, in front of a counting upstream, reading a vLLM
    page the test sets (``vllm_page``) as its --upstream-metrics; switched to adaptive with
    ``inflight`` requests held in flight (``adaptive_at``)."""
    upstream = CountingUpstream()
    up_url = await upstream.start()
    async with vllm_page() as (metrics_url, page):
        gate, served = await start_gate(up_url, adaptive_config(**limits),
                                        state_file=tmp_path / "s.json",
                                        upstream_metrics=metrics_url)  # fmt: skip
        try:
            async with adaptive_at(served.url, upstream, inflight):
                yield gate, served, page
        finally:
            await served.close()
            await upstream.stop()


async def test_upstream_preemptions_cut_and_a_pause_wins(tmp_path: Path) -> None:
    limits = {"max_inflight": 16, "target_ttft_p99_s": 5.0, "min_inflight": 2}
    async with page_fed_gate(tmp_path, 16, **limits) as (gate, served, page):
        reading = await eventually(gate.upstream_metrics.latest, timeout=10)  # type: ignore[union-attr]
        assert reading.kv_usage == 0.5 and reading.preemptions_total == 0.0
        # The controller has seen the counter at 0 once: only what comes after counts.
        await eventually(lambda: gate.adaptive.control["chat"].preemptions_seen == 0.0)
        page["preemptions"] = 7.0
        await eventually(lambda: gate.lanes["chat"].limits.max_inflight == 12, timeout=10)
        last = gate.adaptive.status("chat").last_decision  # type: ignore[union-attr]
        assert last is not None and last.reason == "-25%: 7 preemptions upstream"

        # Paused: more preemptions, but the operator's pause wins; nothing moves.
        async with (
            aiohttp.ClientSession() as s,
            s.patch(f"{served.url}/admin/limits", json={"paused": True}) as r,
        ):
            assert r.status == 200
        page["preemptions"] = 20.0
        await eventually(lambda: "paused" in gate.adaptive.control["chat"].controller.note)
        assert gate.lanes["chat"].paused and gate.lanes["chat"].limits.max_inflight == 12

        # A page no dialect reads: the reading goes, the lane stays as it is.
        page["broken"] = True
        await eventually(lambda: gate.upstream_metrics.latest() is None, timeout=10)  # type: ignore[union-attr]
        assert gate.lanes["chat"].limits.max_inflight == 12


async def test_the_engines_own_queue_cuts_before_any_first_token(tmp_path: Path) -> None:
    """The overload's first second: 16 requests in flight and none has a first token (the
    upstream holds them), so there is no TTFT to judge; the engine's waiting queue growing on
    its /metrics page cuts the lane to what the engine batches, at once."""
    limits = {"max_inflight": 16, "target_ttft_p99_s": 60.0, "min_inflight": 2}
    async with page_fed_gate(tmp_path, 16, **limits) as (gate, served, page):
        latest = gate.upstream_metrics.latest  # type: ignore[union-attr]
        await eventually(lambda: latest() is not None and latest().waiting == 0.0)
        page["waiting"] = 5.0
        await eventually(lambda: gate.lanes["chat"].limits.max_inflight == 11, timeout=10)
        last = gate.adaptive.status("chat").last_decision  # type: ignore[union-attr]
        assert last is not None and last.reason == "-31%: upstream queue growing to 5"
        assert last.from_ == 16 and last.to == 11
        # No first token came: this was no TTFT cut.
        assert all(r.ttft_s is None for r in gate.latency["chat"].records)


async def test_preemptions_the_controller_could_not_answer_are_spent(tmp_path: Path) -> None:
    """Preemptions seen at the floor (no cut left) or while paused (the operator's pause wins)
    are not held against the lane later: lowering the floor or resuming cuts nothing by itself."""
    upstream = CountingUpstream()
    up_url = await upstream.start()
    config = adaptive_config(max_inflight=3, target_ttft_p99_s=5.0, min_inflight=2)
    async with vllm_page() as (metrics_url, page), aiohttp.ClientSession() as s:
        gate, served = await start_gate(
            up_url, config, state_file=tmp_path / "s.json", upstream_metrics=metrics_url
        )
        switched = adaptive_at(served.url, upstream, 3)
        await switched.__aenter__()
        control = gate.adaptive.control["chat"]

        async def seen(total: float) -> None:
            """The gate has read ``total`` and the controller has ticked twice since."""
            latest = gate.upstream_metrics.latest  # type: ignore[union-attr]
            await eventually(lambda: (latest() or 0) and latest().preemptions_total == total)  # type: ignore[union-attr]
            ticks = len(control.history)
            await eventually(lambda: len(control.history) >= ticks + 2, timeout=10)

        async def patch(body: dict[str, Any]) -> None:
            async with s.patch(f"{served.url}/admin/limits", json=body) as r:
                assert r.status == 200, await r.text()

        try:
            await eventually(lambda: control.preemptions_seen == 0.0, timeout=10)
            page["preemptions"] = 7.0
            await eventually(lambda: gate.lanes["chat"].limits.max_inflight == 2, timeout=10)
            page["preemptions"] = 20.0  # at the floor: 13 more, no cut can answer them
            await seen(20.0)
            await patch({"lanes": {"chat": {"min_inflight": 1}}})
            await eventually(lambda: "no queue" in control.controller.note, timeout=10)
            assert gate.lanes["chat"].limits.max_inflight == 2

            await patch({"paused": True})
            page["preemptions"] = 30.0  # while paused: the pause wins, and they are spent
            await seen(30.0)
            await patch({"paused": False})
            await eventually(lambda: "no queue" in control.controller.note, timeout=10)
            assert gate.lanes["chat"].limits.max_inflight == 2
            assert (
                control.last is not None and control.last.reason == "-33%: 7 preemptions upstream"
            )
        finally:
            await switched.__aexit__(None, None, None)
            await served.close()
            await upstream.stop()


async def test_a_409_names_the_person_after_a_thousand_controller_lines(tmp_path: Path) -> None:
    """The controller may write a line a second for hours: the newest entries kept in memory
    can all be its own, and a conflict must still name who made the version in force."""
    config = adaptive_config(max_inflight=8, policy="adaptive", target_ttft_p99_s=1.0)
    gate, served = await start_gate("http://127.0.0.1:9", config, state_file=tmp_path / "s.json")
    try:
        async with aiohttp.ClientSession() as s:
            async with s.patch(f"{served.url}/admin/limits", json={"lanes": {"chat": {"max_queue": 9}}},
                               headers={"X-Gpuwatch-Actor": "alice"}) as r:  # fmt: skip
                assert r.status == 200
            for n in range(KEEP + 1):  # what AdaptiveLoop.run writes, a move at a time
                moved = LimitsPatch(lanes={"chat": {"effective_max_inflight": 8 - n % 2}})
                await gate.state.record(AuditEntry(time.time(), "adaptive", 2, moved,
                                                   controller="aimd", reason="test"))  # fmt: skip
            async with s.patch(f"{served.url}/admin/limits", json={"lanes": {"chat": {"max_queue": 1}}},
                               headers={"If-Match": '"1"'}) as r:  # fmt: skip
                assert r.status == 409
                conflict = await r.json()
    finally:
        await served.close()
    assert conflict["actor"] == "alice" and "changed by alice" in conflict["error"]["message"]


gate = test_gate_cli.gate  # the fixture: ``gpuwatch gate`` as a process, with a token


def test_limits_cli_switches_a_lane_to_adaptive_and_shows_the_effective_limit(gate) -> None:  # type: ignore[no-untyped-def]
    url, token, _ = gate
    common = ["--admin", url, "--admin-token-file", str(token)]
    out = gw("limits", "set", "chat.policy=adaptive", "chat.min_inflight=4", *common)
    assert out.returncode == 1  # no target: the gate says which field
    assert "lanes.chat.target_ttft_p99_s: an adaptive lane needs a target" in out.stderr
    args = ["chat.policy=adaptive", "chat.target_ttft_p99_s=1.5", "chat.min_inflight=4"]
    out = gw("limits", "set", *args, *common)
    assert out.returncode == 0, out.stderr
    # Switched on with nothing in flight: it starts at its floor and grows in slow start.
    assert "chat: adaptive, target p99 TTFT 1.5 s, in flight 4..16, effective 4" in out.stdout
    out = gw("limits", "set", "chat.max_inflight=2", *common)  # under the floor: refused
    assert out.returncode == 1 and "must be >= min_inflight (4)" in out.stderr
