"""The dashboard (Pilot) against the real simulator and gate on loopback."""

from __future__ import annotations

import asyncio
import html
import logging
import os
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from textual.content import Content
from textual.widgets import DataTable

from gpuwatch.aioserve import Served
from gpuwatch.gate.config import GateConfig
from gpuwatch.gate.limits import DEFAULT_LANES
from gpuwatch.gate.listener import Listening
from gpuwatch.gate.server import Gate, start_gate
from gpuwatch.session.node import DashboardOptions, live_session
from gpuwatch.sim.node import SimNode
from gpuwatch.sim.profiles import get_profile
from gpuwatch.sim.server import start_sim
from gpuwatch.sources.nvml import FakeNvml, NvmlReader, SimGpuSource
from gpuwatch.tui.app import GpuwatchApp
from gpuwatch.tui.screens.gpu_detail import GpuScreen
from gpuwatch.tui.screens.help import HelpScreen
from gpuwatch.tui.widgets.chart import Chart
from gpuwatch.tui.widgets.panel import Panel
from tests.helpers import eventually, refusing_port

PROFILE = get_profile("rtx4090-llama3-8b-awq")
# (simulator, its server, gate, its listener)
Stack = tuple[SimNode, Served, Gate, Listening]


def text(app: GpuwatchApp, selector: str) -> str:
    panel = app.screen.query_one(selector, Panel)
    return Content.from_markup(panel.markup).plain


def screen_text(app: GpuwatchApp) -> str:
    """What the terminal shows, from the SVG screenshot (spaces are &#160; there)."""
    svg = app.export_screenshot()
    return "".join(html.unescape(t) for t in re.findall(r">([^<]*)</text>", svg)).replace(
        "\xa0", " "
    )


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    node, sim = await start_sim(PROFILE, time_scale=2.0, seed=9)
    gate, served = await start_gate(
        sim.url, GateConfig(DEFAULT_LANES), token="tok", state_file=tmp_path / "s.json"
    )
    yield node, sim, gate, served
    await served.close()
    await sim.close()


def options(sim_url: str, gate_url: str, **kw: Any) -> DashboardOptions:
    return DashboardOptions(
        urls=[f"{sim_url}/metrics", f"{gate_url}/metrics"], interval_s=0.2, admin_url=gate_url,
        admin_token="tok", nvml=NvmlReader(FakeNvml(SimGpuSource(f"{sim_url}/sim/gpu"))), **kw,
    )  # fmt: skip


class Load:
    """N long streamed requests in the background; ``close()`` ends them and the session."""

    def __init__(self, url: str, n: int, max_tokens: int = 400) -> None:
        self.session = aiohttp.ClientSession()
        self.max_tokens = max_tokens
        self.tasks = [asyncio.create_task(self._one(url)) for _ in range(n)]

    async def _one(self, url: str) -> None:
        body = {"prompt": "x" * 800, "max_tokens": self.max_tokens}
        body |= {"ignore_eos": True, "stream": True}
        async with self.session.post(f"{url}/v1/completions", json=body) as r:
            await r.read()

    async def close(self) -> None:
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.session.close()


async def test_panels_show_what_the_sources_return(stack: Stack) -> None:
    node, sim, gate, served = stack
    app = GpuwatchApp(live_session(options(sim.url, served.url)))
    load = Load(served.url, 6)
    async with app.run_test(size=(160, 48)) as pilot:
        await eventually(pause=pilot.pause, condition=lambda: "run 6" in text(app, "#engines"))
        engines = text(app, "#engines")
        assert "vllm Llama-3.1-8B-Instruct-AWQ" in engines and "UP" in engines
        assert "in-flight 6" in engines  # the gate's own line
        gpus = text(app, "#gpus")
        assert "RTX 4090" in gpus and "22.1G/24.0G" in gpus and "serving 22.1G" in gpus
        await eventually(
            pause=pilot.pause,
            condition=lambda: (
                re.search(r"chat\s+6/16\s+0/64\s+none", text(app, "#admission")) is not None
            ),
        )
        # The KV gauge shows tokens: vLLM's cache_config_info gives the pool size.
        assert "/125.3k tok" in text(app, "#engines")
        snap = next(iter(app.session.monitor.endpoints[f"{sim.url}/metrics"].engines.values())).snap
        assert snap.running == 6 and snap.kv_tokens_total == PROFILE.kv_tokens
        await eventually(
            pause=pilot.pause,
            condition=lambda: app.screen.query_one("#chart-requests", Chart).rebuilds > 0,
        )
    await load.close()


