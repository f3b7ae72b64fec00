"""The dashboard's users panel shows the SLO's error budget and burn rates, for the engine's
TTFT and for goodput at the gate, from what it polls (the real simulator and gate)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from gpuwatch.config import AlertSettings
from gpuwatch.gate.config import GateConfig
from gpuwatch.gate.limits import DEFAULT_LANES
from gpuwatch.gate.server import start_gate
from gpuwatch.session.node import DashboardOptions, live_session
from gpuwatch.sim.profiles import get_profile
from gpuwatch.sim.server import start_sim
from gpuwatch.tui.app import GpuwatchApp
from tests.functional.test_tui import text
from tests.helpers import eventually


async def test_the_users_panel_shows_the_error_budget_of_each_slo(tmp_path: Path) -> None:
    node, sim = await start_sim(get_profile("rtx4090-llama3-8b-awq"), time_scale=2.0, seed=9)
    gate, served = await start_gate(
        sim.url, GateConfig(DEFAULT_LANES), token="tok", state_file=tmp_path / "s.json"
    )
    options = DashboardOptions(
        urls=[f"{sim.url}/metrics", f"{served.url}/metrics"], interval_s=0.2,
        admin_url=served.url, admin_token="tok", alerts=AlertSettings(slo_period_days=0.5),
    )  # fmt: skip
    app = GpuwatchApp(live_session(options))
    try:
        async with aiohttp.ClientSession() as s, app.run_test(size=(160, 48)) as pilot:

            async def ask() -> None:
                body = {"prompt": "hi", "max_tokens": 4}
                async with s.post(f"{served.url}/v1/completions", json=body) as r:
                    await r.read()

            async def traffic() -> None:
                while True:
                    await ask()
                    await asyncio.sleep(0.05)  # a steady trickle, not a flood

            sender = asyncio.create_task(traffic())
            try:

                def shown() -> bool:
                    users = text(app, "#users")
                    return "TTFT under 2s (read at 1s):" in users and "goodput at the gate" in users

                await eventually(shown, 30, pause=pilot.pause, message=lambda: text(app, "#users"))
            finally:
                sender.cancel()
            users = text(app, "#users")
            assert "error budget TTFT under 2s (read at 1s): 100% left of 12h (seen" in users
            assert "goodput at the gate (read at 1.694s): 100% left of 12h" in users
            # Every window a tier reads, shortest first: a trickle served in time burns nothing.
            assert "burn 0.0x 5s, 0.0x 30s, 0.0x 1m, 0.0x 6m, 0.0x 72m" in users
    finally:
        await served.close()
        await sim.close()
