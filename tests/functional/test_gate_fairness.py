"""Classes and tenants through the gate (real HTTP, a counting upstream that holds requests):
sheddable requests are refused first under saturation, a noisy tenant gets no more than its
turn, a client cannot pick a class the operator did not map, and tenant limits apply live."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp

from gpuwatch.gate.classes import FAIRNESS_HEADER, OBJECTIVE_HEADER, Fairness, key_hash
from gpuwatch.gate.config import GateConfig
from gpuwatch.gate.limits import DEFAULT_LANES
from tests.functional.gatekit import Rig, rig
from tests.helpers import eventually

FAIRNESS = Fairness(objectives={"interactive": "critical", "batch": "sheddable"})
CONFIG = GateConfig(DEFAULT_LANES, fairness=FAIRNESS)


async def post(
    session: aiohttp.ClientSession, r: Rig, tag: str, objective: str = "", tenant: str = ""
) -> tuple[int, Any]:
    headers = {OBJECTIVE_HEADER: objective} if objective else {}
    if tenant:
        headers[FAIRNESS_HEADER] = tenant
    body = {"prompt": "hi", "tag": tag}
    async with session.post(f"{r.url}/v1/completions", json=body, headers=headers) as resp:
        return resp.status, await resp.json()


async def chat_status(r: Rig) -> dict[str, Any]:
    async with aiohttp.ClientSession() as s, s.get(f"{r.url}/admin/status") as resp:
        chat: dict[str, Any] = (await resp.json())["lanes"]["chat"]
        return chat


async def queued(r: Rig, n: int) -> None:
    seen: dict[str, Any] = {}

    async def reached() -> bool:
        seen.update(await chat_status(r))
        return bool(seen["queued"] == n)

    await eventually(reached, message=lambda: f"queued {seen.get('queued')}, wanted {n}")


async def test_under_saturation_only_sheddable_is_refused(tmp_path: Path) -> None:
    async with rig(tmp_path, CONFIG, hold=True) as r, aiohttp.ClientSession() as s:
        await r.patch({"lanes": {"chat": {"max_inflight": 2, "max_queue": 4}}})
        batch = [asyncio.create_task(post(s, r, f"b{i}", "batch")) for i in range(6)]
        await queued(r, 4)  # 2 in flight, 4 waiting: the lane is full of sheddable work
        critical = [asyncio.create_task(post(s, r, f"c{i}", "interactive")) for i in range(4)]
        await eventually(lambda: sum(t.done() for t in batch) == 4)
        late = await asyncio.gather(*(post(s, r, f"late{i}", "batch") for i in range(2)))
        assert [status for status, _ in late] == [429, 429]
        assert {body["error"]["code"] for _, body in late} == {"queue_full"}
        evicted = [t.result() for t in batch if t.done()]
        assert [status for status, _ in evicted] == [429] * 4
        assert {body["error"]["code"] for _, body in evicted} == {"evicted"}
        assert "for a critical request" in evicted[0][1]["error"]["message"]
        status = await chat_status(r)
        assert status["classes"]["critical"]["queued"] == 4
        assert status["classes"]["sheddable"]["inflight"] == 2
        assert status["classes"]["sheddable"]["rejected_total"] == {"evicted": 4, "queue_full": 2}
        assert status["classes"]["critical"]["rejected_total"] == {}
        for _ in range(6):
            r.upstream.release.release()
        answers = await asyncio.gather(*critical)
        assert [status for status, _ in answers] == [200] * 4
        assert sorted(r.upstream.arrivals[2:]) == ["c0", "c1", "c2", "c3"]
        async with s.get(f"{r.url}/metrics") as resp:
            metrics = await resp.text()
        assert (
            'gpuwatch_gate_class_rejected_total{class="sheddable",lane="chat",reason="evicted"} 4.0'
            in metrics
        )
        assert 'class="critical",lane="chat",reason=' not in metrics


async def test_a_noisy_tenant_gets_no_more_than_its_turn(tmp_path: Path) -> None:
    """One tenant sends 10x the others; while the others have work waiting, it gets one slot
    in three (three tenants), not the ten in twelve that FIFO would give it."""
    async with rig(tmp_path, CONFIG, hold=True) as r, aiohttp.ClientSession() as s:
        await r.patch({"lanes": {"chat": {"max_inflight": 1}}})
        tasks = [asyncio.create_task(post(s, r, f"noisy{i}", tenant="noisy")) for i in range(20)]
        await queued(r, 19)
        for tenant in ("a", "b"):
            tasks += [
                asyncio.create_task(post(s, r, f"{tenant}{i}", tenant=tenant)) for i in (0, 1)
            ]
        await queued(r, 23)
        status = await chat_status(r)
        assert status["tenants"][0] == {
            "tenant": "noisy",
            "id": "noisy",
            "inflight": 1,
            "queued": 19,
        }
        for _ in range(24):
            r.upstream.release.release()
        assert {code for code, _ in await asyncio.gather(*tasks)} == {200}
        # The first arrived before anyone else was waiting; from then on, turns.
        served = [tag.rstrip("0123456789") for tag in r.upstream.arrivals[1:7]]
        assert served.count("noisy") == 2, r.upstream.arrivals
        assert sorted(served) == ["a", "a", "b", "b", "noisy", "noisy"]
        # FIFO within a tenant.
        noisy = [t for t in r.upstream.arrivals if t.startswith("noisy")]
        assert noisy == [f"noisy{i}" for i in range(20)]


async def test_a_client_cannot_pick_an_unmapped_class(tmp_path: Path) -> None:
    async with rig(tmp_path, CONFIG, hold=True) as r, aiohttp.ClientSession() as s:
        await r.patch({"lanes": {"chat": {"max_inflight": 1}}})
        tasks = [asyncio.create_task(post(s, r, "first"))]
        await eventually(lambda: r.upstream.arrivals == ["first"])
        # "critical" is a class name, not an objective the operator mapped: the default class.
        tasks.append(asyncio.create_task(post(s, r, "self-promoted", "critical")))
        tasks.append(asyncio.create_task(post(s, r, "unknown", "x" * 5000)))
        await queued(r, 2)
        tasks.append(asyncio.create_task(post(s, r, "mapped", "interactive")))
        await queued(r, 3)
        classes = (await chat_status(r))["classes"]
        assert {k: (v["inflight"], v["queued"]) for k, v in classes.items()} == {
            "critical": (0, 1),
            "standard": (1, 2),
            "sheddable": (0, 0),
        }
        for _ in range(4):
            r.upstream.release.release()
        await asyncio.gather(*tasks)
        # The mapped objective came last and went first.
        assert r.upstream.arrivals == ["first", "mapped", "self-promoted", "unknown"]


async def test_api_keys_name_tenants_by_hash_and_map_classes(tmp_path: Path) -> None:
    secret = "sk-very-secret-key"
    fairness = Fairness(api_keys=True, keys={key_hash(secret): "critical"})
    config = GateConfig(DEFAULT_LANES, fairness=fairness)
    async with rig(tmp_path, config, hold=True) as r, aiohttp.ClientSession() as s:
        headers = {"Authorization": f"Bearer {secret}", FAIRNESS_HEADER: "someone-else"}
        task = asyncio.create_task(
            s.post(f"{r.url}/v1/completions", json={"prompt": "hi"}, headers=headers)
        )
        await eventually(lambda: r.upstream.active == 1)
        lane = await chat_status(r)
        assert lane["tenants"] == [
            {"tenant": key_hash(secret), "id": key_hash(secret), "inflight": 1, "queued": 0}
        ]
        assert lane["classes"]["critical"]["inflight"] == 1
        async with s.get(f"{r.url}/admin/status") as resp:
            assert secret not in await resp.text()
        r.upstream.release.release()
        (await task).release()


async def test_tenant_limits_pause_and_cap_live(tmp_path: Path) -> None:
    """A per-tenant cap holds the tenant's requests in the queue while others pass; a pause
    refuses its new ones; both are changes like any other (If-Match, audit)."""
    async with rig(tmp_path, CONFIG, hold=True) as r, aiohttp.ClientSession() as s:
        status, limits = await r.patch(
            {"tenants": {"noisy": {"max_inflight": 1}}}, **{"If-Match": '"1"'}
        )
        assert status == 200 and limits["tenants"] == {
            "noisy": {"paused": False, "max_inflight": 1}
        }
        tasks = [asyncio.create_task(post(s, r, f"n{i}", tenant="noisy")) for i in range(3)]
        await queued(r, 2)  # the lane has 16 slots, but noisy may hold only one
        other = asyncio.create_task(post(s, r, "a0", tenant="a"))
        await eventually(lambda: "a0" in r.upstream.arrivals)  # passes the waiting noisy ones
        assert (await chat_status(r))["queued"] == 2
        status, body = await r.patch({"tenants": {"noisy": {"paused": True}}})
        assert status == 200
        code, body = await post(s, r, "n-late", tenant="noisy")
        assert code == 503 and body["error"]["code"] == "tenant_paused"
        status, body = await r.patch({"tenants": {"noisy": None}}, **{"If-Match": '"2"'})
        assert status == 409  # the change was based on a version that moved
        status, body = await r.patch({"tenants": {"noisy": None}})
        assert status == 200 and body["tenants"] == {}
        for _ in range(4):
            r.upstream.release.release()
        assert [code for code, _ in await asyncio.gather(*tasks, other)] == [200] * 4
        async with s.get(f"{r.url}/admin/audit") as resp:
            changes = [e["change"] for e in (await resp.json())["entries"]]
        assert changes[:3] == [
            {"tenants": {"noisy": None}},
            {"tenants": {"noisy": {"paused": True, "max_inflight": 1}}},
            {"tenants": {"noisy": {"paused": False, "max_inflight": 1}}},
        ]
        status, body = await r.patch({"tenants": {"bad id\u202e": {"paused": True}}})
        assert status == 400 and body["error"]["code"].startswith("tenants.")


async def test_fairness_ids_leave_nothing_behind(tmp_path: Path) -> None:
    """The tenant tables hold live requests only: ids are gone with their requests."""
    async with rig(tmp_path, CONFIG) as r, aiohttp.ClientSession() as s:
        await r.patch({"lanes": {"chat": {"max_queue": 1000}}})
        answers = await asyncio.gather(
            *(post(s, r, str(i), tenant=f"t{i}-" + "z" * (i % 90)) for i in range(300))
        )
        assert {code for code, _ in answers} == {200}
        lane = await chat_status(r)
        assert lane["tenant_count"] == 0 and lane["tenants"] == []
        assert r.gate.lanes["chat"].tenants.inflight == {}
        assert len(r.gate.lanes["chat"].queue.by_tenant) == 0


async def test_evictions_racing_timeouts_and_disconnects_keep_slots_exact(tmp_path: Path) -> None:
    """Review 2: critical arrivals while sheddable waiters time out in the queue or hang up,
    and slots churn underneath. Whatever interleaving comes, a slot is a ticket released
    once: never more than max_inflight at the upstream, every admission reached it, and every
    table is empty at the end."""
    import random

    rng = random.Random(7)
    async with rig(tmp_path, CONFIG, hold=True) as r, aiohttp.ClientSession() as s:
        limits = {"max_inflight": 2, "max_queue": 4, "queue_timeout_s": 0.15}
        assert (await r.patch({"lanes": {"chat": limits}}))[0] == 200
        done = asyncio.Event()

        async def churn() -> None:  # the upstream answers one request now and then
            while not done.is_set():
                await asyncio.sleep(rng.uniform(0.0, 0.12))
                r.upstream.release.release()

        async def client(i: int) -> int:
            objective = "batch" if i % 3 else "interactive"
            hangs_up = objective == "batch" and i % 4 == 1
            try:
                return (await asyncio.wait_for(
                    post(s, r, f"r{i}", objective, tenant=f"t{i % 5}"),
                    rng.uniform(0.01, 0.2) if hangs_up else 10,
                ))[0]  # fmt: skip
            except TimeoutError:
                return 0  # this client went away

        releaser = asyncio.create_task(churn())
        statuses: list[int] = []
        for wave in range(8):
            statuses += await asyncio.gather(*(client(wave * 12 + i) for i in range(12)))
        done.set()
        await releaser
        lane = r.gate.lanes["chat"]
        await eventually(lambda: lane.inflight == 0 and not lane.queue, message="slots leaked")
        assert set(statuses) <= {0, 200, 429, 503}, statuses
        assert 200 in statuses and 429 in statuses
        assert r.upstream.max_active <= 2
        assert lane.admitted_total == len(r.upstream.arrivals)
        assert lane.inflight_tokens == 0 and not lane.tenants.inflight
        assert not lane.tenants.classes and not lane.queue.by_tenant and not lane.queue.by_class
        refused = lane.rejected_total
        # Here (2 cores): 16 evicted, 32 queue_full, 8 queue_timeout, 6 hung up, 34 served.
        assert refused["evicted"] > 0 and refused["queue_full"] > 0
        assert {k for k, _ in lane.tenants.refused if _ == "evicted"} <= {"sheddable"}


async def test_a_capped_tenant_cannot_hold_every_place_in_the_queue(tmp_path: Path) -> None:
    """Review 2: a tenant held at max_inflight 1 filled all 8 places of the queue, and every
    other tenant's arrival was a 429 queue_full: the cap bounded its slots, not its places.
    Now an arrival takes the newest place of the tenant holding the most at its priority,
    while that tenant holds at least two more than the arrival's own."""
    async with rig(tmp_path, CONFIG, hold=True) as r, aiohttp.ClientSession() as s:
        patch = {"lanes": {"chat": {"max_inflight": 2, "max_queue": 8}},
                 "tenants": {"noisy": {"max_inflight": 1}}}  # fmt: skip
        assert (await r.patch(patch))[0] == 200
        noisy = [asyncio.create_task(post(s, r, f"n{i}", tenant="noisy")) for i in range(9)]
        await queued(r, 8)
        quiet = asyncio.create_task(post(s, r, "q0", tenant="quiet"))  # takes the free slot
        await eventually(lambda: r.upstream.active == 2)
        others = [asyncio.create_task(post(s, r, f"o{i}", tenant=f"t{i}")) for i in range(3)]
        await eventually(lambda: sum(t.done() for t in noisy) == 3)
        refused = [t.result() for t in noisy if t.done()]
        assert [status for status, _ in refused] == [429] * 3
        assert {body["error"]["code"] for _, body in refused} == {"evicted"}
        messages = sorted(body["error"]["message"] for _, body in refused)
        assert [m.rsplit("held ", 1)[1] for m in messages] == [
            "6 of 8 places)", "7 of 8 places)", "8 of 8 places)"
        ]  # fmt: skip
        # The newest of its waiters went: n8, n7, n6.
        assert [t.done() for t in noisy] == [False] * 6 + [True] * 3
        status = await chat_status(r)
        assert status["queued"] == 8 and not any(t.done() for t in others)
        for _ in range(12):
            r.upstream.release.release()
        answers = await asyncio.gather(quiet, *others)
        assert [a for a, _ in answers] == [200] * 4
        await asyncio.gather(*noisy)


