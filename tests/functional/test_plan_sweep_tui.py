"""The dashboard's ``P``: the last plan saved for the gate, and its Apply through the steering
(confirmation, If-Match, audited as the operator), against a real gate."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.text import Text
from textual.widgets import DataTable, Static

from gpuwatch.control.gate import default_actor
from gpuwatch.plan import planner
from gpuwatch.plan.probe import ProbeResult, Target
from gpuwatch.plan.recommend import Recommendation
from gpuwatch.tui.screens.confirm import ConfirmationModal
from gpuwatch.tui.screens.plan import PlanScreen
from tests.functional.test_tui_control import confirm_shown, make_app, ready, settled, stack
from tests.functional.test_tui_control import wait_version as wait_version
from tests.helpers import eventually

__all__ = ["stack"]  # the fixture, shared with the steering tests


def summary(app) -> str:  # type: ignore[no-untyped-def]
    """The summary as shown (markup rendered away)."""
    return Text.from_markup(str(app.screen.query_one("#summary", Static).content)).plain


def _plan(gate: str) -> planner.Plan:
    probe = ProbeResult(6.0, 480, 2829, 2819, 0, 0, True, 0.994, 0.998, 0.44, 1.76, 0.015, 0.4,
                        6.0, kv_peak=0.73, preemptions=0, queue_peak=18, batch_p99=114)  # fmt: skip
    rec = Recommendation("chat", 40, 9, None, {"max_inflight": "kv fits 40",
                         "max_queue": "drains in time", "max_output_tokens": "no cap"})  # fmt: skip
    return planner.Plan("sim", "rtx4090-llama3-8b-awq", Target(2.0), "test traffic", 0, 0.7, 6.0,
                        [probe], rec, gate=gate)  # fmt: skip


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state"


async def test_p_shows_the_plan_and_apply_changes_the_gate_after_confirmation(
    stack, state: Path
) -> None:
    node, sim, gate, served, client = stack
    planner.save(_plan(served.url))
    app = make_app(sim.url, served.url)
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot, app)
        await pilot.press("P")
        await eventually(pause=pilot.pause, condition=lambda: isinstance(app.screen, PlanScreen))
        assert "knee 6.00 req/s" in summary(app) and "4.20 req/s" in summary(app)
        limits = app.screen.query_one("#limits", DataTable)
        rows = [[str(c) for c in limits.get_row_at(i)] for i in range(limits.row_count)]
        assert rows[0][:3] == ["max_inflight", "16", "40"] and rows[1][:3] == [
            "max_queue",
            "64",
            "9",
        ]
        await pilot.click("#apply")
        modal = await confirm_shown(pilot, app)
        assert isinstance(modal, ConfirmationModal)
        details = "\n".join(modal.lines)
        assert "limits from the plan of" in details and "chat.max_inflight 16 -> 40" in details
        assert "max_output_tokens" not in details  # unchanged: not part of the change
        await pilot.click("#apply")
        after = await wait_version(pilot, client, 2)
        await settled(pilot, app)
    chat = after.lanes["chat"]
    assert (chat.max_inflight, chat.max_queue) == (40, 9)
    [entry] = await client.audit(10)
    assert entry.actor == default_actor()  # the operator, not "plan": they pressed Apply
    assert any("from the plan of" in e.text for e in app.session.monitor.events)


async def test_cancel_and_read_only_send_nothing(stack, state: Path) -> None:
    node, sim, gate, served, client = stack
    planner.save(_plan(served.url))
    app = make_app(sim.url, served.url)
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot, app)
        await pilot.press("P")
        await eventually(pause=pilot.pause, condition=lambda: isinstance(app.screen, PlanScreen))
        await pilot.click("#apply")
        await confirm_shown(pilot, app)
        await pilot.press("enter")  # focus starts on Cancel
        await settled(pilot, app)
    app = make_app(sim.url, served.url, read_only=True)
    async with app.run_test(size=(160, 48)) as pilot:
        await eventually(
            pause=pilot.pause,
            condition=lambda: app.session.monitor.gate and app.session.monitor.gate.limits,
        )
        await pilot.press("P")
        await eventually(pause=pilot.pause, condition=lambda: isinstance(app.screen, PlanScreen))
        await pilot.click("#apply")
        await settled(pilot, app)
        assert not isinstance(app.screen, ConfirmationModal)
        assert any("read-only" in str(n.message) for n in app._notifications)
    assert (await client.limits()).version == 1
    assert await client.audit(10) == []


async def test_p_without_a_saved_plan_says_how_to_make_one(stack, state: Path) -> None:
    node, sim, gate, served, client = stack
    app = make_app(sim.url, served.url)
    async with app.run_test(size=(160, 48)) as pilot:
        await ready(pilot, app)
        await pilot.press("P")
        await eventually(pause=pilot.pause, condition=lambda: isinstance(app.screen, PlanScreen))
        assert f"gpuwatch plan sweep --gate {served.url}" in summary(app)
        assert not app.screen.query("#apply")
