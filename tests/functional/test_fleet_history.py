"""The fleet in the past (``gpuwatch --prometheus URL --at TIME``) with the replay's cursor
keys, against a real Prometheus: after every move the table is Prometheus' own answer at the
cursor (hand-written PromQL at the same ``time``), RO and the REPLAY clock are shown, and a
fleet change is refused by the one guard."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import httpx
import pytest
from textual.pilot import Pilot
from textual.widgets import Static

from gpuwatch import config
from gpuwatch.session.fleet import FleetOptions
from gpuwatch.sources.prometheus import PrometheusSource
from gpuwatch.tui.fleet_app import FleetApp
from gpuwatch.tui.screens.fleet_history import FleetHistoryScreen
from gpuwatch.tui.screens.goto import GoToTime
from gpuwatch.tui.screens.help import HelpScreen
from gpuwatch.tui.timecursor import TimeCursor
from gpuwatch.tui.widgets.replaybar import ReplayBar
from tests.functional.fleetkit import Fleet, fleet
from tests.functional.test_fleet import HAND_WRITTEN
from tests.helpers import eventually


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    with fleet(tmp_path_factory.mktemp("fleet-history")) as f:
        yield f


def history_app(rig: Fleet, at: float) -> FleetApp:
    settings = config.load(rig.config)
    options = FleetOptions(
        rig.prometheus, PrometheusSource(rig.prometheus), gates=settings.gates, at=at
    )
    return FleetApp(options)


def assert_table_is_prometheus_answer(rig: Fleet, app: FleetApp, at: float) -> int:
    """Every row's every column equals the hand-written query at ``at``; the rows are the
    engines Prometheus knew then. Returns how many values were compared."""
    reading = app.fleet.state.reading
    assert reading is not None and reading.error is None and reading.at == at
    engines = {labels["instance"] for labels, _ in rig.query(HAND_WRITTEN["running"], at)}
    rows = {r.instance: r for r in app.fleet.state.rows}
    # (A gate whose node shows no engine at that instant is a row of its own: compared below.)
    assert {i for i, r in rows.items() if r.dialect != "gate"} == engines, (at, rows)
    compared = 0
    for key, expr in HAND_WRITTEN.items():
        answer = {labels["instance"]: value for labels, value in rig.query(expr, at)}
        for row in rows.values():
            target = row.gate if key.startswith("gate_") else row.instance
            if target is None or target not in answer or math.isnan(answer[target]):
                assert row.values.get(key) is None, (key, row, answer)
                continue
            assert row.values[key] == pytest.approx(answer[target], rel=1e-12), (key, row)
            compared += 1
    return compared


async def moved_to(rig: Fleet, app: FleetApp, pilot: Pilot[None], at: float) -> int:
    """Wait for the reading at ``at`` (the cursor), then compare it with Prometheus."""
    assert app.time_cursor is not None and app.time_cursor.at == pytest.approx(at, abs=1e-6)
    await eventually(
        lambda: (
            app.fleet.state.reading is not None and app.fleet.state.reading.at == app.time_cursor.at
        ),  # type: ignore[union-attr]
        20,
        pause=pilot.pause,
    )
    return assert_table_is_prometheus_answer(rig, app, app.time_cursor.at)


def title(app: FleetApp) -> str:
    return str(app.screen.query_one("#fleet-title", Static).render())


async def test_the_cursor_keys_move_the_fleet_through_prometheus_history(rig: Fleet) -> None:
    # Prometheus has scraped the fleet for a while: the rows exist a few seconds back.
    await eventually(lambda: len(rig.query(HAND_WRITTEN["gen_tps"], time.time() - 2)) == 3, 30)
    start = time.time() - 3.0
    app = history_app(rig, start)
    versions = [httpx.get(f"{u}/admin/limits").json()["version"] for u in rig.gates.values()]
    async with app.run_test(size=(160, 48)) as pilot:
        assert isinstance(app.screen, FleetHistoryScreen)
        assert app.time_cursor is not None
        compared = await moved_to(rig, app, pilot, start)
        assert compared >= 3 * 7, "every engine column of three rows"
        clock = time.strftime("%H:%M:%S", time.localtime(start))
        assert " RO " in title(app) and f"REPLAY {clock}" in title(app)
        assert "REPLAY" in str(app.screen.query_one(ReplayBar).render())

        await pilot.press("left")  # one interval back
        await moved_to(rig, app, pilot, start - 1.0)
        await pilot.press("right", "right")
        await moved_to(rig, app, pilot, start + 1.0)
        await pilot.press("left_square_bracket")  # a minute back: before the fleet, maybe
        await moved_to(rig, app, pilot, start - 59.0)
        await pilot.press("right_square_bracket")
        await moved_to(rig, app, pilot, start + 1.0)

        # ':' with a time of day (to the second): the last such instant of the past day.
        target = math.floor(start) - 2.0
        await pilot.press("colon")
        await eventually(lambda: isinstance(app.screen, GoToTime), 5, pause=pilot.pause)
        await pilot.press(*time.strftime("%H:%M:%S", time.localtime(target)), "enter")
        await eventually(lambda: app.time_cursor.at == target, 5, pause=pilot.pause)  # type: ignore[union-attr]
        await moved_to(rig, app, pilot, target)
        await pilot.press("colon")
        await eventually(lambda: isinstance(app.screen, GoToTime), 5, pause=pilot.pause)
        await pilot.press(*"+1s", "enter")
        await eventually(lambda: app.time_cursor.at == target + 1.0, 5, pause=pilot.pause)  # type: ignore[union-attr]
        await moved_to(rig, app, pilot, target + 1.0)

        # Speed and play: the cursor moves on by itself, and the table follows it.
        await pilot.press("less_than_sign", "less_than_sign", "less_than_sign")
        assert app.time_cursor.speed == 1
        await pilot.press("greater_than_sign")
        assert app.time_cursor.speed == 2
        played_from = app.time_cursor.at
        await pilot.press("space")
        await eventually(lambda: app.time_cursor.at >= played_from + 2.0, 10, pause=pilot.pause)  # type: ignore[union-attr]
        await pilot.press("space")
        assert not app.time_cursor.playing
        await moved_to(rig, app, pilot, app.time_cursor.at)

        # A fleet change is refused by the guard, with why; no gate is touched. (space plays
        # here, so the rows with a gate are marked as the fleet tests do.)
        screen = app.screen
        assert isinstance(screen, FleetHistoryScreen)
        screen.marked.update(r.key for r in app.fleet.state.rows if r.gate)
        await pilot.press("plus")
        await eventually(
            lambda: any("read-only" in e.text for e in app.fleet.state.events), 5, pause=pilot.pause
        )
        await pilot.press("question_mark")  # the help lists the cursor keys and says how
        await eventually(lambda: isinstance(app.screen, HelpScreen), 5, pause=pilot.pause)
        shown = str(app.screen.query_one(Static).render())
        assert "go to time" in shown and "play/pause" in shown and "the past" in shown
    assert versions == [
        httpx.get(f"{u}/admin/limits").json()["version"] for u in rig.gates.values()
    ]


def test_the_cursor_never_passes_now_and_reads_typed_times() -> None:
    now = 1_800_000_000.0
    cursor = TimeCursor(now - 10, step_s=2.0, now=lambda: now)
    cursor.step(1)
    assert cursor.at == now - 8
    cursor.jump(60)
    assert cursor.at == now, "the future is not in Prometheus"
    cursor.goto("-5m")
    assert cursor.at == now - 300
    cursor.goto("+90s")
    assert cursor.at == now - 210
    day_ago = time.strftime("%H:%M:%S", time.localtime(now - 3600))
    cursor.goto(day_ago)
    assert cursor.at == now - 3600, "a time of day: its last occurrence"
    with pytest.raises(ValueError, match="expected"):
        cursor.goto("yesterday")
    cursor.toggle()
    assert cursor.advance(0.5) and cursor.at == now - 3600 + 0.5 * cursor.speed
    cursor.jump(10_000)
    assert cursor.advance(1.0) and not cursor.playing, "playing stops at now"


async def test_curly_brackets_move_to_where_the_badges_change(rig: Fleet) -> None:
    """`{` from now lands where the badges in force began (at the latest, where the engines
    first appeared in Prometheus); at that instant the badges, judged on Prometheus' answers
    alone, differ from the second before. `}` from there moves to the next change or says
    there is none; the table is Prometheus' answer at the cursor after each."""
    from gpuwatch.monitor.badgechanges import badges_of

    await eventually(lambda: len(rig.query(HAND_WRITTEN["running"], time.time() - 2)) == 3, 60)
    app = history_app(rig, time.time() - 2)
    source = PrometheusSource(rig.prometheus)

    async def badges(at: float) -> dict:
        return badges_of(await source.read_fleet(at), app.fleet.state.slo)

    async with app.run_test(size=(160, 48)) as pilot:
        cursor = app.time_cursor
        assert cursor is not None
        await moved_to(rig, app, pilot, cursor.at)
        start = cursor.at
        await pilot.press("left_curly_bracket")
        await eventually(lambda: cursor.at < start, 60, pause=pilot.pause)
        await moved_to(rig, app, pilot, cursor.at)
        found = cursor.at
        assert await badges(found) != await badges(found - 1.0)
        await pilot.press("right_curly_bracket")
        await eventually(
            lambda: (
                cursor.at > found
                or any("no badge change" in str(n.message) for n in app._notifications)
            ),
            60,
            pause=pilot.pause,
        )
        if cursor.at > found:
            await moved_to(rig, app, pilot, cursor.at)
            assert await badges(cursor.at) != await badges(cursor.at - 1.0)
    await source.close()
