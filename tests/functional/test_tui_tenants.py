"""Tenants on the dashboard (Pilot) against a real gate: the admission panel shows the busiest
tenants and the classes of a lane, and the keys pause a tenant and cap its in-flight through
the gate's admin API (If-Match, audit, undo)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
from textual.widgets import Select

from gpuwatch.adminapi import TenantLimits
from gpuwatch.control.gate import GateClient
from gpuwatch.control.guard import Guard
from gpuwatch.gate.classes import FAIRNESS_HEADER, OBJECTIVE_HEADER
from gpuwatch.session.node import DashboardOptions, live_session
from gpuwatch.tui.app import GpuwatchApp
from gpuwatch.tui.screens.edit import EditLimits
from tests.functional.gatekit import rig
from tests.functional.test_gate_fairness import CONFIG
from tests.functional.test_tui import text
from tests.functional.test_tui_control import wait_version
from tests.helpers import eventually


async def test_tenants_shown_and_steered_from_the_keyboard(tmp_path: Path) -> None:
    async with rig(tmp_path, CONFIG, hold=True) as r, aiohttp.ClientSession() as s:
        sends = [
            s.post(
                f"{r.url}/v1/completions",
                json={"prompt": "hi"},
                headers={FAIRNESS_HEADER: tenant, OBJECTIVE_HEADER: objective},
            )
            for tenant, objective in (("acme", "interactive"), ("acme", "batch"), ("bob", ""))
        ]
        tasks = [asyncio.create_task(send) for send in sends]  # type: ignore[arg-type]
        await eventually(lambda: r.upstream.active == 3)
        app = GpuwatchApp(
            live_session(
                DashboardOptions(urls=[f"{r.url}/metrics"], interval_s=0.25, admin_url=r.url)
            )
        )
        async with app.run_test(size=(160, 48)) as pilot:
            panel = await eventually(
                lambda: "tenants" in (t := text(app, "#admission")) and t,
                pause=pilot.pause,
                message=lambda: text(app, "#admission"),
            )
            assert "acme 2" in panel and "bob 1" in panel
            assert "critical 1" in panel and "sheddable 1" in panel and "standard 1" in panel
            await pilot.press("n")
            assert app.session.steering.selected_tenant == "acme"
            await pilot.press("x")
            client = GateClient(r.url, None, Guard())
            try:
                limits = await wait_version(pilot, client, 2)  # the pause
                assert limits.tenants == {"acme": TenantLimits(paused=True, max_inflight=None)}
                await pilot.press("c")
                limits = await wait_version(pilot, client, 3)
                assert limits.tenants["acme"] == TenantLimits(paused=True, max_inflight=32)
                await pilot.press("u")
                limits = await wait_version(pilot, client, 4)
                assert limits.tenants["acme"] == TenantLimits(paused=True, max_inflight=None)
                await eventually(
                    lambda: "paused" in text(app, "#admission").split("tenants")[1],
                    pause=pilot.pause,
                )
                audit = await client.audit(3)
                assert [e.version for e in audit] == [4, 3, 2]
            finally:
                await client.close()
        for _ in tasks:
            r.upstream.release.release()
        for task in tasks:
            (await task).release()


async def test_edit_form_sets_the_image_lanes_caps(tmp_path: Path) -> None:
    async with rig(tmp_path, CONFIG) as r:
        app = GpuwatchApp(
            live_session(
                DashboardOptions(urls=[f"{r.url}/metrics"], interval_s=0.25, admin_url=r.url)
            )
        )
        async with app.run_test(size=(80, 24)) as pilot:
            await eventually(
                lambda: (
                    app.session.monitor.gate
                    and app.session.monitor.gate.limits
                    and app.session.steering.client
                ),
                pause=pilot.pause,
            )
            await pilot.press("3")  # image
            await pilot.press("e")
            form = await eventually(
                lambda: (
                    isinstance(app.screen, EditLimits) and app.screen.query("#apply") and app.screen
                ),
                pause=pilot.pause,
            )
            assert not form.query("#max_inputs")  # the embedding caps are not the image lane's
            form.query_one("#max_steps").value = "30"
            form.query_one("#max_pixels").value = "0"
            await eventually(
                lambda: "a whole number >= 1" in str(form.query_one("#max_pixels-error").render()),
                pause=pilot.pause,
            )
            form.query_one("#max_pixels").value = "1048576"
            form.query_one("#media_policy", Select).value = "reject"
            await pilot.pause()
            form.query_one("#max_steps").focus()
            await pilot.press("enter")  # Enter in a field applies the form
            client = GateClient(r.url, None, Guard())
            try:
                limits = await wait_version(pilot, client, 2)
            finally:
                await client.close()
        image = limits.lanes["image"]
        assert (image.max_steps, image.max_pixels, image.media_policy) == (
            30,
            1048576,
            "reject",
        )
