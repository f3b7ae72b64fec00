"""SVG snapshots of the fleet screen from a seeded scene (scripts.screenshots.fleet_scene: 14
engines on 10 nodes, two overloaded, two rows marked).

Update after an intended change: pytest tests/snapshots --snapshot-update
"""

from __future__ import annotations

import pytest

from gpuwatch.tui.fleet_app import FleetApp
from gpuwatch.tui.screens.fleet import FleetScreen
from scripts.screenshots import fleet_scene


def app() -> FleetApp:
    options, state = fleet_scene()
    return FleetApp(options, state)  # type: ignore[arg-type]


async def _mark_two(pilot) -> None:  # type: ignore[no-untyped-def]
    await pilot.pause()
    screen = pilot.app.screen
    assert isinstance(screen, FleetScreen)
    screen.marked.update(r.key for r in pilot.app.fleet.state.view()[:2])
    screen.paint()
    await pilot.pause()


@pytest.mark.parametrize("size", [(160, 48), (80, 24)])
def test_fleet(snap_compare, size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(app(), terminal_size=size, run_before=_mark_two)


def test_fleet_grouped_by_model_and_filtered(snap_compare) -> None:  # type: ignore[no-untyped-def]
    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        await pilot.pause()
        await pilot.press("m", "slash", *"llama", "enter")
        await pilot.pause()

    assert snap_compare(app(), terminal_size=(160, 48), run_before=run_before)
