"""SVG snapshots of the fleet screen from a seeded scene (scripts.screenshots.fleet_scene: 14
engines on 10 nodes, two overloaded, two rows marked).

Update after an intended change: pytest tests/snapshots --snapshot-update
"""

from __future__ import annotations

import pytest

from gpuwatch.tui.fleet_app import FleetApp
from gpuwatch.tui.screens.fleet import FleetScreen
from scripts.screenshots import fleet_scene
from tests.snapshots.snaptypes import AnyPilot, SnapCompare


def app() -> FleetApp:
    options, state = fleet_scene()
    return FleetApp(options, state)


async def _mark_two(pilot: AnyPilot) -> None:
    await pilot.pause()
    screen = pilot.app.screen
    assert isinstance(screen, FleetScreen)
    assert isinstance(pilot.app, FleetApp)
    screen.marked.update(r.key for r in pilot.app.fleet.state.view()[:2])
    screen.paint()
    await pilot.pause()


@pytest.mark.parametrize("size", [(160, 48), (80, 24)])
def test_fleet(snap_compare: SnapCompare, size: tuple[int, int]) -> None:
    assert snap_compare(app(), terminal_size=size, run_before=_mark_two)


def test_fleet_grouped_by_model_and_filtered(snap_compare: SnapCompare) -> None:
    async def run_before(pilot: AnyPilot) -> None:
        await pilot.pause()
        await pilot.press("m", "slash", *"llama", "enter")
        await pilot.pause()

    assert snap_compare(app(), terminal_size=(160, 48), run_before=run_before)
