"""The admission lanes stay in view (tui/widgets/column.py): at every terminal size the panels
above them give way, the gate's engine line first, and no lane row is below the fold of the
left column; where there is room nothing is compacted. Data from scripts.scenario: the demo's
node (chat, embeddings, an image burst) with its gate scraped as an engine too."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from textual.geometry import Region
from textual.pilot import Pilot
from textual.widget import Widget
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

from gpuwatch.demo import demo_load
from gpuwatch.monitor.state import Monitor
from gpuwatch.tui.app import GpuwatchApp
from gpuwatch.tui.markup import content
from gpuwatch.tui.screens.dashboard import Dashboard
from gpuwatch.tui.widgets.admission import AdmissionPanel
from gpuwatch.tui.widgets.engines import FULL, GATE_ONE_LINE, EnginePanel
from gpuwatch.tui.widgets.gpus import GpuPanel
from gpuwatch.tui.widgets.panel import HOLD_S
from scripts import scenario
from scripts.screenshots import with_knobs
from tests.helpers import eventually


def demo_like(spike: bool, gpus: int = 1) -> scenario.Scenario:
    demo = demo_load(scenario.GATE_URL, 1.5, 0.5)
    return scenario.build(
        seconds=150, spike_at=110 if spike else None, tenancy=demo.tenancy,
        classes=demo.classes, gate_page=True, images_at=100, gpus=gpus,
    )  # fmt: skip


@pytest.fixture(scope="module")
def calm() -> scenario.Scenario:
    return demo_like(spike=False)


@pytest.fixture(scope="module")
def spike() -> scenario.Scenario:
    return demo_like(spike=True)


@pytest.fixture(scope="module")
def eight_gpus() -> scenario.Scenario:
    return demo_like(spike=True, gpus=8)


def lanes_in_view(app: GpuwatchApp) -> list[str]:
    """The lane rows of the admission panel that the left column shows; fails the test when
    the panel runs past the column's visible rows."""
    column = app.screen.query_one("#left", Widget)
    panel = app.screen.query_one(AdmissionPanel)
    top = panel.region.y - column.region.y  # where the panel starts inside the column
    visible = column.region.height - top
    assert column.scroll_y == 0
    assert panel.region.height <= visible, (
        f"admission needs {panel.region.height} rows, {visible} shown:\n{panel.markup}"
    )
    gate = app.session.monitor.gate
    assert gate is not None and gate.limits is not None
    lanes = list(gate.limits.lanes)
    # Every lane has its row in the panel's text, which the panel shows whole.
    rows = content(panel.markup).plain.splitlines()
    return [lane for lane in lanes if any(row.startswith(f" {lane} ") for row in rows)]


def dashboard(app: GpuwatchApp) -> Dashboard:
    screen = app.screen
    assert isinstance(screen, Dashboard)
    return screen


async def _painted(app: GpuwatchApp, pilot: Pilot[None]) -> None:
    await pilot.pause()
    dashboard(app).paint()
    # The column fits on the panels' resizes, each a message round or more: wait until the
    # layout has held still for three rounds in a row.
    column = app.screen.query_one("#left", Widget)
    before: list[Region] = []
    still = 0
    for _ in range(50):
        await pilot.pause()
        now = [c.region for c in column.children]
        still = still + 1 if now == before else 0
        if still == 3:
            break
        before = now


@pytest.mark.parametrize(
    ("state", "size"),
    [
        ("calm", (80, 24)),
        *(("spike", size) for size in [(80, 24), (100, 24), (160, 24), (120, 36), (160, 48)]),
        ("eight_gpus", (80, 24)),
        ("eight_gpus", (120, 36)),
    ],
)
async def test_every_lane_row_is_in_view_at_every_size(
    size: tuple[int, int], state: str, request: pytest.FixtureRequest
) -> None:
    sc: scenario.Scenario = request.getfixturevalue(state)
    app = scenario.app_for(sc)
    async with app.run_test(size=size) as pilot:
        await _painted(app, pilot)
        assert lanes_in_view(app) == ["chat", "embed", "image", "default"]
        engines = app.screen.query_one(EnginePanel)
        if size == (160, 48):  # room for all: nothing gives way
            assert engines.level == FULL
        gpus = content(app.screen.query_one(GpuPanel).markup).plain
        if state == "eight_gpus":
            # The engines gave way first, down to their fewest lines; then the GPUs, to one.
            assert gpus.startswith("8 GPUs VRAM") and "\n" not in gpus
        elif size == (120, 36):
            assert "util" in gpus and "power" in gpus  # one GPU, in full: the engines gave way
        if size == (80, 24):
            # The gate's line went to one line before the engine's lines did.
            assert engines.level >= GATE_ONE_LINE
            shown = content(engines.markup).plain
            assert "● gate UP  in-flight" in shown and "● vllm" in shown


