"""The gate on loopback, in front of a counting upstream and the simulator."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gpuwatch.gate.config import GateConfig
from gpuwatch.gate.limits import DEFAULT_LANES
from gpuwatch.gate.server import Gate, start_gate
from gpuwatch.gate.state import StateError
from gpuwatch.sim.engine import Finish
from gpuwatch.sim.profiles import get_profile
from gpuwatch.sim.server import start_sim
from gpuwatch.sources.scrape import map_page
from tests.functional.upstreams import CountingUpstream
from tests.helpers import eventually

CONFIG = GateConfig(DEFAULT_LANES, ("/health-upstream",))


@contextlib.asynccontextmanager
async def sim_behind_gate(tmp_path: Path, time_scale: float) -> AsyncIterator[tuple]:
    """The simulator with a gate (default lanes) in front of it: (node, sim, gate, served)."""
    node, sim = await start_sim(get_profile("rtx4090-llama3-8b-awq"), time_scale=time_scale, seed=4)
    gate, served = await start_gate(sim.url, CONFIG, state_file=tmp_path / "s.json")
    try:
        yield node, sim, gate, served
    finally:
        await served.close()
        await sim.close()


class Harness:
    def __init__(
        self, gate: Gate, url: str, upstream: CountingUpstream, session: aiohttp.ClientSession
    ) -> None:
        self.gate, self.url, self.upstream, self.s = gate, url, upstream, session

    async def patch(self, body: Any, **headers: str) -> tuple[int, Any]:
        async with self.s.patch(f"{self.url}/admin/limits", json=body, headers=headers) as r:
            return r.status, await r.json()

    async def limits(self) -> dict[str, Any]:
        async with self.s.get(f"{self.url}/admin/limits") as r:
            return await r.json()

    async def status(self) -> dict[str, Any]:
        async with self.s.get(f"{self.url}/admin/status") as r:
            return await r.json()

    def send(self, tag: Any, **extra: Any) -> asyncio.Task[tuple[int, Any, dict[str, str]]]:
        async def go() -> tuple[int, Any, dict[str, str]]:
            body = {"tag": tag, "prompt": "hi", **extra}
            async with self.s.post(f"{self.url}/v1/completions", json=body) as r:
                text = await r.text()
                try:
                    data = json.loads(text)
                except ValueError:
                    data = text
                return r.status, data, dict(r.headers)

        return asyncio.create_task(go())

    async def queued(self, lane: str = "chat") -> int:
        return (await self.status())["lanes"][lane]["queued"]

    async def wait_queued(self, n: int, lane: str = "chat", timeout: float = 5.0) -> None:
        async def reached() -> bool:
            return await self.queued(lane) == n

        await eventually(reached, timeout, message=f"queue never reached {n}")


@pytest.fixture
async def h(tmp_path: Path) -> AsyncIterator[Harness]:
    upstream = CountingUpstream()
    up_url = await upstream.start()
    gate, served = await start_gate(up_url, CONFIG, state_file=tmp_path / "state.json")
    async with aiohttp.ClientSession() as session:
        yield Harness(gate, served.url, upstream, session)
    await served.close()
    await upstream.stop()


async def test_inflight_never_exceeds_the_limit(h: Harness) -> None:
    status, _ = await h.patch({"lanes": {"chat": {"max_inflight": 3, "max_queue": 100}}})
    assert status == 200
    tasks = [h.send(i) for i in range(20)]
    await h.upstream.wait_until(lambda: h.upstream.active == 3)
    await h.wait_queued(17)
    for _ in range(20):
        h.upstream.release.release()
    results = await asyncio.gather(*tasks)
    assert all(r[0] == 200 for r in results)
    assert h.upstream.max_active == 3
    st = await h.status()
    assert st["lanes"]["chat"]["inflight"] == 0 and st["lanes"]["chat"]["admitted_total"] == 20


async def test_queue_is_fifo_and_bounded(h: Harness) -> None:
    await h.patch({"lanes": {"chat": {"max_inflight": 1, "max_queue": 3}}})
    first = h.send("a")
    await h.upstream.wait_until(lambda: h.upstream.active == 1)
    queued = []
    for i, tag in enumerate("bcd"):
        queued.append(h.send(tag))
        await h.wait_queued(i + 1)
    status, body, headers = await h.send("e")
    assert status == 429 and headers["Retry-After"] == "1"
    assert body["error"]["code"] == "queue_full" and "max_queue 3" in body["error"]["message"]
    for _ in range(4):
        h.upstream.release.release()
    await asyncio.gather(first, *queued)
    assert h.upstream.arrivals == ["a", "b", "c", "d"]
    assert (await h.status())["lanes"]["chat"]["rejected_total"] == {"queue_full": 1}


async def test_queue_timeout_is_503_with_retry_after(h: Harness) -> None:
    await h.patch({"lanes": {"chat": {"max_inflight": 1, "queue_timeout_s": 0.2}}})
    held = h.send("a")
    await h.upstream.wait_until(lambda: h.upstream.active == 1)
    status, body, headers = await h.send("b")
    assert status == 503 and headers["Retry-After"] == "5"
    assert body["error"]["code"] == "queue_timeout"
    assert await h.queued() == 0
    h.upstream.release.release()
    assert (await held)[0] == 200
    assert h.upstream.arrivals == ["a"]


async def test_prompt_cap_and_output_caps(h: Harness) -> None:
    h.upstream.hold = False
    await h.patch({"lanes": {"chat": {"max_prompt_tokens": 10, "max_output_tokens": 64}}})
    status, body, _ = await h.send("long", prompt="x" * 44)  # 11 tokens by the estimate
    assert status == 400 and body["error"]["code"] == "prompt_too_long"
    assert "prompt is 11 tokens" in body["error"]["message"]
    status, body, _ = await h.send("clamped", max_tokens=500)
    assert status == 200 and body == {"tag": "clamped", "max_tokens": 64}
    status, body, _ = await h.send("absent")
    assert status == 200 and body["max_tokens"] == 64  # set where absent
    status, body, _ = await h.send("under", max_tokens=10)
    assert body["max_tokens"] == 10
    await h.patch({"lanes": {"chat": {"output_tokens_policy": "reject"}}})
    status, body, _ = await h.send("over", max_tokens=65)
    assert status == 400 and body["error"]["code"] == "max_tokens"
    assert "max_tokens 65 is over lane 'chat''s cap of 64" in body["error"]["message"]
    assert h.upstream.arrivals == ["clamped", "absent", "under"]
    rejected = (await h.status())["lanes"]["chat"]["rejected_total"]
    assert rejected == {"prompt_too_long": 1, "max_tokens": 1}


async def test_raising_admits_queued_at_once_and_lowering_cancels_nothing(h: Harness) -> None:
    await h.patch({"lanes": {"chat": {"max_inflight": 1}}})
    tasks = [h.send(i) for i in range(5)]
    await h.upstream.wait_until(lambda: h.upstream.active == 1)
    await h.wait_queued(4)
    await h.patch({"lanes": {"chat": {"max_inflight": 4}}})
    await h.upstream.wait_until(lambda: h.upstream.active == 4)
    await h.patch({"lanes": {"chat": {"max_inflight": 2}}})
    assert h.upstream.active == 4  # nothing running was cancelled
    h.upstream.release.release()
    h.upstream.release.release()
    h.upstream.release.release()  # three finish: 1 left in flight, below the new limit of 2
    await h.upstream.wait_until(lambda: h.upstream.completed == 3)
    await h.upstream.wait_until(lambda: h.upstream.active == 2)  # the last queued one admitted
    assert h.upstream.aborted == 0
    h.upstream.release.release()
    h.upstream.release.release()
    assert [r[0] for r in await asyncio.gather(*tasks)] == [200] * 5


async def test_pause_drains_and_resume_admits(h: Harness) -> None:
    running = h.send("running")
    await h.upstream.wait_until(lambda: h.upstream.active == 1)
    status, limits = await h.patch({"paused": True})
    assert status == 200 and limits["paused"] is True
    status, body, headers = await h.send("refused")
    assert status == 503 and body["error"]["code"] == "paused" and "Retry-After" in headers
    h.upstream.release.release()
    assert (await running)[0] == 200  # in flight finished
    await h.patch({"paused": False})
    h.upstream.hold = False
    assert (await h.send("after"))[0] == 200


async def test_disconnect_while_queued_leaves_the_queue(h: Harness) -> None:
    await h.patch({"lanes": {"chat": {"max_inflight": 1}}})
    held = h.send("held")
    await h.upstream.wait_until(lambda: h.upstream.active == 1)
    gone = h.send("gone")
    await h.wait_queued(1)
    gone.cancel()
    await h.wait_queued(0)
    h.upstream.release.release()
    await held
    assert h.upstream.arrivals == ["held"]
    st = await h.status()
    assert st["lanes"]["chat"]["inflight"] == 0


async def test_disconnect_mid_stream_aborts_upstream_and_frees_the_slot(h: Harness) -> None:
    h.upstream.hold = False
    session = aiohttp.ClientSession()
    resp = await session.post(
        f"{h.url}/v1/completions", json={"tag": "s", "stream": True, "chunks": 1000, "gap": 0.01}
    )
    assert await resp.content.readline()  # mid-stream
    resp.close()
    await session.close()
    await h.upstream.wait_until(lambda: h.upstream.aborted == 1, timeout=2)
    st = await h.status()
    assert st["lanes"]["chat"]["inflight"] == 0


async def test_streams_pass_through_chunk_by_chunk(h: Harness) -> None:
    h.upstream.hold = False
    got = []
    async with h.s.post(
        f"{h.url}/v1/completions", json={"tag": "s", "stream": True, "chunks": 5, "gap": 0.05}
    ) as r:
        assert r.headers["Content-Type"] == "text/event-stream"
        first_at = None
        async for line in r.content:
            if line.strip():
                got.append(line.strip())
                first_at = first_at or time.monotonic()
        last_at = time.monotonic()
    assert got == [f'data: {{"i": {i}}}'.encode() for i in range(5)] + [b"data: [DONE]"]
    assert last_at - first_at > 0.15  # the chunks arrived spread out, not buffered whole


async def test_upstream_down_is_502_and_back_up_works(tmp_path: Path) -> None:
    upstream = CountingUpstream(hold=False)
    up_url = await upstream.start()
    await upstream.stop()
    gate, served = await start_gate(up_url, CONFIG, state_file=tmp_path / "s.json")
    try:
        async with aiohttp.ClientSession() as s:
            async with s.post(f"{served.url}/v1/completions", json={"prompt": "x"}) as r:
                body = await r.json()
                assert r.status == 502 and body["error"]["type"] == "upstream_error"
                assert "unreachable" in body["error"]["message"]
            port = int(up_url.rsplit(":", 1)[1])
            from aiohttp import web

            from gpuwatch.aioserve import serve

            app = web.Application()
            app.router.add_post("/v1/{tail:.*}", upstream.handle)
            back = await serve(app, "127.0.0.1", port)
            async with s.post(f"{served.url}/v1/completions", json={"prompt": "x", "tag": 1}) as r:
                assert r.status == 200
            await back.close()
            async with s.get(f"{served.url}/metrics") as r:
                page = await r.text()
        assert "gpuwatch_gate_upstream_errors_total 1.0" in page
        assert gate.lanes["chat"].inflight == 0
    finally:
        await served.close()


async def test_routes_other_paths_404_unless_configured(h: Harness) -> None:
    async with h.s.get(f"{h.url}/admin-nope") as r:
        assert r.status == 404
    async with h.s.get(f"{h.url}/v1/models") as r:
        assert r.status == 200 and (await r.json())["data"][0]["id"] == "count"
    assert h.gate.lane_for("/v1/images/generations") == "image"
    assert h.gate.lane_for("/v1/embeddings") == "embed"
    assert h.gate.lane_for("/health-upstream") == "default"
    assert h.gate.lane_for("/other") is None


async def test_patch_validation_names_the_field_and_changes_nothing(h: Harness) -> None:
    before = await h.limits()
    for body, field in [
        ({"lanes": {"chat": {"max_inflight": -1}}}, "lanes.chat.max_inflight"),
        ({"lanes": {"chat": {"max_inflight": 2, "max_queue": "x"}}}, "lanes.chat.max_queue"),
        ({"lanes": {"nope": {"max_inflight": 2}}}, "lanes.nope"),
        ({"lanes": {"chat": {"bogus": 1}}}, "lanes.chat.bogus"),
        ({"paused": "yes"}, "paused"),
        ({"colour": 1}, "colour"),
        ({"lanes": {"chat": {"output_tokens_policy": "drop"}}}, "lanes.chat.output_tokens_policy"),
        ({"lanes": {"chat": {"queue_timeout_s": 0}}}, "lanes.chat.queue_timeout_s"),
        ([1, 2], "body"),
    ]:
        status, resp = await h.patch(body)
        assert status == 400, body
        assert resp["error"]["code"] == field and resp["error"]["message"].startswith(field)
    assert await h.limits() == before


async def test_if_match_conflict_names_the_actor(h: Harness) -> None:
    status, first = await h.patch(
        {"lanes": {"chat": {"max_inflight": 6}}}, **{"X-Gpuwatch-Actor": "alice@box"}
    )
    assert status == 200 and first["version"] == 2
    status, body = await h.patch({"lanes": {"chat": {"max_inflight": 7}}}, **{"If-Match": "1"})
    assert status == 409
    assert body["error"]["message"].startswith("limits changed by alice@box")
    assert body["limits"]["lanes"]["chat"]["max_inflight"] == 6
    status, ok = await h.patch({"lanes": {"chat": {"max_inflight": 7}}}, **{"If-Match": "2"})
    assert status == 200 and ok["version"] == 3


async def test_audit_newest_first_with_before_and_after(h: Harness) -> None:
    await h.patch({"lanes": {"chat": {"max_inflight": 5}}}, **{"X-Gpuwatch-Actor": "a@x"})
    await h.patch({"paused": True}, **{"X-Gpuwatch-Actor": "b@y"})
    async with h.s.get(f"{h.url}/admin/audit?limit=1") as r:
        entries = (await r.json())["entries"]
    assert len(entries) == 1
    assert entries[0]["actor"] == "b@y" and entries[0]["change"] == {"paused": True}
    async with h.s.get(f"{h.url}/admin/audit") as r:
        entries = (await r.json())["entries"]
    assert [e["actor"] for e in entries] == ["b@y", "a@x"]
    assert entries[1]["before"]["lanes"]["chat"]["max_inflight"] == 16
    assert entries[1]["after"]["lanes"]["chat"]["max_inflight"] == 5


async def test_restart_keeps_limits_and_audit(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    _, served = await start_gate("http://127.0.0.1:9", CONFIG, state_file=path)
    async with (
        aiohttp.ClientSession() as s,
        s.patch(f"{served.url}/admin/limits", json={"lanes": {"embed": {"max_queue": 7}}}) as r,
    ):
        assert r.status == 200
    await served.close()
    gate2, served2 = await start_gate("http://127.0.0.1:9", CONFIG, state_file=path)
    try:
        assert gate2.state.limits.lanes["embed"].max_queue == 7
        assert gate2.state.limits.version == 2
        assert gate2.lanes["embed"].limits.max_queue == 7
        assert gate2.state.audit[0].change.to_json() == {"lanes": {"embed": {"max_queue": 7}}}
    finally:
        await served2.close()


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("{not json", "is corrupt"),
        (
            '{"schema": 1, "limits": {"version": 3, "lanes": {"chat": {"max_inflight": -4}}}}',
            "lanes.chat.max_inflight",
        ),
        ('{"schema": 9}', "unknown schema"),
    ],
)
async def test_corrupt_state_file_refuses_to_start(
    tmp_path: Path, content: str, reason: str
) -> None:
    path = tmp_path / "state.json"
    path.write_text(content)
    with pytest.raises(StateError) as info:
        await start_gate("http://127.0.0.1:9", CONFIG, state_file=path)
    assert str(path) in str(info.value) and reason in str(info.value)
    assert path.read_text() == content  # never reset


async def test_admin_auth(tmp_path: Path) -> None:
    _, served = await start_gate(
        "http://127.0.0.1:9", CONFIG, token="s3cret", state_file=tmp_path / "s.json"
    )
    try:
        async with aiohttp.ClientSession() as s:
            for headers, expected in [({}, 401), ({"Authorization": "Bearer wrong"}, 401),
                                      ({"Authorization": "Basic s3cret"}, 401),
                                      ({"Authorization": "Bearer s3cret"}, 200)]:  # fmt: skip
                for method, path in [("GET", "/admin/limits"), ("GET", "/admin/status"),
                                     ("GET", "/admin/audit"), ("PATCH", "/admin/limits")]:  # fmt: skip
                    async with s.request(method, served.url + path, headers=headers, json={}) as r:
                        assert r.status == expected, (headers, path)
    finally:
        await served.close()


async def test_gate_in_front_of_the_simulator_bounds_its_running_count(tmp_path: Path) -> None:
    async with sim_behind_gate(tmp_path, 5.0) as (node, sim, _, served):
        async with aiohttp.ClientSession() as s:
            async with s.patch(
                f"{served.url}/admin/limits", json={"lanes": {"chat": {"max_inflight": 3}}}
            ) as r:
                assert r.status == 200
            body = {"prompt": "p" * 200, "max_tokens": 40, "ignore_eos": True, "stream": True}

            async def one() -> int:
                async with s.post(f"{served.url}/v1/completions", json=body) as r:
                    await r.read()
                    return r.status

            tasks = [asyncio.create_task(one()) for _ in range(12)]
            peak = 0
            while not all(t.done() for t in tasks):
                async with s.get(f"{sim.url}/metrics") as r:
                    [engine] = map_page("sim", await r.text()).engines
                peak = max(peak, engine.running or 0)
                await asyncio.sleep(0.02)
            assert [t.result() for t in tasks] == [200] * 12
            assert 1 <= peak <= 3
            async with s.get(f"{served.url}/metrics") as r:
                [g] = map_page("gate", await r.text()).engines
        assert g.dialect == "gate" and g.running == 0 and g.histograms["ttft"].count == 12
        assert node.engines[0].blocks_allocated == node.engines[0].blocks_freed


async def test_disconnect_through_the_gate_aborts_in_the_simulator(tmp_path: Path) -> None:
    async with sim_behind_gate(tmp_path, 1.0) as (node, sim, gate, served):
        session = aiohttp.ClientSession()
        # A long prompt: the client leaves during prefill, before any byte flowed.
        resp_task = asyncio.create_task(
            session.post(
                f"{served.url}/v1/completions",
                json={"prompt": "q" * 60000, "max_tokens": 10, "stream": True},
            )
        )
        engine = node.engines[0]
        await eventually(lambda: engine.used_blocks > 0, 30, message="never reached the engine")
        [request] = [*engine.running, *engine.waiting]
        resp_task.cancel()
        await session.close()
        # Aborted, not run to its end (which a slow machine could also reach within any
        # fixed window): the request's own finish says which.
        await eventually(
            lambda: request.finish is Finish.ABORT and not engine.used_blocks and engine.idle,
            30,
            message=lambda: f"the simulator never saw the abort (finish {request.finish})",
        )
        assert gate.lanes["chat"].inflight == 0


async def test_upstream_errors_pass_through_as_they_are(tmp_path: Path) -> None:
    async with sim_behind_gate(tmp_path, 5.0) as (_, sim, _, served):
        async with aiohttp.ClientSession() as s:
            body = {"prompt": "hi", "n": 2}
            async with s.post(f"{sim.url}/v1/completions", json=body) as r:
                direct = (r.status, await r.json())
            async with s.post(f"{served.url}/v1/completions", json=body) as r:
                via_gate = (r.status, await r.json())
        assert via_gate == direct and direct[0] == 400