async def test_dead_endpoint_goes_down_and_back_up(tmp_path: Path) -> None:
    node, sim = await start_sim(PROFILE, time_scale=2.0, seed=3)
    port = int(sim.url.rsplit(":", 1)[1])
    url = f"{sim.url}/metrics"
    app = GpuwatchApp(live_session(DashboardOptions(urls=[url], interval_s=0.2)))
    async with app.run_test(size=(120, 40)) as pilot:
        await eventually(
            pause=pilot.pause,
            condition=lambda: app.session.monitor.endpoints[url].status.state == "UP",
        )
        await sim.close()
        await eventually(
            pause=pilot.pause,
            condition=lambda: app.session.monitor.endpoints[url].status.state == "DOWN",
        )
        await eventually(pause=pilot.pause, condition=lambda: "DOWN" in text(app, "#engines"))
        assert "connection refused" in text(app, "#engines")
        assert any(f"{url} DOWN: connection refused" in e.text for e in app.session.monitor.events)
        _, sim2 = await start_sim(PROFILE, port=port, time_scale=2.0, seed=3)
        try:
            await eventually(
                pause=pilot.pause,
                condition=lambda: app.session.monitor.endpoints[url].status.state == "UP",
            )
            await eventually(pause=pilot.pause, condition=lambda: "UP" in text(app, "#engines"))
            assert any(f"{url} UP again" in e.text for e in app.session.monitor.events)
            await eventually(
                pause=pilot.pause, condition=lambda: "UP again" in text(app, "#events")
            )
        finally:
            await sim2.close()


async def test_theme_switching_cycles_every_theme(stack: Stack) -> None:
    node, sim, gate, served = stack
    app = GpuwatchApp(live_session(options(sim.url, served.url)))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        assert app.theme == "gpuwatch-dark"
        seen = [app.theme]
        for _ in range(4):
            await pilot.press("t")
            seen.append(app.theme)
        assert set(seen) == {"gpuwatch-dark", "gpuwatch-light", "high-contrast", "ansi"}
        assert seen[-1] == "gpuwatch-dark"
        assert app.get_css_variables()["ok"] == "#4fd18b"


async def test_80x24_renders_everything_that_matters(stack: Stack) -> None:
    node, sim, gate, served = stack
    app = GpuwatchApp(live_session(options(sim.url, served.url)))
    async with app.run_test(size=(80, 24)) as pilot:
        await eventually(
            pause=pilot.pause,
            condition=lambda: (
                "RTX 4090" in text(app, "#gpus") and "chat" in text(app, "#admission")
            ),
        )
        shot = await eventually(
            pause=pilot.pause,
            condition=lambda: (
                (t := screen_text(app)) and "RTX 4090" in t and "chat" in t and " OK " in t and t
            ),
        )
        assert "OK" in shot and "RTX 4090" in shot and "vllm" in shot and "chat" in shot
        assert app.screen.has_class("-narrow") and app.screen.has_class("-short")
        kv = app.screen.query_one("#chart-kv", Chart)
        ttft = app.screen.query_one("#chart-ttft", Chart)
        assert not kv.display
        hidden_before, shown_before = kv.rebuilds, ttft.rebuilds
        await eventually(
            pause=pilot.pause, condition=lambda: ttft.rebuilds >= shown_before + 2
        )  # data keeps arriving
        assert kv.rebuilds == hidden_before  # a hidden chart is never rebuilt


async def test_help_gpu_screen_freeze_and_window(stack: Stack) -> None:
    node, sim, gate, served = stack
    app = GpuwatchApp(live_session(options(sim.url, served.url)))
    async with app.run_test(size=(160, 48)) as pilot:
        await eventually(pause=pilot.pause, condition=lambda: app.session.monitor.gpus is not None)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        help_text = screen_text(app)
        for key in ("quit", "GPUs", "window", "freeze", "theme"):
            assert key in help_text
        await pilot.press("escape")
        await pilot.press("g")
        assert isinstance(app.screen, GpuScreen)
        procs = app.screen.query_one("#procs", DataTable)
        assert procs.row_count == 1 and str(os.getpid()) in screen_text(app)
        await pilot.press("escape")
        await pilot.press("w")
        dash = app.dashboard()
        assert dash is not None and dash.chart_window == (300, "5m")
        await pilot.press("space")
        assert dash.frozen and "FROZEN" in text(app, "#header")
        before = text(app, "#engines")
        version = app.session.monitor.version
        await eventually(
            pause=pilot.pause, condition=lambda: app.session.monitor.version > version + 3
        )  # sources keep polling
        assert text(app, "#engines") == before  # the display does not move
        await pilot.press("space")
        assert not dash.frozen


