"""A percentile on screen says what it is: where the gate answers a lane's tails from its log
buckets (a second of more than RAW_MAX requests), the dashboard says ``±0.5%``, not ``exact``,
and a lane still counted one by one beside it stays ``exact``. A real gate, polled by the
dashboard with --admin."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from gpuwatch.gate.requestblocks import RAW_MAX
from gpuwatch.session.node import DashboardOptions, live_session
from gpuwatch.tui.app import GpuwatchApp
from tests.functional.gatekit import rig
from tests.functional.test_tui import text
from tests.helpers import eventually


async def test_the_dashboard_says_when_the_gates_tails_are_sketched(tmp_path: Path) -> None:
    async with rig(tmp_path) as r, httpx.AsyncClient() as client:
        reply = await client.post(f"{r.url}/v1/embeddings", json={"input": "hi", "model": "m"})
        assert reply.status_code == 200  # one request in the embed lane: exact
        # One second of the chat lane past RAW_MAX (as a burst leaves it): from log buckets.
        chat = r.gate.latency["chat"]
        now = time.monotonic()
        for i in range(RAW_MAX + 1):
            record = chat.start(now)
            record.queue_wait_s, record.ttft_s, record.e2e_s = 0.01, 0.5 + i / 1e4, 1.0
            chat.end(record)
        options = DashboardOptions(urls=[f"{r.url}/metrics"], interval_s=0.2, admin_url=r.url)
        app = GpuwatchApp(live_session(options))
        async with app.run_test(size=(160, 48)) as pilot:

            def both() -> bool:
                users = text(app, "#users")
                return " chat " in users and " embed " in users and "(chat," in users

            await eventually(both, 30, pause=pilot.pause, message=lambda: text(app, "#users"))
            users = text(app, "#users").splitlines()
            engines = text(app, "#engines")
    said = next(line for line in users if line.startswith("tails "))  # above the columns
    assert said.endswith("exact, ~ ±0.5%, 1m"), said  # which rows: those marked ~
    chat_row = next(line for line in users if line.startswith(" chat "))
    embed_row = next(line for line in users if line.startswith(" embed "))
    assert chat_row.endswith(" ~") and not embed_row.endswith("~"), (chat_row, embed_row)
    # The worst lane is the flooded one: its TTFT line says the sketch's error, never exact.
    head = next(line for line in users if "TTFT p99" in line and "at the gate" in line)
    assert "(chat, ±0.5%)" in head and "exact" not in head, head
    assert "(chat, ±0.5%)" in engines and "(chat, exact)" not in engines, engines
