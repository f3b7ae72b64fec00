"""From the dashboard's keys to a real Ray Serve deployment's ``max_ongoing_requests``
(tests/realstack/raykit.py: one cluster for the session, two applications): confirmed when cut
by more than half, seen in Ray's own API, the other application untouched, audited in the local
file, undone with ``u``, and refused read-only with nothing sent. The cluster is the
session's ``ray_serve`` fixture (tests/realstack/conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from textual.pilot import Pilot

from gpuwatch.config import KnobConfig
from gpuwatch.control.knobs.apply import open_audit
from gpuwatch.session.node import DashboardOptions, live_session
from gpuwatch.tui.app import GpuwatchApp
from gpuwatch.tui.screens.confirm import ConfirmationModal
from tests.functional.test_tui import text
from tests.helpers import eventually
from tests.realstack.raykit import RayServe

MAX_ONGOING = "max_ongoing_requests"


def make_app(rs: RayServe, audit: Path, **kw: Any) -> GpuwatchApp:
    return GpuwatchApp(
        live_session(
            DashboardOptions(
                urls=[],
                local=False,
                knobs=[KnobConfig("ray", rs.dashboard)],
                knob_audit=str(audit),
                knob_interval_s=0.5,
                **kw,
            )
        )
    )


def in_force(rs: RayServe, app: str, deployment: str) -> int:
    value: int = rs.deployment(app, deployment)["deployment_config"][MAX_ONGOING]
    return value


async def forward_selected(pilot: Pilot[None], app: GpuwatchApp) -> None:
    """llm/Forward's row read, and its max_ongoing_requests selected with its number key."""
    await eventually(
        pause=pilot.pause,
        condition=lambda: "ray llm/Forward" in text(app, "#admission"),
        timeout=30,
    )
    rows = app.session.knobs.rows()
    index = rows.index(next(r for r in rows if r.key == ("ray", "llm/Forward", MAX_ONGOING)))
    await pilot.press(str(index + 1))  # no gate: the number keys count the knob rows
    selected = app.session.on_knob
    assert selected is not None and selected.key[1:] == ("llm/Forward", MAX_ONGOING)


async def test_a_key_cuts_max_ongoing_in_ray_after_asking_audited_and_undone(
    ray_serve: RayServe, tmp_path: Path
) -> None:
    ray_serve.reset()
    before = ray_serve.details()
    audit = tmp_path / "knobs-audit.jsonl"
    app = make_app(ray_serve, audit)
    app.session.knobs.coalesce_s = 2.0  # the two keys land in one window on a loaded machine
    async with app.run_test(size=(160, 48)) as pilot:
        await forward_selected(pilot, app)
        assert "max_ongoing 8" in text(app, "#admission")
        await pilot.press("slash", "slash")  # 8 -> 2 in one change: more than half, so it asks
        modal = await eventually(
            pause=pilot.pause,
            condition=lambda: isinstance(app.screen, ConfirmationModal) and app.screen,
        )
        details = str(modal.query_one("#details").render())
        assert "ray llm/Forward max_ongoing_requests 8 -> 2" in details
        assert ray_serve.dashboard in details
        await pilot.click("#apply")
        await eventually(lambda: in_force(ray_serve, "llm", "Forward") == 2, 60, pause=pilot.pause)
        await eventually(
            pause=pilot.pause, condition=lambda: "max_ongoing 2" in text(app, "#admission")
        )
        # The other application is as it was.
        now = ray_serve.details()["applications"]["other"]
        assert json.dumps(now["deployed_app_config"]) == json.dumps(
            before["applications"]["other"]["deployed_app_config"]
        )
        assert in_force(ray_serve, "other", "Echo") == 3
        await eventually(pause=pilot.pause, condition=lambda: app.session.knobs.idle)
        # Undo: 2 -> 8, a raise, so it asks nothing.
        await pilot.press("u")
        await eventually(lambda: in_force(ray_serve, "llm", "Forward") == 8, 60, pause=pilot.pause)
        await eventually(pause=pilot.pause, condition=lambda: app.session.knobs.idle)
    entries = list(open_audit(audit).recent)
    assert [e.change.to_json() for e in entries] == [
        {"lanes": {"ray llm/Forward": {MAX_ONGOING: 8}}},  # newest first: the undo
        {"lanes": {"ray llm/Forward": {MAX_ONGOING: 2}}},
    ]
    assert all("@" in e.actor and ray_serve.dashboard in (e.reason or "") for e in entries)


async def test_read_only_refuses_the_keys_and_sends_nothing_to_ray(
    ray_serve: RayServe, tmp_path: Path
) -> None:
    ray_serve.reset()
    deployed = ray_serve.details()["applications"]["llm"]["last_deployed_time_s"]
    audit = tmp_path / "knobs-audit.jsonl"
    app = make_app(ray_serve, audit, read_only=True)
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        await forward_selected(pilot, app)
        await pilot.press("slash", "plus", "e", "u")
        await pilot.pause()
        await eventually(pause=pilot.pause, condition=lambda: app.session.knobs.idle)
        said = [n.message for n in app._notifications]
        assert len(said) == 4 and all("read-only" in m for m in said), said
    llm = ray_serve.details()["applications"]["llm"]
    assert llm["last_deployed_time_s"] == deployed  # no PUT reached Ray
    assert in_force(ray_serve, "llm", "Forward") == 8
    assert not audit.exists()
