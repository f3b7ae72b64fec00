"""Steering the gate from the dashboard (Pilot) against a real gate with the simulator behind."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Button, DataTable

from gpuwatch.adminapi import Limits, LimitsPatch
from gpuwatch.aioserve import Served
from gpuwatch.control.gate import GateClient
from gpuwatch.control.guard import Guard, ReadOnlyError
from gpuwatch.gate.config import GateConfig
from gpuwatch.gate.limits import DEFAULT_LANES
from gpuwatch.gate.listener import Listening
from gpuwatch.gate.server import Gate, start_gate
from gpuwatch.load import LoadRun, LoadSpec
from gpuwatch.load.spec import Dist
from gpuwatch.session.node import DashboardOptions, live_session
from gpuwatch.sim.node import SimNode
from gpuwatch.sim.profiles import get_profile
from gpuwatch.sim.server import start_sim
from gpuwatch.tui.app import GpuwatchApp
from gpuwatch.tui.screens.audit import AuditScreen
from gpuwatch.tui.screens.confirm import ConfirmationModal
from gpuwatch.tui.screens.edit import EditLimits
from tests.functional.test_tui import text
from tests.helpers import eventually

PROFILE = get_profile("rtx4090-llama3-8b-awq")
TOKEN = "s3cret"
# (simulator, its server, gate, its listener, an admin client of the gate)
Stack = tuple[SimNode, Served, Gate, Listening, GateClient]


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    node, sim = await start_sim(PROFILE, time_scale=2.0, seed=11)
    gate, served = await start_gate(
        sim.url, GateConfig(DEFAULT_LANES), token=TOKEN, state_file=tmp_path / "s.json"
    )
    client = GateClient(served.url, TOKEN, Guard(), actor="tester@elsewhere")
    yield node, sim, gate, served, client
    await client.close()
    await served.close()
    await sim.close()


def make_app(sim_url: str, gate_url: str, token: str = TOKEN, **kw: Any) -> GpuwatchApp:
    return GpuwatchApp(
        live_session(
            DashboardOptions(
                urls=[f"{sim_url}/metrics"],
                interval_s=0.25,
                admin_url=gate_url,
                admin_token=token,
                **kw,
            )
        )
    )


def gate_version(app: GpuwatchApp) -> int | None:
    """The limits version the dashboard shows, None before the gate has been read."""
    view = app.session.monitor.gate
    return view.limits.version if view is not None and view.limits is not None else None


def pressed_together(app: GpuwatchApp) -> None:
    """Keys a test presses together must land in one window even on a loaded machine: the
    coalescing is what is tested, not how fast the machine delivers keys."""
    app.session.steering.coalesce_s = 2.0


async def ready(pilot: Pilot[None], app: GpuwatchApp) -> None:
    await eventually(
        pause=pilot.pause,
        condition=lambda: (
            app.session.monitor.gate
            and app.session.monitor.gate.limits
            and app.session.steering.client
        ),
    )


async def settled(pilot: Pilot[None], app: GpuwatchApp) -> None:
    """No key is waiting to be sent and no change is in flight: whatever was going to reach
    the gate has (a condition, not a sleep)."""
    await pilot.pause()
    await eventually(
        pause=pilot.pause,
        condition=lambda: (
            app.session.steering.idle
            and not any(w.group == "control" and not w.is_finished for w in app.workers)
        ),
    )


async def confirm_shown(pilot: Pilot[None], app: GpuwatchApp) -> ConfirmationModal:
    """The confirmation modal, mounted: its focus is on Cancel."""
    await eventually(
        pause=pilot.pause,
        condition=lambda: (
            isinstance(app.screen, ConfirmationModal)
            and app.focused is not None
            and app.focused.id == "cancel"
        ),
    )
    screen = app.screen
    assert isinstance(screen, ConfirmationModal)
    return screen


async def audit_shown(pilot: Pilot[None], app: GpuwatchApp) -> AuditScreen:
    """The audit screen (``a``), its table mounted."""
    screen: AuditScreen = await eventually(
        pause=pilot.pause,
        condition=lambda: (
            isinstance(app.screen, AuditScreen) and app.screen.query("DataTable") and app.screen
        ),
    )
    return screen


async def wait_version(pilot: Pilot[None], client: GateClient, version: int) -> Limits:
    async def reached() -> Limits | None:
        limits = await client.limits()
        return limits if limits.version >= version else None

    # A wide deadline: a condition, so it costs nothing when the change comes at once.
    limits: Limits = await eventually(
        reached, 30, pause=pilot.pause, message=f"version {version} never came"
    )
    return limits


async def test_each_key_changes_the_gates_limits(stack: Stack) -> None:
    node, sim, gate, served, client = stack
    app = make_app(sim.url, served.url)
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot, app)
        assert app.session.steering.selected_lane == "chat"
        steps: list[tuple[str, dict[str, int | None]]] = [  # key, expected chat limits after it
            ("plus", {"max_inflight": 17}),
            ("minus", {"max_inflight": 16}),
            ("asterisk", {"max_inflight": 32}),
            ("right_square_bracket", {"max_queue": 72}),
            ("left_square_bracket", {"max_queue": 64}),
            ("o", {"max_output_tokens": 4096}),
            ("o", {"max_output_tokens": 2048}),
            ("O", {"max_output_tokens": 4096}),
            ("O", {"max_output_tokens": None}),
            ("slash", {"max_inflight": 16}),
            ("b", {"max_inflight_tokens": 512_000}),
            ("b", {"max_inflight_tokens": 256_000}),
            ("B", {"max_inflight_tokens": 512_000}),
            ("b", {"max_inflight_tokens": 256_000}),
        ]
        version = 1
        for key, expected in steps:
            await pilot.press(key)
            version += 1
            limits = await wait_version(pilot, client, version)
            for k, v in expected.items():
                assert limits.lanes["chat"].value(k) == v, (key, k, limits.lanes["chat"].value(k))
        # Lane selection: 2 picks embed, tab goes on to image.
        await pilot.press("2", "plus")
        limits = await wait_version(pilot, client, version + 1)
        assert (
            limits.lanes["embed"].max_inflight == 33
            and app.session.steering.selected_lane == "embed"
        )
        await pilot.press("tab")
        assert app.session.steering.selected_lane == "image"
        # The panel shows what the server answered.
        await eventually(
            pause=pilot.pause,
            condition=lambda: gate_version(app) == version + 1,
        )
        assert "33/32" not in text(app, "#admission") and "0/33" in text(app, "#admission")
        assert "tokens 0/256k" in text(app, "#admission")  # chat's budget, as the gate has it
        entries = await client.audit(50)
        assert len(entries) == len(steps) + 1 and all("@" in e.actor for e in entries)


async def test_key_presses_in_quick_succession_are_one_patch(stack: Stack) -> None:
    node, sim, gate, served, client = stack
    app = make_app(sim.url, served.url)
    pressed_together(app)
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot, app)
        await pilot.press("plus", "plus", "plus", "plus", "plus", "right_square_bracket")
        limits = await wait_version(pilot, client, 2)
        await settled(pilot, app)
        assert (await client.limits()).version == 2  # one PATCH, not six
        assert limits.lanes["chat"].max_inflight == 21 and limits.lanes["chat"].max_queue == 72
        [entry] = await client.audit(10)
        assert entry.change.to_json() == {"lanes": {"chat": {"max_inflight": 21, "max_queue": 72}}}


async def test_pause_asks_first_and_cancel_changes_nothing(stack: Stack) -> None:
    node, sim, gate, served, client = stack
    app = make_app(sim.url, served.url)
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot, app)
        await pilot.press("p")
        # Focus starts on Cancel: an Enter pressed by habit changes nothing.
        modal = await confirm_shown(pilot, app)
        assert "paused false -> true" in str(modal.query_one("#details").render())
        await pilot.press("enter")
        await eventually(
            pause=pilot.pause, condition=lambda: not isinstance(app.screen, ConfirmationModal)
        )
        await settled(pilot, app)
        limits = await client.limits()
        assert limits.version == 1 and limits.paused is False
        assert any("change cancelled" in e.text for e in app.session.monitor.events)
        # Now apply it.
        await pilot.press("p")
        await confirm_shown(pilot, app)
        await pilot.click("#apply")
        limits = await wait_version(pilot, client, 2)
        assert limits.paused is True
        await eventually(pause=pilot.pause, condition=lambda: "PAUSED" in text(app, "#admission"))
        await pilot.press("p")  # resuming does not ask
        limits = await wait_version(pilot, client, 3)
        assert limits.paused is False


async def test_cutting_a_lane_by_more_than_half_asks_first(stack: Stack) -> None:
    node, sim, gate, served, client = stack
    app = make_app(sim.url, served.url)
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot, app)
        await pilot.press("slash")  # 16 -> 8: exactly half, no question
        await wait_version(pilot, client, 2)
        pressed_together(app)
        await pilot.press("slash", "slash")  # 8 -> 2 in one change: asks
        modal = await confirm_shown(pilot, app)
        details = str(modal.query_one("#details").render())
        assert "chat.max_inflight 8 -> 2" in details and served.url in details
        await pilot.press("escape")
        await settled(pilot, app)
        assert (await client.limits()).lanes["chat"].max_inflight == 8


async def test_read_only_refuses_and_sends_nothing(stack: Stack) -> None:
    node, sim, gate, served, client = stack
    app = make_app(sim.url, served.url, read_only=True)
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot, app)
        dash = app.dashboard()
        assert dash is not None
        for action in ("inflight", "queue", "output", "pause", "edit", "undo"):
            assert dash.check_action(action, ()) is None  # greyed out in the footer
        await pilot.press("plus", "p", "e", "u", "o")
        await settled(pilot, app)
        assert "RO" in text(app, "#header")
        # Even straight through the action, the guard refuses in its one place.
        dash.action_inflight(1)
        await settled(pilot, app)
        # And the path behind the keys holds the app's one guard: the gate client refuses
        # too (it once built a permissive guard of its own and changed the gate).
        assert (
            app.session.steering.client is not None
            and app.session.steering.client.guard is app.session.guard
        )
        with pytest.raises(ReadOnlyError):
            await app.session.steering.client.patch(
                LimitsPatch.from_json({"paused": True}), if_match=1
            )
    assert (await client.limits()).version == 1
    assert await client.audit(10) == []


async def test_concurrent_change_gives_409_and_refreshes(stack: Stack) -> None:
    node, sim, gate, served, client = stack
    app = make_app(sim.url, served.url)
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        await ready(pilot, app)
        # The key's change is made on version 1 and held until someone else's change is in:
        # the 409 is what is tested, not which of two clients a loaded machine runs first.
        app.session.steering.coalesce_s = 60.0
        await pilot.press("plus")
        assert app.session.steering.pending_lines()  # made, not sent
        await client.patch(
            LimitsPatch.from_json({"lanes": {"chat": {"max_inflight": 40}}})
        )  # someone else, first
        app.session.steering.flush()  # what the coalescing timer does when it fires
        await eventually(
            pause=pilot.pause,
            condition=lambda: any(
                "limits changed by tester@elsewhere" in e.text for e in app.session.monitor.events
            ),
        )
        limits = await client.limits()
        assert limits.version == 2 and limits.lanes["chat"].max_inflight == 40  # not overwritten
        await eventually(pause=pilot.pause, condition=lambda: gate_version(app) == 2)
        await eventually(pause=pilot.pause, condition=lambda: "40" in text(app, "#admission"))


async def test_undo_restores(stack: Stack) -> None:
    node, sim, gate, served, client = stack
    app = make_app(sim.url, served.url)
    pressed_together(app)
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot, app)
        await pilot.press("plus", "plus", "o")
        limits = await wait_version(pilot, client, 2)
        assert (
            limits.lanes["chat"].max_inflight,
            limits.lanes["chat"].max_output_tokens,
        ) == (18, 4096)
        await pilot.press("u")
        limits = await wait_version(pilot, client, 3)
        assert (
            limits.lanes["chat"].max_inflight,
            limits.lanes["chat"].max_output_tokens,
        ) == (16, None)
        entries = await client.audit(10)
        assert len(entries) == 2  # the undo is a change of its own, audited
        await pilot.press("a")
        screen = await audit_shown(pilot, app)
        assert screen.query_one(DataTable).row_count == 2


async def test_edit_form_validates_and_applies_one_patch(stack: Stack) -> None:
    node, sim, gate, served, client = stack
    app = make_app(sim.url, served.url)
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot, app)
        await pilot.press("e")
        form = await eventually(
            pause=pilot.pause,
            condition=lambda: (
                isinstance(app.screen, EditLimits) and app.screen.query("#apply") and app.screen
            ),
        )
        # Textual ignores a click while the button still shows the last one (0.2 s): on a
        # loaded machine the second click below could land in that window and be dropped.
        form.query_one("#apply", Button).active_effect_duration = 0
        form.query_one("#max_inflight").value = "-3"
        await eventually(
            pause=pilot.pause,
            condition=lambda: (
                "a whole number >= 0" in str(form.query_one("#max_inflight-error").render())
            ),
        )
        # The form is taller than the screen: the button is brought into view, as a user
        # scrolls to it (Enter in any field applies too).
        form.query_one("#apply", Button).scroll_visible(animate=False)
        await pilot.pause()
        await pilot.click("#apply")
        await pilot.pause()  # the click is handled: an invalid form does not dismiss
        assert isinstance(app.screen, EditLimits)  # invalid: nothing sent
        form.query_one("#max_inflight").value = "12"
        form.query_one("#max_output_tokens").value = "700"
        form.query_one("#max_queue_wait_s").value = "-1"
        await eventually(
            pause=pilot.pause,
            condition=lambda: (
                "a number of seconds >= 0"
                in str(form.query_one("#max_queue_wait_s-error").render())
            ),
        )
        form.query_one("#max_queue_wait_s").value = "1.5"
        # The upstream timeouts: empty is no limit.
        form.query_one("#upstream_first_byte_timeout_s").value = "120"
        form.query_one("#upstream_idle_timeout_s").value = ""
        form.query_one("#apply", Button).scroll_visible(animate=False)
        await pilot.pause()
        await pilot.click("#apply")
        limits = await wait_version(pilot, client, 2)
        chat = limits.lanes["chat"]
        assert chat.max_inflight == 12 and chat.max_output_tokens == 700
        assert chat.max_queue_wait_s == 1.5
        assert chat.upstream_first_byte_timeout_s == 120.0
        assert chat.upstream_idle_timeout_s is None
        [entry] = await client.audit(10)
        assert entry.change.to_json() == {
            "lanes": {
                "chat": {
                    "max_inflight": 12,
                    "max_output_tokens": 700,
                    "max_queue_wait_s": 1.5,
                    "upstream_first_byte_timeout_s": 120.0,
                    "upstream_idle_timeout_s": None,
                }
            }
        }
        # The panel shows the budget in force: the one just set.
        await eventually(pause=pilot.pause, condition=lambda: "/1.5s" in text(app, "#admission"))


async def test_wrong_token_shows_the_401_reason(stack: Stack) -> None:
    node, sim, gate, served, client = stack
    app = make_app(sim.url, served.url, token="wrong")
    async with app.run_test(size=(160, 48)) as pilot:
        await eventually(pause=pilot.pause, condition=lambda: "401" in text(app, "#admission"))
        assert any("HTTP 401" in e.text for e in app.session.monitor.events)
        await pilot.press("plus")
        await settled(pilot, app)
    assert (await client.limits()).version == 1


async def test_lowering_max_inflight_under_load_lowers_running_within_two_polls(
    stack: Stack,
) -> None:
    node, sim, gate, served, client = stack
    await client.patch(LimitsPatch.from_json({"lanes": {"chat": {"max_inflight": 8}}}))
    app = GpuwatchApp(
        live_session(
            DashboardOptions(
                urls=[f"{sim.url}/metrics"], interval_s=0.5, admin_url=served.url, admin_token=TOKEN
            )
        )
    )
    # Requests of ~0.4 s wall at 30/s: the gate's limit, not the load, decides what runs.
    spec = LoadSpec(url=served.url, rate=30.0, duration_s=30.0, prompt_tokens=Dist("fixed", 64),
                    output_tokens=Dist("fixed", 100), seed=1)  # fmt: skip
    load = LoadRun(spec)
    task = asyncio.create_task(load.run())
    engine = node.engines[0]
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot, app)
        await eventually(
            pause=pilot.pause, condition=lambda: "run 8" in text(app, "#engines"), timeout=30
        )
        await pilot.press("slash")  # 8 -> 4
        await wait_version(pilot, client, 3)
        # The engine drains as its running requests end (~0.4 s each, longer on a loaded
        # machine); the gate admitting no more than 4 meanwhile is what lowers it.
        await eventually(lambda: len(engine.running) <= 4, 30, pause=pilot.pause)
        applied = app.session.monitor.clock()
        # Seen on the dashboard's own engine panel within two polls of the engine: counted
        # in polls, so a slow machine's late polls do not count against it.
        await eventually(
            pause=pilot.pause,
            condition=lambda: re.search(r"run [0-4]\b", text(app, "#engines")),
            timeout=30,
        )
        # The engine's view whatever its source's state this instant (serving_engines() leaves
        # out a source gone STALE for a late poll on a loaded machine).
        (view,) = [
            v
            for ep in app.session.monitor.endpoints.values()
            for v in ep.engines.values()
            if v.snap.dialect != "gate"
        ]
        running = view.history.series["running"]
        polls = [p for p in running.points() if p.t > applied]
        assert len(polls) <= 2, f"it took {len(polls)} polls"
        # And it stays there, not a lull between requests at 8: the next polls all see at
        # most 4 while the load goes on.
        await eventually(
            lambda: len([p for p in running.points() if p.t > applied]) >= len(polls) + 4,
            30,
            pause=pilot.pause,
        )
        later = [p.v for p in running.points() if p.t > applied][len(polls) :]
        assert max(later) <= 4, later
        assert len(engine.running) <= 4
    load.stop()
    await task
