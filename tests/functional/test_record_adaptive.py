"""Recording the audit trail of a gate with an adaptive lane: the controller's lines carry the
version in force (they are no new version), so the recording must not let one of them stand in
for the person's change of that version."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from gpuwatch.adminapi import AuditEntry
from gpuwatch.control.gate import GateClient
from gpuwatch.control.guard import Guard
from gpuwatch.gate.server import start_gate
from gpuwatch.record import store
from gpuwatch.sim.server import start_sim
from tests.functional.test_gate_adaptive import PROFILE, adaptive_config
from tests.helpers import eventually


async def test_a_recorded_audit_keeps_the_person_s_change_beside_the_controller_s(
    tmp_path: Path,
) -> None:
    node, sim = await start_sim(PROFILE, time_scale=5.0, seed=4)
    # Static until alice switches it on under load (from what is in flight then); the queue
    # has time (max_queue_wait_s) so that nothing is refused for the impossible target.
    config = adaptive_config(max_inflight=24, max_queue=2000, queue_timeout_s=120.0,
                             max_queue_wait_s=120.0, target_ttft_p99_s=0.001,
                             min_inflight=2)  # fmt: skip
    gate_, served = await start_gate(sim.url, config, state_file=tmp_path / "s.json")
    body = {"model": node.model_name, "messages": [{"role": "user", "content": "x" * 1200}],
            "max_tokens": 32, "stream": True}  # fmt: skip
    stop = asyncio.Event()

    async def load(s: aiohttp.ClientSession) -> None:
        async def one() -> None:
            async with s.post(f"{served.url}/v1/chat/completions", json=body) as r:
                await r.read()

        tasks: set[asyncio.Task[None]] = set()
        while not stop.is_set():
            while len(tasks) < 40:  # more than the limit: a queue stays, the tail is over target
                task = asyncio.create_task(one())
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            await asyncio.sleep(0.01)
        await asyncio.gather(*tasks)

    db = store.create(tmp_path / "rec.db", {"urls": [], "interval_s": 1.0})
    try:
        async with (
            aiohttp.ClientSession() as s,
            GateClient(served.url, None, Guard(read_only=True)) as gate,
        ):
            loader = asyncio.create_task(load(s))
            await eventually(lambda: gate_.lanes["chat"].queue, timeout=30)
            change = {"lanes": {"chat": {"max_queue": 1000, "policy": "adaptive"}}}
            async with s.patch(f"{served.url}/admin/limits", json=change,
                               headers={"X-Gpuwatch-Actor": "alice"}) as r:  # fmt: skip
                assert r.status == 200, await r.text()

            async def controller_lines() -> list[AuditEntry]:
                entries = await gate.audit(50)
                mine = [e for e in entries if e.actor == "adaptive" and e.version == 2]
                return entries if len(mine) >= 2 else []

            entries = await eventually(controller_lines, timeout=30, message="no cut after v2")
            stop.set()
            await loader
        # What the recorder does every 5 s with the newest 50 entries (newest first).
        store.insert_audit(db, entries)
        recorded = store.audit_entries(db)
    finally:
        db.close()
        await served.close()
        await sim.close()
    alice = [e for e in recorded if e.actor == "alice"]
    assert len(alice) == 1 and alice[0].version == 2, recorded
    assert alice[0].change.lanes == {"chat": {"max_queue": 1000, "policy": "adaptive"}}
