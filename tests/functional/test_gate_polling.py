"""Polling a gate: its status every interval, its limits only when the status says they moved,
and an answer the same to the byte not parsed again."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from gpuwatch.adminapi import GateStatus, Limits, LimitsPatch
from gpuwatch.control.gate import GateClient
from gpuwatch.control.guard import Guard
from gpuwatch.monitor.state import Monitor
from gpuwatch.polling import poll_gate
from tests.functional.gatekit import rig
from tests.helpers import eventually


class CountingClient(GateClient):
    """A real client that counts its reads."""

    reads: dict[str, int]

    async def limits(self) -> Limits:
        self.reads["limits"] = self.reads.get("limits", 0) + 1
        return await super().limits()

    async def status(self, ttft_s: float | None = None, itl_s: float | None = None) -> GateStatus:
        self.reads["status"] = self.reads.get("status", 0) + 1
        return await super().status(ttft_s, itl_s)


async def test_limits_are_read_when_the_status_says_they_moved(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        monitor = Monitor([], 0.05, {}, r.url)
        client = CountingClient(r.url, None, Guard())
        client.reads = {}
        poller = asyncio.create_task(poll_gate(monitor, client, 0.05))
        try:
            await eventually(lambda: client.reads.get("status", 0) >= 8, timeout=20)
            # Read once at the start; an unchanged version keeps the first reading.
            assert client.reads["limits"] == 1
            assert monitor.gate is not None and monitor.gate.limits is not None
            assert monitor.gate.limits.version == 1
            # Another operator's change: the next status has the new version, so the new
            # limits are read at once, not after the safety net's 10 s.
            async with GateClient(r.url, None, Guard(), actor="bob@box") as bob:
                await bob.patch(LimitsPatch(lanes={"chat": {"max_inflight": 5}}))

            def shown() -> bool:
                limits = monitor.gate.limits if monitor.gate else None
                return limits is not None and limits.lanes["chat"].max_inflight == 5

            await eventually(shown, timeout=20)
            assert monitor.gate.limits.version == 2
            assert client.reads["limits"] == 2
        finally:
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller
            await client.close()


async def test_an_answer_the_same_to_the_byte_is_not_parsed_again(tmp_path: Path) -> None:
    async with rig(tmp_path) as r, GateClient(r.url, None, Guard()) as client:
        first, again = await client.limits(), await client.limits()
        assert again is first  # the same body: what it was read as, not a new parse
        async with GateClient(r.url, None, Guard(), actor="bob@box") as bob:
            await bob.patch(LimitsPatch(lanes={"chat": {"max_inflight": 3}}))
        changed = await client.limits()
        assert changed is not first and changed.lanes["chat"].max_inflight == 3
