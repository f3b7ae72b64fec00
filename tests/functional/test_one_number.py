"""One number per thing (issue 26, item 3): at one instant, every place that prints a lane's
user TTFT p99 prints the same value, the gate's exact one. Before, the gate's line in the
engine panel and ``watch --json``'s gate entry read the gate's histogram (above the exact
*maximum* at most instants) while the users panel and the breakdown read the exact record.

A real simulator behind a real gate under load, watched in-process by ``gpuwatch watch``'s
own pollers; then every printer is asked at the same instant (no await between them)."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gpuwatch.fmt import seconds
from gpuwatch.gate.config import GateConfig
from gpuwatch.gate.limits import DEFAULT_LANES
from gpuwatch.gate.server import start_gate
from gpuwatch.load import LoadRun, LoadSpec
from gpuwatch.load.spec import Dist
from gpuwatch.monitor.figures import all_figures, engine_figures, ttft_breakdown, users_now
from gpuwatch.monitor.state import Monitor
from gpuwatch.sim.profiles import get_profile
from gpuwatch.sim.server import start_sim
from gpuwatch.tui.screens.dashboard import ttft_lines
from gpuwatch.tui.widgets.engines import engine_segments
from gpuwatch.tui.widgets.users import breakdown_segments, tail_row
from gpuwatch.watch import Watch, WatchOptions, frame, row
from tests.helpers import eventually

PROFILE = get_profile("rtx4090-llama3-8b-awq")


@pytest.fixture
async def watched(tmp_path: Path) -> AsyncIterator[Monitor]:
    """A simulator behind a gate under load (the lane's queue fills), watched with --admin."""
    _, sim = await start_sim(PROFILE, time_scale=4.0, seed=7)
    _, gate = await start_gate(sim.url, GateConfig(DEFAULT_LANES), state_file=tmp_path / "s.json")
    spec = LoadSpec(
        url=gate.url, rate=12, duration_s=60, prompt_tokens=Dist("uniform", 64, 1024),
        output_tokens=Dist("fixed", 16), burstiness=0.5, seed=4,
    )  # fmt: skip
    load = LoadRun(spec)
    loading = asyncio.create_task(load.run())
    options = WatchOptions(
        urls=[f"{sim.url}/metrics", f"{gate.url}/metrics"], interval_s=0.25, admin_url=gate.url
    )
    watch = Watch(options, out=io.StringIO())
    watching = asyncio.create_task(watch.run())
    try:
        yield watch.monitor
    finally:
        watching.cancel()
        load.stop()
        await asyncio.gather(watching, loading, return_exceptions=True)
        await gate.close()
        await sim.close()


def gate_view(m: Monitor) -> tuple[Any, Any] | None:
    return next(
        ((ep, v) for ep in m.endpoints.values() for v in ep.engines.values()
         if v.snap.dialect == "gate"),
        None,
    )  # fmt: skip


async def test_every_place_prints_one_user_ttft_p99(watched: Monitor) -> None:
    m = watched

    def ready() -> bool:
        users = users_now(m)
        found = gate_view(m)
        return bool(
            users is not None
            and users.worst_lane is not None
            and users.tails[users.worst_lane].ttft.count >= 20
            and found is not None
            and found[1].history.quantile("ttft", 0.99) is not None
            and m.gate is not None
            and m.gate.ttft_p99.points()
        )

    await eventually(ready, 30, message="no exact tails at the gate yet")
    # -- one instant: nothing below awaits ---------------------------------------------------
    users = users_now(m)
    assert users is not None and users.worst_lane is not None
    lane = users.worst_lane
    exact = users.tails[lane].ttft.p99
    found = gate_view(m)
    assert found is not None
    ep, view = found
    histogram = view.history.quantile("ttft", 0.99)  # what the gate line used to print
    gate_figures = engine_figures(ep, view, users)
    doc = frame(m)
    breakdown = ttft_breakdown(m)
    panel_line = " ".join(engine_segments(gate_figures, 2.0))
    table = row(next(f for f in all_figures(m) if f.dialect == "gate"), "OK")
    tails = tail_row(lane, users.tails[lane])
    head = breakdown_segments(breakdown, 2.0)[0] if breakdown else ""
    assert m.gate is not None
    users_line = ttft_lines(m, lambda _: [], 0.0)[0]
    # ------------------------------------------------------------------------------------------
    shown = seconds(exact)
    # the gate's line in the engine panel, labelled with its lane and "exact"
    assert f"({lane}, exact)" in panel_line and f"[b]{shown}[/]" in panel_line, panel_line
    # watch's table row and its JSON: the gate's entry, the users block, the breakdown
    assert f" {shown} " in table, table
    gate_entry = next(e for e in doc["engines"] if e["dialect"] == "gate")
    assert gate_entry["ttft_p99_1m"] == exact
    assert (gate_entry["tails_from"], gate_entry["exact_lane"]) == ("exact", lane)
    assert doc["users"]["lanes"][lane]["ttft_1m"]["p99"] == exact
    assert doc["users"]["ttft_p99_1m"] == exact and doc["users"]["worst_lane"] == lane
    assert doc["ttft_breakdown"]["ttft_p99_1m"] == exact
    # the users panel: the lane's row and the breakdown's head
    assert f"{shown:>7}" in tails and shown in head
    # the TTFT chart's users line ends at it
    assert users_line.label == "users" and users_line.points[-1].v == exact
    # the histogram's estimate is a different number; it is no longer printed as this one,
    # and where the gate has no exact record the line says whose number it shows
    assert histogram is not None and histogram != exact
    alone = " ".join(engine_segments(engine_figures(ep, view), 2.0))
    assert "(histogram)" in alone and seconds(histogram) in alone


def test_the_ttft_chart_draws_what_the_badge_judges() -> None:
    """Issue 26, item 7: in an overload the badge judged the users' p99 at the gate while the
    TTFT chart drew the engine's p50 / p99 under the SLO line. With a gate it draws the users'
    exact p99 (queue wait included) and the engine's p99 beside it; without one, as before."""
    from scripts import scenario

    sc = scenario.build(seconds=150, spike_at=110)
    m = sc.monitor
    assert m.verdict.level == "OVERLOADED"
    series = m.serving_engines()[0].history.series

    def pts(name: str) -> list[Any]:
        return series[name].points()

    users, engine = ttft_lines(m, pts, 0.0)
    assert (users.label, engine.label) == ("users", "engine") and users.on_top
    judged = users_now(m)
    assert judged is not None and users.points[-1].v == judged.ttft_p99
    assert engine.points[-1].v == series["ttft_p99"].points()[-1].v
    # the gap between the two is the wait at the gate: the users' line is over the SLO, and
    # over the engine's
    slo = m.health.slo["ttft_p99_s"]
    assert slo is not None and users.points[-1].v > slo
    assert users.points[-1].v > engine.points[-1].v
    # no gate watched: the engine's p50 and p99, as before
    m.gate = None
    assert [line.label for line in ttft_lines(m, pts, 0.0)] == ["p50", "p99"]
