"""--slow-link: the flag and the config key, and a dashboard that draws its charts every 10 s
and its panels every 2 s, with nothing animated."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gpuwatch.cli.main import build_parser
from gpuwatch.cli.sources import dashboard_settings
from gpuwatch.session.node import DashboardOptions, live_session
from gpuwatch.sim.server import start_sim
from gpuwatch.tui.app import GpuwatchApp
from gpuwatch.tui.screens.dashboard import (
    CHART_EVERY_S,
    SLOW_LINK_CHART_EVERY_S,
    SLOW_LINK_PANELS_EVERY_S,
    Dashboard,
)
from gpuwatch.tui.widgets.chart import Chart
from gpuwatch.tui.widgets.engines import EnginePanel
from tests.functional.test_tui import PROFILE, Load, text
from tests.helpers import eventually


@pytest.mark.parametrize("command", ["top", "demo"])
def test_the_flag_and_the_config_key(tmp_path: Path, command: str) -> None:
    config = tmp_path / "config.toml"
    config.write_text("slow_link = true\n")
    parser = build_parser([command])
    assert dashboard_settings(parser.parse_args([command, "--slow-link"])).slow_link
    on_file = parser.parse_args([command, "--config", str(config)])
    assert dashboard_settings(on_file).slow_link
    bare = tmp_path / "empty.toml"
    bare.write_text("")
    assert not dashboard_settings(parser.parse_args([command, "--config", str(bare)])).slow_link


@pytest.mark.parametrize("slow_link", [False, True])
async def test_charts_every_10_s_and_panels_every_2_s_on_a_slow_link(slow_link: bool) -> None:
    _node, sim = await start_sim(PROFILE, time_scale=2.0, seed=4)
    # Long requests: on a slow link the panels show a poll only every 2 s, and a busy CI
    # machine may start the app late; 400 tokens could be over before "run 3" is ever drawn.
    load = Load(sim.url, 3, max_tokens=8000)
    options = DashboardOptions(urls=[f"{sim.url}/metrics"], interval_s=0.2, slow_link=slow_link)
    app = GpuwatchApp(live_session(options))
    try:
        async with app.run_test(size=(160, 48)) as pilot:
            await eventually(pause=pilot.pause, condition=lambda: "run 3" in text(app, "#engines"))
            assert (app.animation_level == "none") == slow_link
            dash = app.screen
            assert isinstance(dash, Dashboard)
            dash.frozen = True  # its own ticks stop painting: the test paints
            chart = dash.query_one("#chart-requests", Chart)
            engines = dash.query_one(EnginePanel)
            # Charts last drawn a little over CHART_EVERY_S ago: drawn again by default,
            # held on a slow link until SLOW_LINK_CHART_EVERY_S.
            assert CHART_EVERY_S < SLOW_LINK_CHART_EVERY_S
            dash._charts_at = time.monotonic() - CHART_EVERY_S - 0.5
            dash._panels_at = time.monotonic() - SLOW_LINK_PANELS_EVERY_S / 2
            version, drawn = chart._version, engines.markup
            await eventually(
                pause=pilot.pause,
                condition=lambda: dash.session.monitor.version != dash._painted_version,
            )
            dash.paint()
            assert (chart._version == version) == slow_link
            # The panels: held for SLOW_LINK_PANELS_EVERY_S on a slow link, every tick else.
            painted = dash._painted_version == dash.session.monitor.version
            assert painted != slow_link
            if slow_link:
                assert engines.markup == drawn
                dash._panels_at = time.monotonic() - SLOW_LINK_PANELS_EVERY_S
                dash.paint()
                assert dash._painted_version == dash.session.monitor.version
    finally:
        await load.close()
        await sim.close()
