"""SVG snapshots of the dashboard from deterministic data (scripts.scenario: the simulator's
engine fast-forwarded under a seeded load, scraped through the real data layer).

Update after an intended change: pytest tests/snapshots --snapshot-update
"""

from __future__ import annotations

import os
import time
from collections import Counter

import pytest

from gpuwatch.demo import demo_load
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
    scenario.paint(pilot.app)
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


@pytest.mark.parametrize("size", [(160, 48), (80, 24)])
def test_classes_and_tenants(snap_compare, size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]
    """The demo's tenants and classes through a tight chat lane in a spike, admitted by the
    real gate's code: the panel's classes, refusals by class and busiest tenants (at 80x24 the
    classes and tenants share a line so the lanes below stay on screen)."""
    demo = demo_load(scenario.GATE_URL, 1.5, 0.5)
    sc = scenario.build(
        seconds=150, spike_at=110, max_inflight=8, max_queue=16,
        tenancy=demo.tenancy, classes=demo.classes,
    )  # fmt: skip
    assert sc.monitor.gate is not None
    chat = sc.monitor.gate.lanes["chat"]
    # The status is the gate's own: refusals by class add up to the lane's, batch is shed.
    by_class: Counter[str] = Counter()
    for data in chat.classes.values():
        by_class.update(data.rejected_total)
    assert by_class == Counter(chat.rejected_total) and by_class["evicted"] > 0
    # Batch is shed first; the rest of the evictions take places from the tenant holding the
    # most of the full queue (the noisy one), never from a class above the arrival's.
    assert chat.classes["sheddable"].rejected_total["evicted"] > 0
    assert {t.tenant for t in chat.tenants} <= {"noisy", *(f"t0{k}" for k in range(1, 7))}
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


def _demo_like(spike_at: float | None) -> scenario.Scenario:
    """``gpuwatch demo``'s node: chat from its tenants and classes, embeddings, an image burst
    through the image lane, and the gate's own /metrics scraped as an engine beside vLLM."""
    demo = demo_load(scenario.GATE_URL, 1.5, 0.5)
    return scenario.build(
        seconds=150, spike_at=spike_at, tenancy=demo.tenancy, classes=demo.classes,
        gate_page=True, images_at=100,
    )  # fmt: skip


@pytest.mark.parametrize("spike_at", [None, 110.0], ids=["calm", "spike"])
def test_demo_at_80x24_shows_every_lane(snap_compare, spike_at: float | None) -> None:  # type: ignore[no-untyped-def]
    """The demo at 80x24: the gate's engine line on one line, the engine's in two, so the four
    lanes (and chat's classes and tenants) are all on screen; legends with short labels."""
    assert snap_compare(
        scenario.app_for(_demo_like(spike_at)), terminal_size=(80, 24), run_before=_paint
    )
