"""The node dashboard built from each session factory alone, nothing rewired afterwards: live
(a simulator behind a real gate, steered through the session) and a replay (a recording,
read-only through its guard, moved by its cursor). The fleet's drill-down is the same
dashboard on a session from ``FleetSession.node_session``: tests/functional/test_fleet.py."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from gpuwatch.record.player import Player
from gpuwatch.record.recorder import Recorder
from gpuwatch.session.node import REPLAY_READ_ONLY, DashboardOptions, live_session, replay_session
from gpuwatch.tui.app import GpuwatchApp
from gpuwatch.tui.replay import ReplayApp, ReplayDashboard
from scripts import scenario
from tests.functional import test_tui_control as tui_control
from tests.functional.test_tui import text
from tests.functional.test_tui_control import TOKEN, ready, settled, wait_version
from tests.helpers import eventually

stack = tui_control.stack  # the fixture: simulator, gate and a client of the gate


async def test_live_dashboard_from_its_factory_steers_the_gate(stack) -> None:  # type: ignore[no-untyped-def]
    node, sim, gate, served, client = stack
    options = DashboardOptions(
        [f"{sim.url}/metrics"], interval_s=0.25, admin_url=served.url, admin_token=TOKEN
    )
    session = live_session(options)
    app = GpuwatchApp(session)
    async with app.run_test(size=(160, 48)) as pilot:
        dash = app.dashboard()
        assert dash is not None and dash.session is session
        await ready(pilot, app)
        await eventually(lambda: "UP" in text(app, "#engines"), 20, pause=pilot.pause)
        before = await client.limits()
        await pilot.press("plus")
        after = await wait_version(pilot, client, before.version + 1)
        chat = before.lanes["chat"].max_inflight
        assert after.lanes["chat"].max_inflight == chat + 1
        await settled(pilot, app)
        assert any("max_inflight" in e.text for e in session.monitor.events)
    # The screen went with the app: its pollers stopped, the session no longer shown.
    assert not [w for w in app.workers if w.group == "poll" and w.is_running]
    assert not session.steering.pending_lines()


@pytest.fixture
def recording(tmp_path: Path) -> Path:
    path = tmp_path / "node.db"
    recorder = Recorder(path)
    scenario.build(seconds=40, on_monitor=lambda m: recorder.attach(m, host="n1"))
    recorder.close()
    return path


async def test_replay_dashboard_from_its_factory_is_read_only_and_moves(recording: Path) -> None:
    player = Player(recording)
    player.seek(player.start + 20)
    options = DashboardOptions(
        list(player.meta["urls"]), admin_url=scenario.GATE_URL, hostname="n1"
    )
    session = replay_session(player, options)
    app = ReplayApp(session)
    try:
        async with app.run_test(size=(160, 48), notifications=True) as pilot:
            await pilot.pause()
            dash = app.screen
            assert isinstance(dash, ReplayDashboard) and dash.session is session
            header = text(app, "#header")
            assert "REPLAY" in header and "RO" in header
            await eventually(lambda: "chat" in text(app, "#admission"), 10, pause=pilot.pause)
            # A control key asks the session's guard, which refuses and says why.
            gate = session.monitor.gate
            assert gate is not None
            limits = copy.deepcopy(gate.limits)
            await pilot.press("plus")
            await pilot.pause()
            assert any(REPLAY_READ_ONLY in str(n.message) for n in app._notifications)
            assert gate.limits == limits
            # The cursor moves the player, and the header's clock with it.
            at = player.now
            await pilot.press("right")
            assert player.now == pytest.approx(at + options.interval_s)
            await pilot.press("left_square_bracket")  # a minute back: to the start
            assert player.now == pytest.approx(player.start)
            await eventually(lambda: text(app, "#header") != header, 10, pause=pilot.pause)
    finally:
        player.close()
