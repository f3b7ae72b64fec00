"""Record the dashboard's inputs from a real simulator and gate under load, replay the file in
the same dashboard, and compare: every panel, the charts' points and the badge at three
instants must equal what the live screen showed then."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from gpuwatch.gate.config import GateConfig
from gpuwatch.gate.limits import DEFAULT_LANES
from gpuwatch.gate.server import start_gate
from gpuwatch.load import LoadRun
from gpuwatch.load.spec import Dist, LoadSpec
from gpuwatch.record.player import Player
from gpuwatch.record.recorder import Recorder
from gpuwatch.session.node import REPLAY_READ_ONLY, DashboardOptions, live_session, replay_session
from gpuwatch.sim.profiles import get_profile
from gpuwatch.sim.server import start_sim
from gpuwatch.sources.nvml import FakeNvml, NvmlReader, SimGpuSource
from gpuwatch.tui.app import GpuwatchApp, Shell
from gpuwatch.tui.replay import ReplayApp, ReplayDashboard
from gpuwatch.tui.widgets.chart import Chart
from gpuwatch.tui.widgets.header import HeaderBar
from gpuwatch.tui.widgets.panel import Panel
from tests.helpers import eventually

PROFILE = get_profile("rtx4090-llama3-8b-awq")
PANELS = ("#gpus", "#engines", "#admission", "#users", "#events")
CHARTS = ("#chart-requests", "#chart-ttft", "#chart-kv", "#chart-tokens")


@pytest.fixture
async def stack(tmp_path: Path):  # type: ignore[no-untyped-def]
    node, sim = await start_sim(PROFILE, time_scale=4.0, seed=9)
    gate, served = await start_gate(
        sim.url, GateConfig(DEFAULT_LANES), token="tok", state_file=tmp_path / "s.json"
    )
    yield sim.url, served.url
    await served.close()
    await sim.close()


def options(sim_url: str, gate_url: str) -> DashboardOptions:
    return DashboardOptions(
        urls=[f"{sim_url}/metrics", f"{gate_url}/metrics"], interval_s=0.25, admin_url=gate_url,
        admin_token="tok", nvml=NvmlReader(FakeNvml(SimGpuSource(f"{sim_url}/sim/gpu"))),
        hostname="node1",
    )  # fmt: skip


def screen(app: Shell) -> dict[str, Any]:
    """The panels' markup, the charts' points and the header's badge, painted at the monitor's
    present clock (held still while painting, so every part reads the same instant)."""
    dash = app.dashboard()
    assert dash is not None
    m = dash.session.monitor
    mono, wall = m.clock(), m.wall()
    clocks = m.clock, m.wall
    m.clock, m.wall = (lambda: mono), (lambda: wall)
    try:
        dash.repaint(force_charts=True)  # everything, the charts too, drawn now
        out: dict[str, Any] = {sel: dash.query_one(sel, Panel).markup for sel in PANELS}
        for sel in CHARTS:
            out[sel] = [
                (line.label, list(line.points)) for line in dash.query_one(sel, Chart).lines
            ]
        header = dash.query_one(HeaderBar).markup
        # The badge and its reason, up to the RO / RW badge (live is RW, a replay RO).
        out["badge"] = header.split("  [b reverse $")[0]
        out["header"] = header
        out["at"] = (mono, wall)
    finally:
        m.clock, m.wall = clocks
    return out


async def test_replayed_screens_equal_the_live_ones(stack, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    sim_url, gate_url = stack
    path = tmp_path / "incident.db"
    load = LoadRun(
        LoadSpec(url=gate_url, rate=6.0, duration_s=120.0, burstiness=0.5, seed=4,
                 prompt_tokens=Dist("uniform", 256, 1024), output_tokens=Dist("fixed", 48))
    )  # fmt: skip
    recorder = Recorder(path)
    session = live_session(options(sim_url, gate_url))
    app = GpuwatchApp(
        session,
        background=[load.run, lambda: recorder.run(gate_url, "tok")],
    )
    recorder.attach(session.monitor, host="node1")
    live: list[dict[str, Any]] = []
    async with app.run_test(size=(160, 48)) as pilot:
        m = session.monitor

        def engine_busy() -> bool:
            views = m.serving_engines()
            return bool(views) and bool(views[0].snap.running) and m.gate is not None

        # 1: traffic flowing through the gate to the engine.
        await eventually(engine_busy, 30, pause=pilot.pause)
        live.append(screen(app))

        # 2: the gate has judged requests (users' tails and goodput on screen).
        def judged() -> bool:
            users = m.gate.users("1m") if m.gate else None
            return users is not None and users.totals["ended"] >= 5

        await eventually(judged, 60, pause=pilot.pause)
        live.append(screen(app))

        # 3: after a limit change from the keys: the gate's answer, its event, the new limits.
        before = m.gate.limits.lanes["chat"].max_inflight if m.gate and m.gate.limits else 0
        await pilot.press("plus")

        def changed() -> bool:
            limits = m.gate.limits if m.gate else None
            return bool(
                limits
                and limits.lanes["chat"].max_inflight == before + 1
                and not session.steering.pending_lines()
                and any("max_inflight" in e.text for e in m.events)
            )

        await eventually(changed, 20, pause=pilot.pause)
        await eventually(lambda: m.version > 0 and m.gate.queued.points(), 30, pause=pilot.pause)  # type: ignore[union-attr]
        live.append(screen(app))
        load.stop()
    recorder.close()
    # How many rows depends on how fast this machine got through the three instants (45 on a
    # quick run); what they hold is checked below, screen by screen.
    assert recorder.rows_written > 0 and recorder.stopped is None

    player = Player(path)
    replay = ReplayApp(replay_session(player, options(sim_url, gate_url)))
    async with replay.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        cursor = replay.screen
        assert isinstance(cursor, ReplayDashboard) and cursor.session.replay is player
        for shown in live:
            mono, wall = shown["at"]
            player.seek_mono(mono)  # the session reads the player's monitor, rebuilt or not
            again = screen(replay)
            # The monitor's clock exactly; the wall clock is the recorded offset from it.
            assert again["at"][0] == mono and again["at"][1] == pytest.approx(wall, abs=1e-3)
            for key in (*PANELS, *CHARTS, "badge"):
                assert again[key] == shown[key], key
            assert "REPLAY" in again["header"] and "RO" in again["header"]
        # The three instants are different screens, not one screen three times.
        assert len({s["#events"] + s["#admission"] for s in live}) == 3

        # Control keys ask the one guard, which refuses; nothing is sent.
        limits = copy.deepcopy(player.monitor.gate.limits)  # type: ignore[union-attr]
        await pilot.press("plus")
        await pilot.pause()
        assert any(REPLAY_READ_ONLY in str(n.message) for n in replay._notifications)
        assert player.monitor.gate.limits == limits  # type: ignore[union-attr]

        # The cursor keys move through time, and the screen with them.
        player.seek(player.start)
        cursor.go(player.start)
        await pilot.press("right")
        assert player.now == pytest.approx(player.start + 0.25, abs=1e-6)
        await pilot.press("right_curly_bracket")  # the next event
        mark = player.next_mark(player.start + 0.25)
        assert mark is not None and player.now == pytest.approx(mark.wall, abs=1e-6)
        await pilot.press("right_square_bracket")  # a minute on: past the end, so the end
        assert player.now == pytest.approx(player.end)
        assert "max_inflight" in replay.screen.query_one("#events", Panel).markup
        await pilot.press("left_curly_bracket")  # back to the previous event
        assert player.now < player.end
        at = player.now
        await pilot.press("greater_than_sign")
        assert cursor.speed == 30
        await pilot.press(*["less_than_sign"] * 5)
        assert cursor.speed == 1  # 1x at the slowest: the short recording does not end at once
        # Play from the start, so that a slow machine cannot reach the end (which stops play
        # by itself) before the second space.
        await pilot.press("left_square_bracket")
        assert player.now == pytest.approx(player.start)
        at = player.now
        await pilot.press("space")
        await eventually(lambda: player.now > at, 30, pause=pilot.pause)
        await pilot.press("space")
        assert not cursor.playing
        await pilot.press("colon")
        await pilot.press(*"+1s", "enter")
        await eventually(
            lambda: player.now == pytest.approx(player.start + 1), 30, pause=pilot.pause
        )
    player.close()