async def test_a_lane_added_at_the_gate_pushes_the_engines_not_the_lanes(
    calm: scenario.Scenario,
) -> None:
    app = scenario.app_for(calm)
    monitor: Monitor = app.session.monitor

    async def gate_with(more: tuple[str, ...]) -> int | None:
        limits, status = scenario.gate_state(8, 64, 256, 0, {})
        limits = replace(limits, lanes={**limits.lanes, **{n: limits.lanes["embed"] for n in more}})
        status = replace(status, lanes={**status.lanes, **{n: status.lanes["embed"] for n in more}})
        monitor.apply_gate(limits, status)
        dashboard(app).repaint()
        await _painted(app, pilot)
        assert lanes_in_view(app) == ["chat", "embed", "image", "default", *more]
        return app.screen.query_one(EnginePanel).room

    async with app.run_test(size=(80, 24)) as pilot:
        await _painted(app, pilot)
        # A panel that shrinks keeps its height for HOLD_S: here that time has always passed.
        admission = app.screen.query_one(AdmissionPanel)
        ticks = itertools.count(0.0, HOLD_S + 1)
        admission.clock = lambda: next(ticks)
        four = await gate_with(())
        six = await gate_with(("batch", "rerank"))
        # The two rows came from the engines (one of them may be the spare row the column keeps
        # for a panel to grow into), not from the lanes' view (asserted in gate_with).
        assert four is not None and six is not None and four - 2 <= six < four
        # The lanes go: the engines get their lines back.
        back = await gate_with(())
        assert back is not None and back >= four


@pytest.fixture(scope="module")
def tight() -> scenario.Scenario:
    """The demo's tenants and classes through a tight chat lane (8 in flight, 16 queued) in a
    spike: the scene of the README's classes screenshot, whose refusals by class once ran
    past the panel's edge at 160x48 (their `total` wrapped onto a line of its own)."""
    demo = demo_load(scenario.GATE_URL, 1.5, 0.5)
    return scenario.build(
        seconds=180, spike_at=120, max_inflight=8, max_queue=16, tenancy=demo.tenancy,
        classes=demo.classes,
    )  # fmt: skip


@pytest.mark.parametrize("size", [(160, 48), (80, 24)])
async def test_no_admission_line_is_wider_than_the_panel(
    tight: scenario.Scenario, size: tuple[int, int]
) -> None:
    app = scenario.app_for(tight)
    async with app.run_test(size=size) as pilot:
        await _painted(app, pilot)
        panel = app.screen.query_one(AdmissionPanel)
        width = panel.content_size.width
        rows = content(panel.markup).plain.splitlines()
        assert all(len(row) <= width for row in rows), "\n".join(
            f"{len(row):3} {row}" for row in rows
        )
        refused = [row for row in rows if "refused total" in row]
        assert len(refused) == 1 and "critical: evicted" in refused[0]
        if size == (160, 48):  # room for lines: every class's refusals, none counted away
            assert any(row.strip().startswith("sheddable: evicted") for row in rows)
        assert "tenants noisy" in "\n".join(rows)


def selected_row_shown(app: GpuwatchApp) -> bool:
    """Whether the row the keys act on (a lane or a knob) is on screen in the left column."""
    column = app.screen.query_one("#left", Widget)
    panel = app.screen.query_one(AdmissionPanel)
    if panel.selected_line is None:
        return False
    y = panel.content_region.y + panel.selected_line  # on screen, after any scroll
    shown = column.scrollable_content_region
    return shown.y <= y < shown.bottom


async def test_a_knob_row_selected_below_the_fold_is_scrolled_into_view(
    calm: scenario.Scenario,
) -> None:
    """At 80x24 the stacks' knob rows run past the column's fold: the one selected is scrolled
    into view (the keys act on it), and the lanes come back when a lane is selected again."""
    app = scenario.app_for(calm)
    with_knobs(app)  # Dynamo's thresholds of two models, vLLM's pause last
    async with app.run_test(size=(80, 24)) as pilot:
        await _painted(app, pilot)
        lanes, rows = app.session.steering.lanes(), app.session.knobs.rows()
        assert selected_row_shown(app) and lanes == ["chat", "embed", "image", "default"]
        await pilot.press(*["tab"] * (len(lanes) + len(rows) - 1))
        assert app.session.on_knob == rows[-1] and rows[-1].key[0] == "vllm"
        await eventually(lambda: selected_row_shown(app), pause=pilot.pause)
        column = app.screen.query_one("#left", Widget)
        assert column.scroll_y > 0  # it was below the fold
        await pilot.press("tab")  # past the last knob: the first lane
        assert app.session.on_knob is None and app.session.steering.selected_lane == "chat"
        await eventually(lambda: column.scroll_y == 0, pause=pilot.pause)
        assert selected_row_shown(app)


def footer_in_view(app: GpuwatchApp) -> list[str]:
    """The footer's keys whose label is whole on screen, in order."""
    width = app.screen.size.width
    return [
        k.key for k in app.screen.query(FooterKey) if k.region.width and k.region.right <= width
    ]


@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
async def test_the_footer_keeps_undo_quit_and_help_in_view(
    calm: scenario.Scenario, size: tuple[int, int]
) -> None:
    """Under 120 columns the footer drops its padding and the palette's ^p, so the keys up to
    ``? help`` fit in 80, on a lane row and on a knob row; wide, it keeps both."""
    app = scenario.app_for(calm)
    with_knobs(app)
    async with app.run_test(size=size) as pilot:
        await _painted(app, pilot)
        footer = app.screen.query_one(Footer)
        assert footer.compact == (size[0] < 120)
        assert footer.show_command_palette == (size[0] >= 120)
        lane_keys = ["tab", "plus", "minus", "p", "e", "u", "q", "question_mark"]
        await eventually(lambda: footer_in_view(app)[:8] == lane_keys, pause=pilot.pause)
        await pilot.press(*["tab"] * len(app.session.steering.lanes()))  # the first knob row
        assert app.session.on_knob is not None
        knob_keys = ["tab", "plus", "minus", "e", "u", "q", "question_mark"]  # Dynamo: no p
        await eventually(lambda: footer_in_view(app)[:7] == knob_keys, pause=pilot.pause)