async def test_badge_changes_with_hysteresis(stack: Stack) -> None:
    node, sim, gate, served = stack
    # Goodput off: judged against the same 1 ms bound it falls to 0% too, and the header names
    # the worst signal of the two, which under load may be either; this test is about TTFT's.
    slo = {"ttft_p99_s": 1000.0, "goodput_min": 0.0}
    app = GpuwatchApp(live_session(options(sim.url, served.url, slo=slo)))
    app.session.monitor.health.hold_s = 1.0
    load = Load(served.url, 4)
    async with app.run_test(size=(160, 48)) as pilot:
        await eventually(
            pause=pilot.pause, condition=lambda: app.session.monitor.verdict.level == "OK"
        )  # data, and well inside
        app.session.monitor.health.slo["ttft_p99_s"] = 0.001  # now far outside: the badge must wait
        await eventually(
            pause=pilot.pause,
            condition=lambda: (
                app.session.monitor.health.pending(app.session.monitor.clock()) is not None
            ),
        )
        assert app.session.monitor.verdict.level == "OK"  # the new level has not held long enough
        await eventually(
            pause=pilot.pause, condition=lambda: app.session.monitor.verdict.level == "OVERLOADED"
        )
        await eventually(pause=pilot.pause, condition=lambda: "OVERLOADED" in text(app, "#header"))
        assert "p99 TTFT" in text(app, "#header")
        assert any(
            e.text.startswith("SLO OVERLOADED: p99 TTFT") for e in app.session.monitor.events
        )
    await load.close()


async def test_probe_finds_local_endpoints_and_hint_shows_when_none() -> None:
    from gpuwatch.cli.sources import PROBE_PORTS, probe_local

    # The ports operators' servers use by default (the README's table), in probing order.
    assert PROBE_PORTS == (8000, 30000, 8080, 3000, 9000)
    _, sim = await start_sim(PROFILE, time_scale=2.0)
    try:
        with refusing_port() as dead:
            found = await probe_local((dead, sim.port))
        assert found == [f"http://127.0.0.1:{sim.port}/metrics"]
    finally:
        await sim.close()
    assert await probe_local() == []
    hint = "no serving endpoint answered on localhost ports 8000, 30000, 8080, 3000, 9000"
    app = GpuwatchApp(live_session(DashboardOptions(urls=[], hint=hint)))
    async with app.run_test(size=(120, 36)) as pilot:
        await eventually(pause=pilot.pause, condition=lambda: hint in text(app, "#engines"))


async def test_command_palette_offers_every_action() -> None:
    app = GpuwatchApp(live_session(DashboardOptions(urls=[])))
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause()
        titles = {c.title.lower() for c in app.get_system_commands(app.screen)}
        for binding in app.all_bindings():
            if binding.action != "command_palette":
                assert binding.description.lower() in titles, binding.description


async def test_writes_to_stderr_and_logging_work_while_the_dashboard_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Textual routes stderr through ``App._flush(stderr=...)`` while it runs; a class of ours
    that shadowed that name made every warning raise TypeError (aiohttp logs in the demo)."""
    app = GpuwatchApp(live_session(DashboardOptions(urls=[])))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        print("a line on stderr", file=sys.stderr, flush=True)
        sys.stderr.flush()
        logging.getLogger("aiohttp.server").warning("a warning while the screen runs")
        await pilot.pause()
        assert app.is_running
    assert "a warning while the screen runs" in caplog.text


async def test_audit_trail_shows_foreign_actors_escaped() -> None:
    """An actor saved by an older gate may hold bidi overrides: one escaped line on screen."""
    from textual.widgets import DataTable

    from gpuwatch.adminapi import AuditEntry, LimitsPatch
    from gpuwatch.tui.screens.audit import AuditScreen

    entry = AuditEntry(0, "mallory\u202e@box\nx", 2, LimitsPatch(paused=True))
    app = GpuwatchApp(live_session(DashboardOptions(urls=[])))
    async with app.run_test(size=(120, 30)) as pilot:
        await app.push_screen(AuditScreen([entry]))
        await pilot.pause()
        row = app.screen.query_one(DataTable).get_row_at(0)
        actor = str(row[2])
        assert "\u202e" not in actor and "\\u202e" in actor and "\n" not in actor


async def test_a_repaint_while_panels_come_or_go_is_skipped() -> None:
    """Regression: the once-a-second tick painted while the dashboard's panels were being
    removed at exit (or not yet composed), and NoMatches ended the app with a traceback."""
    from gpuwatch.tui.widgets.header import HeaderBar

    app = GpuwatchApp(live_session(DashboardOptions(urls=[])))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await app.screen.query_one(HeaderBar).remove()
        dash = app.dashboard()
        assert dash is not None
        dash.repaint()  # must not raise
        await pilot.pause()
        assert app.is_running


async def test_help_lists_the_bracket_keys_as_keys() -> None:
    """Regression: the key "[" opened a markup tag; every line after it lost its layout."""
    app = GpuwatchApp(live_session(DashboardOptions(urls=[], admin_url="http://127.0.0.1:9")))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        shown = screen_text(app)
        assert re.search(r"\[\s+queue -8", shown) and re.search(r"\]\s+queue \+8", shown)
        assert "[/]" not in shown
