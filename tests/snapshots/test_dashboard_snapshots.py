"""SVG snapshots of the dashboard from deterministic data (scripts.scenario: the simulator's
engine fast-forwarded under a seeded load, scraped through the real data layer).

Update after an intended change: pytest tests/snapshots --snapshot-update
"""

from __future__ import annotations

import os
import time

import pytest

from scripts import scenario


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.delenv("TZ")
    time.tzset()


async def _paint(pilot) -> None:  # type: ignore[no-untyped-def]
    await pilot.pause()
    pilot.app.paint()
    await pilot.pause()


@pytest.mark.parametrize("size", [(160, 48), (80, 24)])
def test_normal(snap_compare, size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(
        scenario.app_for(scenario.build(seconds=150)), terminal_size=size, run_before=_paint
    )


@pytest.mark.parametrize("size", [(160, 48), (80, 24)])
def test_overloaded(snap_compare, size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]
    sc = scenario.build(seconds=150, spike_at=110)
    assert sc.monitor.verdict.level == "OVERLOADED"
    assert snap_compare(scenario.app_for(sc), terminal_size=size, run_before=_paint)


def test_adaptive_lane(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """The adaptive panel: effective limit in its bounds, target, last cut and why, sparkline."""
    sc = scenario.with_adaptive(scenario.build(seconds=150, spike_at=110))
    assert snap_compare(scenario.app_for(sc), terminal_size=(160, 48), run_before=_paint)


def test_help_screen(snap_compare) -> None:  # type: ignore[no-untyped-def]
    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        await _paint(pilot)
        await pilot.press("question_mark")

    assert snap_compare(
        scenario.app_for(scenario.build(seconds=20)), terminal_size=(100, 40), run_before=run_before
    )


def test_ansi_theme(snap_compare) -> None:  # type: ignore[no-untyped-def]
    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        pilot.app.theme = "ansi"
        await _paint(pilot)

    assert os.environ["TZ"] == "UTC"
    assert snap_compare(
        scenario.app_for(scenario.build(seconds=60)), terminal_size=(120, 36), run_before=run_before
    )
