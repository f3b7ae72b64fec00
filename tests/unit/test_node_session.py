"""``NodeSession`` and its factories without a screen: what each factory builds, the one guard,
the replay as a field (the session reads the player's monitor, rebuilt on a step back), where
the steering's questions go, and the layer it sits in (no Textual, no Rich, no circle)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grimp
import pytest

from gpuwatch.adminapi import Limits
from gpuwatch.control.knobs.base import Knob, KnobValue
from gpuwatch.control.steering import Severity
from gpuwatch.monitor.state import Monitor
from gpuwatch.record.player import Player
from gpuwatch.record.recorder import Recorder
from gpuwatch.session.node import (
    REPLAY_READ_ONLY,
    DashboardOptions,
    NodeSession,
    live_session,
    replay_session,
)
from scripts import scenario


def test_live_polls_each_source_into_a_fresh_monitor() -> None:
    options = DashboardOptions(
        ["http://127.0.0.1:9/metrics", "http://127.0.0.1:10/metrics"], admin_url="http://g:1"
    )
    session = live_session(options)
    names = [p.name for p in session.pollers]
    assert names == [
        "engine http://127.0.0.1:9/metrics",
        "engine http://127.0.0.1:10/metrics",
        "host",
        "gate",
        "alerts",  # the SLO burn rates: their notifier's sending loop
        "knobs",  # the stacks' own knobs: configured, or found from an engine's dialect
    ]
    assert session.polls and not session.read_only and session.replay is None
    assert session.alerts is not None
    assert list(session.monitor.endpoints) == options.urls
    assert session.steering.guard is session.guard and session.steering.gate_url == "http://g:1"
    assert session.knobs.guard is session.guard  # one guard for the gate's keys and the knobs'


def test_live_on_a_prebuilt_monitor_polls_nothing_and_read_only_is_the_guards() -> None:
    monitor = Monitor([])
    session = live_session(DashboardOptions([], read_only=True), monitor)
    assert session.monitor is monitor and session.pollers == [] and not session.polls
    assert session.read_only and session.guard.read_only
    session.guard.read_only = False  # one guard: the session says what it says
    assert not session.read_only


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("rec") / "node.db"
    recorder = Recorder(path)
    scenario.build(seconds=40, on_monitor=lambda m: recorder.attach(m, host="n1"))
    recorder.close()
    return path


def test_replay_is_a_field_and_refuses_every_change(recording: Path) -> None:
    player = Player(recording)
    try:
        options = DashboardOptions(["http://127.0.0.1:8000/metrics"], admin_url=scenario.GATE_URL)
        session = replay_session(player, options)
        # The caller's options are not changed; the session's say REPLAY, read-only.
        assert not options.read_only and options.clock_label == ""
        assert session.options.read_only and session.options.clock_label == "REPLAY"
        assert session.read_only and session.guard.reason == REPLAY_READ_ONLY
        assert session.replay is player and session.pollers == [] and not session.polls
        # A step back rebuilds the player's monitor from a checkpoint: the session reads it.
        player.seek(player.end)
        later = session.monitor
        player.seek(player.start)
        assert session.monitor is player.monitor and session.monitor is not later
        # The screen's instant is the cursor, between ticks too.
        assert session.drawn_at() == (player.monitor.clock(), player.monitor.wall())
    finally:
        player.close()


class Asking:
    """A screen's half of the steering, as a test sees it."""

    def __init__(self) -> None:
        self.told: list[tuple[str, Severity]] = []
        self.repaints = 0

    def notify(self, text: str, severity: Severity = "information") -> None:
        self.told.append((text, severity))

    async def confirm(self, title: str, details: list[str]) -> bool:
        return True

    async def edit_form(self, gate: str, lane: str, limits: Limits) -> dict[str, Any] | None:
        return {"gate": gate}

    async def edit_knobs(self, title: str, knobs: list[Knob]) -> dict[str, KnobValue] | None:
        return {k.name: k.value for k in knobs}

    def changed(self) -> None:
        self.repaints += 1


async def test_the_steerings_questions_go_to_the_screen_showing_the_session() -> None:
    session: NodeSession = live_session(DashboardOptions([], read_only=True), Monitor([]))
    view = session.steering.view
    # Shown nowhere: what it says is an event, nothing is confirmed.
    view.notify("inflight refused", "warning")
    assert session.monitor.events[-1].text == "inflight refused"
    assert await view.confirm("Apply this change?", []) is False
    asking = Asking()
    session.show_on(asking)
    session.steering.inflight(1)  # read-only: the guard refuses, said on the screen
    assert asking.told and "refused" in asking.told[-1][0] and asking.told[-1][1] == "warning"
    assert await view.confirm("Apply this change?", []) is True
    assert await view.edit_form("chat", Limits(1, False)) == {"gate": "?"}  # no gate known yet
    session.show_on(None)
    assert await view.confirm("Apply this change?", []) is False


def test_the_session_layer_has_no_screen_and_no_circle() -> None:
    graph = grimp.build_graph("gpuwatch", include_external_packages=True)
    session = [m for m in graph.modules if m.startswith("gpuwatch.session")]
    assert "gpuwatch.session.node" in session and "gpuwatch.session.fleet" in session
    for module in session:
        imported = graph.find_modules_directly_imported_by(module)
        below = {m.split(".")[0] for m in imported} | {m for m in imported}
        assert not {"textual", "rich"} & below, module
        assert not [m for m in imported if m.startswith("gpuwatch.tui")], module
    # No module of the screen or the session reaches back to itself (TYPE_CHECKING imports
    # included: grimp reads them too), and no screen imports an app.
    ours = [m for m in graph.modules if m.startswith(("gpuwatch.tui", "gpuwatch.session"))]
    for module in ours:
        for other in graph.find_modules_that_directly_import(module):
            if other in ours:
                assert not graph.chain_exists(module, other), f"{other} <-> {module}"
    apps = {"gpuwatch.tui.app", "gpuwatch.tui.replay", "gpuwatch.tui.fleet_app"}
    for module in ours:
        if module.startswith("gpuwatch.tui.screens"):
            assert not apps & set(graph.find_modules_directly_imported_by(module)), module