async def test_both_header_spellings_name_tenant_and_class_one_value_each(tmp_path: Path) -> None:
    """The llm-d router renamed the headers (x-llm-d-inference-*) and reads the old
    x-gateway-inference-* ones as deprecated aliases: the gate reads both, the new first."""
    new_t, old_t = "x-llm-d-inference-fairness-id", "X-Gateway-Inference-Fairness-Id"
    new_o, old_o = "x-llm-d-inference-objective", "x-gateway-inference-objective"
    async with rig(tmp_path, CONFIG) as r, aiohttp.ClientSession() as s:
        await r.patch({"tenants": {"acme": {"paused": True}}})
        url = f"{r.url}/v1/completions"

        async def status_of(headers: dict[str, str]) -> int:
            async with s.post(url, json={"prompt": "hi"}, headers=headers) as resp:
                return resp.status

        assert await status_of({new_t: "acme", new_o: "batch"}) == 503
        assert await status_of({old_t: "acme", old_o: "interactive"}) == 503
        # Both sent: one value each, the new name's (the tenant is not paused acme; the class
        # is the new name's sheddable, not the old name's critical).
        assert (
            await status_of({new_t: "acme", old_t: "bob", new_o: "batch", old_o: "interactive"})
            == 503
        )
        assert await status_of({new_t: "bob", old_t: "acme"}) == 200
        assert await status_of({new_t: " ", old_t: "acme"}) == 503  # a blank name is no name
        classes = (await chat_status(r))["classes"]
        assert classes["sheddable"]["rejected_total"] == {"tenant_paused": 2}
        assert classes["critical"]["rejected_total"] == {"tenant_paused": 1}
        assert classes["standard"]["rejected_total"] == {"tenant_paused": 1}
