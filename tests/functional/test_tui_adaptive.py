"""Adaptive admission from the dashboard (Pilot), against a real gate with the simulator
behind: ``A`` asks, then switches the lane; the panel shows the effective limit, its bounds,
the target and the controller's last decision with its reason; ``+`` moves the upper bound;
``u`` undoes; read-only refuses in the one guard and nothing is sent."""

from __future__ import annotations

import asyncio

from gpuwatch.adminapi import LimitsPatch
from gpuwatch.load import LoadRun, LoadSpec
from gpuwatch.load.spec import Dist
from gpuwatch.tui.screens.confirm import ConfirmationModal
from tests.functional import test_tui_control as tui_control
from tests.functional.test_tui import text
from tests.functional.test_tui_control import (
    confirm_shown,
    make_app,
    ready,
    settled,
    wait_version,
)
from tests.helpers import eventually

stack = tui_control.stack  # the fixture: simulator, gate and a client of the gate


async def test_a_switches_adaptive_on_asks_first_and_u_undoes(stack) -> None:  # type: ignore[no-untyped-def]
    node, sim, gate, served, client = stack
    app = make_app(sim.url, served.url)
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot, app)
        assert not app.screen.query_one("#adaptive").display  # no adaptive lane: hidden
        await pilot.press("A")
        modal = await confirm_shown(pilot, app)
        details = str(modal.query_one("#details").render())
        assert "chat.policy static -> adaptive" in details
        assert "chat.target_ttft_p99_s none -> 2" in details
        assert "between 1 and 16" in details
        await pilot.click("#apply")
        limits = await wait_version(pilot, client, 2)
        chat = limits.lanes["chat"]
        assert chat.policy == "adaptive" and chat.target_ttft_p99_s == 2.0
        await eventually(
            pause=pilot.pause, condition=lambda: "in [1..16]" in text(app, "#adaptive")
        )
        shown = text(app, "#adaptive")
        assert "target p99 TTFT 2.0s" in shown and "no change yet" in shown

        await pilot.press("plus")  # on an adaptive lane: the upper bound
        limits = await wait_version(pilot, client, 3)
        assert limits.lanes["chat"].max_inflight == 17
        await eventually(
            pause=pilot.pause, condition=lambda: "in [1..17]" in text(app, "#adaptive")
        )
        await pilot.press("u")
        await wait_version(pilot, client, 4)
        await settled(pilot, app)
        await pilot.press("u")  # undoing A puts the configured limits back, as any undo
        limits = await wait_version(pilot, client, 5)
        assert limits.lanes["chat"].policy == "static"
        assert limits.lanes["chat"].max_inflight == 16
        await eventually(
            pause=pilot.pause, condition=lambda: not app.screen.query_one("#adaptive").display
        )
    entries = await client.audit(10)
    assert len(entries) == 4 and all(e.actor != "adaptive" for e in entries)


async def test_the_panel_shows_the_controllers_cut_and_why(stack) -> None:  # type: ignore[no-untyped-def]
    node, sim, gate, served, client = stack
    spec = LoadSpec(url=served.url, rate=20.0, duration_s=30.0, prompt_tokens=Dist("fixed", 64),
                    output_tokens=Dist("fixed", 256), seed=2)  # fmt: skip
    load = LoadRun(spec)
    task = asyncio.create_task(load.run())
    app = make_app(sim.url, served.url)
    try:
        # Switched on with the lane full: the controller starts from the 16 in flight.
        await eventually(lambda: gate.lanes["chat"].inflight == 16, timeout=20)
        await client.patch(
            LimitsPatch(lanes={"chat": {"policy": "adaptive", "target_ttft_p99_s": 0.001,
                                        "min_inflight": 2}})
        )  # fmt: skip
        async with app.run_test(size=(160, 48)) as pilot:
            await ready(pilot, app)
            await eventually(
                pause=pilot.pause,
                timeout=20,
                condition=lambda: "-25%: p99 TTFT" in text(app, "#adaptive"),
            )
            shown = text(app, "#adaptive")
            assert "16->12" in shown and "in [2..16]" in shown
            # The controller's move is an event too (it is no new version of the limits).
            await eventually(
                pause=pilot.pause,
                condition=lambda: (
                    "gate chat: adaptive 16 -> 12 in flight: -25%: p99 TTFT" in text(app, "#events")
                ),
            )
    finally:
        load.stop()
        await task
    audit = await client.audit(20)
    assert any(e.actor == "adaptive" and (e.reason or "").startswith("-25%") for e in audit)


async def test_read_only_refuses_a_and_sends_nothing(stack) -> None:  # type: ignore[no-untyped-def]
    node, sim, gate, served, client = stack
    app = make_app(sim.url, served.url, read_only=True)
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        await ready(pilot, app)
        dash = app.dashboard()
        assert dash is not None and dash.check_action("adaptive", ()) is None  # greyed out
        dash.action_adaptive()  # straight through the action: the guard refuses
        await settled(pilot, app)
        assert not isinstance(app.screen, ConfirmationModal)
    assert (await client.limits()).version == 1
    assert await client.audit(10) == []
