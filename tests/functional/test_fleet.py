"""The fleet through a real Prometheus: rows equal its own answers at the same instant, and one
change reaches two marked gates (each audited; a stale one gets 409)."""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from aiohttp import web
from textual.widgets import Static

from gpuwatch import config
from gpuwatch.aioserve import serve
from gpuwatch.config import GateTarget
from gpuwatch.control.fleet import FleetChange, address_of
from gpuwatch.control.guard import Guard, ReadOnlyError
from gpuwatch.monitor.fleet import FleetState
from gpuwatch.session.fleet import FleetOptions, FleetSession
from gpuwatch.session.node import NodeSession
from gpuwatch.sources import dcgm, promql
from gpuwatch.sources.dialects import VLLM, sample_names
from gpuwatch.sources.prometheus import MAX_BYTES, PrometheusSource, auth_headers
from gpuwatch.tui.app import GpuwatchApp
from gpuwatch.tui.fleet_app import FleetApp
from gpuwatch.tui.screens.confirm import ConfirmationModal
from gpuwatch.tui.screens.dashboard import Dashboard
from gpuwatch.tui.screens.fleet import FleetScreen
from gpuwatch.tui.screens.results import ResultsScreen
from gpuwatch.tui.widgets.engines import EnginePanel
from gpuwatch.tui.widgets.fleet import FleetTable
from gpuwatch.tui.widgets.gpus import GpuPanel
from gpuwatch.tui.widgets.header import HeaderBar
from tests.functional.fleetkit import Fleet, fleet
from tests.functional.servers import ThreadedServer
from tests.helpers import eventually, eventually_sync, refusing_port

# What an operator would type into Prometheus' own console, written by hand (not generated):
# the rows must equal these at the same evaluation time.
BY = "by (instance, model_name)"
HAND_WRITTEN = {
    "running": f"sum {BY} (vllm:num_requests_running)",
    "waiting": f"sum {BY} (vllm:num_requests_waiting)",
    "kv": f"max {BY} (vllm:kv_cache_usage_perc)",
    "ttft_p99": "histogram_quantile(0.99, sum by (le, instance, model_name) "
    "(rate(vllm:time_to_first_token_seconds_bucket[1m])))",
    "itl_p99": "histogram_quantile(0.99, sum by (le, instance, model_name) "
    "(rate(vllm:inter_token_latency_seconds_bucket[1m])))",
    "gen_tps": f"sum {BY} (rate(vllm:generation_tokens_total[1m]))",
    "preempt_per_min": f"sum {BY} (rate(vllm:num_preemptions_total[1m])) * 60",
    "running_min": f"sum {BY} (min_over_time(vllm:num_requests_running[1m]))",
    "gate_inflight": "sum by (instance) (gpuwatch_gate_inflight)",
    "gate_queued": "sum by (instance) (gpuwatch_gate_queued)",
    "gate_refused_ps": "sum by (instance) (rate(gpuwatch_gate_rejected_total[1m]))",
}


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    with fleet(tmp_path_factory.mktemp("fleet")) as f:
        yield f


def gates_of(f: Fleet) -> list:
    targets = config.load(f.config).gates
    return [address_of(url.split("://")[1], node, targets) for node, url in f.gates.items()]


async def test_rows_equal_prometheus_answers_at_the_same_instant(rig: Fleet) -> None:
    at = time.time()
    async with PrometheusSource(rig.prometheus) as source:
        reading = await source.read_fleet(at)
    assert reading.error is None, reading.error
    sims = {url.split("://")[1]: node for node, url in rig.sims.items()}
    rows = {r.instance: r for r in reading.rows}
    assert set(rows) == set(sims), "one row per simulated node (model), no gate-only rows"
    for instance, node in sims.items():
        assert rows[instance].node == node and rows[instance].dialect == "vllm"
    # The node with two engines is one row: both engines summed, as on a scraped page.
    two = rows[rig.sims["b"].split("://")[1]]
    engines = rig.query(f'vllm:num_requests_running{{instance="{two.instance}"}}', at)
    assert len(engines) == 2 and two.values["running"] == sum(v for _, v in engines)
    assert two.model == "m-two"
    compared = 0
    for key, expr in HAND_WRITTEN.items():
        answer = {labels["instance"]: value for labels, value in rig.query(expr, at)}
        for row in rows.values():
            target = row.gate if key.startswith("gate_") else row.instance
            if target is None:
                assert row.values.get(key) is None, (key, row)
                continue
            assert target in answer, (key, row, answer)
            if math.isnan(answer[target]):  # no request in the window: unknown, never 0
                assert row.values[key] is None, (key, row)
            else:
                assert row.values[key] == pytest.approx(answer[target], rel=1e-12), (key, row)
            compared += 1
    assert compared >= 3 * 7 + 2 * 3
    assert rows[rig.sims["a"].split("://")[1]].gate == rig.gates["a"].split("://")[1]
    assert any(r.values["gen_tps"] for r in rows.values()), "the load reached the engines"


async def test_one_query_per_signal_whatever_the_fleet_size(rig: Fleet) -> None:
    async with PrometheusSource(rig.prometheus) as source:
        first = await source.read_fleet()
        second = await source.read_fleet()
    # names (once per 30 s) + a query per signal the stacks here export (vLLM has no forward
    # pass counter) + 3 gate signals + targets + alerts (once per 5 s)
    signals = sum(promql.signal_query(s, [VLLM]) is not None for s in promql.SIGNALS)
    assert signals == len(promql.SIGNALS) - 1
    assert first.queries == 1 + signals + len(promql.GATE_SIGNALS) + 2
    assert second.queries == signals + len(promql.GATE_SIGNALS)


async def test_a_change_to_two_marked_gates_applies_to_both_each_audited(rig: Fleet) -> None:
    change = FleetChange(Guard(), actor="fleet-test")
    read = await change.read(gates_of(rig))
    before = {p.gate.node: p.before.lanes["chat"].max_inflight for p in read}
    planned = change.plan(read, [("chat", "max_inflight", lambda v: v + 1)])
    shown = [line for p in planned for line in p.summary()]
    for p in planned:
        old = before[p.gate.node]
        assert (
            f"{p.gate.node} ({p.gate.instance}) v{p.version}: chat.max_inflight {old} -> {old + 1}"
            in shown
        )
    outcomes = await change.apply(planned)
    assert [o.result for o in outcomes] == ["applied", "applied"]
    for node, url in rig.gates.items():
        limits = httpx.get(f"{url}/admin/limits").json()
        assert limits["lanes"]["chat"]["max_inflight"] == before[node] + 1
        audit = httpx.get(f"{url}/admin/audit", params={"limit": 1}).json()["entries"]
        assert audit[0]["actor"] == "fleet-test", audit


async def test_a_gate_changed_in_between_gets_409_and_the_other_applies(rig: Fleet) -> None:
    change = FleetChange(Guard(), actor="fleet-test")
    read = await change.read(gates_of(rig))
    planned = change.plan(read, [("chat", "max_queue", lambda v: v + 8)])
    # Someone else changes gate b after the confirmation was shown, before it is applied.
    b = rig.gates["b"]
    httpx.patch(f"{b}/admin/limits", json={"lanes": {"chat": {"max_queue": 3}}}).raise_for_status()
    outcomes = {o.gate.node: o for o in await change.apply(planned)}
    assert outcomes["a"].result == "applied"
    assert outcomes["b"].result == "409", outcomes["b"]
    assert httpx.get(f"{b}/admin/limits").json()["lanes"]["chat"]["max_queue"] == 3


async def test_read_only_refuses_a_fleet_change_in_the_guard(rig: Fleet) -> None:
    before = [httpx.get(f"{u}/admin/limits").json()["version"] for u in rig.gates.values()]
    with pytest.raises(ReadOnlyError):
        await FleetChange(Guard(read_only=True)).read(gates_of(rig))
    after = [httpx.get(f"{u}/admin/limits").json()["version"] for u in rig.gates.values()]
    assert before == after


def test_snapshot_prometheus_json_gives_the_fleet_rows(rig: Fleet) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gpuwatch", "snapshot", "--prometheus", rig.prometheus, "--json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["error"] is None and data["window"] == "1m"
    assert {r["node"] for r in data["rows"]} == {"a", "b", "c"}
    assert all(
        ("ttft_p99" in r and "gate_inflight" in r) or r["gate"] is None for r in data["rows"]
    )


def test_watch_prometheus_prints_rows_per_interval(rig: Fleet) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gpuwatch", "watch", "--prometheus", rig.prometheus,
         "--count", "2", "--interval", "0.5", "--json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    frames = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(frames) == 2 and frames[1]["at"] > frames[0]["at"]
    assert len(frames[0]["rows"]) == 3


async def test_a_down_prometheus_is_one_line() -> None:
    with refusing_port() as port:
        async with PrometheusSource(f"http://127.0.0.1:{port}") as source:
            reading = await source.read_fleet()
    assert reading.error is not None and "unreachable" in reading.error
    assert "\n" not in reading.error and reading.rows == []


@pytest.mark.parametrize(
    "body",
    [
        "<html>not prometheus</html>",
        '{"status": "error", "error": "bad_data: parse error"}',
        '{"status": "success", "data": {"resultType": "matrix", "result": []}}',
        '{"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": 5}]}}',
    ],
)
async def test_a_prometheus_answering_garbage_is_one_line(body: str) -> None:
    async def answer(request: web.Request) -> web.Response:
        if request.path.endswith("/values"):
            return web.json_response({"status": "success", "data": ["vllm:num_requests_running"]})
        return web.Response(text=body, content_type="application/json")

    with ThreadedServer({"/api/v1/{tail:.*}": answer}) as server:
        async with PrometheusSource(server.url("")) as source:
            reading = await source.read_fleet()
    assert reading.error is not None and "\n" not in reading.error
    assert reading.rows == []


async def test_a_prometheus_answering_deep_json_is_said_to_be_too_deep() -> None:
    """Regression: reported as "nesting deeper than 0" (the source skips the depth walk, so
    only the decoder's own recursion limit refuses it)."""

    async def deep(_: web.Request) -> web.Response:
        return web.Response(text="[" * 100_000 + "]" * 100_000, content_type="application/json")

    with ThreadedServer({"/api/v1/{tail:.*}": deep}) as server:
        async with PrometheusSource(server.url("")) as source:
            reading = await source.read_fleet()
    assert reading.error is not None and "nesting too deep to decode" in reading.error
    assert "than 0" not in reading.error


def fleet_app(rig: Fleet, **kw: object) -> FleetApp:
    settings = config.load(rig.config)
    source = PrometheusSource(rig.prometheus)
    options = FleetOptions(rig.prometheus, source, gates=settings.gates, **kw)  # type: ignore[arg-type]
    return FleetApp(options)


def node(app: FleetApp) -> NodeSession:
    """The session of the node dashboard the fleet drilled into."""
    dash = app.dashboard()
    assert dash is not None, "no node dashboard open"
    return dash.session


def _close(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)


def _engine_equals_promql(rig: Fleet, app: FleetApp, instance: str) -> bool:
    """The drilled node's engine numbers equal the hand-written PromQL at its newest sample's
    time (Prometheus' own scrape time, which the monitor keeps)."""
    engines = node(app).monitor.serving_engines()
    if len(engines) != 1:
        return False
    view = engines[0]
    newest = view.history.series["running"].last()
    if newest is None:
        return False
    sel = f'{{instance="{instance}"}}'

    def one(expr: str) -> float | None:
        # 1 ms after the newest sample: Prometheus 2's ranges are closed, [t - 1m, t], and its
        # scrapes are exactly 1 s apart, so at t itself a sample 1m back would be inside; the
        # monitor's ranges are Prometheus 3's (t - 1m, t]. A millisecond later both hold the
        # same samples, and the extrapolated range is the same length.
        answer = rig.query(expr, newest.t + 0.001)
        return answer[0][1] if answer else None

    h = view.history
    pairs = [
        (view.snap.running, one(f"sum(vllm:num_requests_running{sel})")),
        (view.snap.waiting, one(f"sum(vllm:num_requests_waiting{sel})")),
        (view.snap.kv_cache_usage, one(f"max(vllm:kv_cache_usage_perc{sel})")),
        (
            h.quantile("ttft", 0.99),
            one(
                "histogram_quantile(0.99, sum by (le) "
                f"(rate(vllm:time_to_first_token_seconds_bucket{sel}[1m])))"
            ),
        ),
        (
            h.quantile("itl", 0.99),
            one(
                "histogram_quantile(0.99, sum by (le) "
                f"(rate(vllm:inter_token_latency_seconds_bucket{sel}[1m])))"
            ),
        ),
        (h.rate("generation_tokens_total"), one(f"sum(rate(vllm:generation_tokens_total{sel}[10s]))")),
        (h.per_minute("preemptions_total"), one(f"sum(rate(vllm:num_preemptions_total{sel}[1m])) * 60")),
    ]  # fmt: skip
    return all(_close(ours, theirs) for ours, theirs in pairs)


# Alone, this test waits for Prometheus to hold a minute and a half of the fleet.
@pytest.mark.timeout(300)
async def test_enter_opens_the_node_dashboard_fed_by_promql_steers_its_gate_esc_back(
    rig: Fleet,
) -> None:
    # The charts' backfill is seen only where Prometheus holds more than the first read's 65 s
    # (and its 15 s steps may start up to 15 s after the oldest sample).
    eventually_sync(
        lambda: rig.query("count_over_time(up[100s]) >= 90", time.time()), 120, message="history"
    )
    before = {n: httpx.get(f"{u}/admin/limits").json() for n, u in rig.gates.items()}
    app = fleet_app(rig)
    async with app.run_test(size=(160, 48)) as pilot:
        table = app.screen.query_one(FleetTable)
        await eventually(lambda: table.row_count == 3, 20, pause=pilot.pause)
        await pilot.press("slash", *"m-two", "enter")
        await eventually(lambda: table.row_count == 1, 30, pause=pilot.pause)
        await pilot.press("enter")
        dash = await eventually(
            lambda: app.screen if isinstance(app.screen, Dashboard) else None, 30, pause=pilot.pause
        )
        drilled_at = time.time()
        instance = rig.sims["b"].split("://")[1]
        assert dash.session is node(app) and node(app).options.hostname == "b"
        assert node(app).options.title_endpoint == f"{instance} (via Prometheus)"
        assert node(app).options.engine_poll is not None  # not --direct: Prometheus feeds it
        assert node(app).options.admin_url == rig.gates["b"]  # from [gates."127.0.0.1:*"]
        # Both engines of node b are one engine, as on its scraped page; its numbers are
        # what Prometheus answers for it.
        await eventually(
            lambda: _engine_equals_promql(rig, app, instance), 30, pause=pilot.pause,
            message="the node's numbers never equalled PromQL's",
        )  # fmt: skip
        panel = dash.query_one(EnginePanel)
        await eventually(lambda: "m-two" in panel.markup, 10, pause=pilot.pause)
        header = dash.query_one(HeaderBar)
        await eventually(lambda: "via Prometheus" in header.markup, 10, pause=pilot.pause)
        # The charts' hour: query_range fills it at once. The first read holds 65 s of samples,
        # and the quantiles of its first minute (less than a window behind them) are dropped.
        history = node(app).monitor.serving_engines()[0].history.series
        await eventually(
            lambda: history["running"].points()[0].t < drilled_at - 66, 20, pause=pilot.pause
        )
        assert any(p.t < drilled_at - 10 for p in history["ttft_p99"].points())
        # Node b's GPUs: its DCGM exporter's series in Prometheus, in the GPU panel.
        gpus = dash.query_one(GpuPanel)
        await eventually(lambda: "H100" in gpus.markup, 10, pause=pilot.pause)
        reading = node(app).monitor.gpus
        assert reading is not None and [g.index for g in reading.gpus] == [0, 1]
        assert reading.gpus[0].utilization_gpu == pytest.approx(0.87)
        assert reading.gpus[1].memory_used_bytes == 40298 * 1024 * 1024
        # A steering key on the drilled node changes its gate, audited, and not the other.
        await eventually(lambda: node(app).steering.can_steer, 10, pause=pilot.pause)
        await pilot.press("plus")
        v_b = before["b"]["version"]
        after_b = await eventually(
            lambda: (
                r if (r := httpx.get(f"{rig.gates['b']}/admin/limits").json())["version"] > v_b
                else None
            ),
            10, pause=pilot.pause,
        )  # fmt: skip
        chat = before["b"]["lanes"]["chat"]["max_inflight"]
        assert after_b["lanes"]["chat"]["max_inflight"] == chat + 1
        audit = httpx.get(f"{rig.gates['b']}/admin/audit", params={"limit": 1}).json()["entries"]
        assert audit[0]["version"] == after_b["version"], audit
        assert httpx.get(f"{rig.gates['a']}/admin/limits").json() == before["a"]
        # esc: the fleet table again, its filter kept; the node's workers stopped.
        await pilot.press("escape")
        await eventually(lambda: isinstance(app.screen, FleetScreen), 30, pause=pilot.pause)
        assert table.row_count == 1 and app.dashboard() is None
        assert not [w for w in app.workers if w.group == "poll" and w.is_running]
        await pilot.press("escape")  # clears the filter
        await eventually(lambda: table.row_count == 3, 30, pause=pilot.pause)


async def test_the_drill_down_is_the_node_dashboard_on_a_session_from_the_fleet(
    rig: Fleet,
) -> None:
    """The fleet's factory alone builds the node's session; the live shell shows it, and its
    keys steer that node's gate through the fleet's one guard."""
    settings = config.load(rig.config)
    fleet = FleetSession(
        FleetOptions(rig.prometheus, PrometheusSource(rig.prometheus), gates=settings.gates)
    )
    try:
        await fleet.read(None)
        row = next(r for r in fleet.state.rows if r.node == "b")
        session = fleet.node_session(row)
        assert session.guard is fleet.guard and session.options.admin_url == rig.gates["b"]
        assert [p.name for p in session.pollers] == [
            f"engine http://{row.instance}/metrics",
            "gate",
            "dcgm",
            "backfill",
        ]
        app = GpuwatchApp(session)
        async with app.run_test(size=(160, 48)) as pilot:
            dash = app.dashboard()
            assert dash is not None and dash.session is session
            panel, gpus = dash.query_one(EnginePanel), dash.query_one(GpuPanel)
            await eventually(lambda: "m-two" in panel.markup, 30, pause=pilot.pause)
            await eventually(lambda: "H100" in gpus.markup, 30, pause=pilot.pause)
            assert "via Prometheus" in dash.query_one(HeaderBar).markup
            await eventually(lambda: session.steering.can_steer, 20, pause=pilot.pause)
            before = httpx.get(f"{rig.gates['b']}/admin/limits").json()
            await pilot.press("plus")
            after = await eventually(
                lambda: (
                    r
                    if (r := httpx.get(f"{rig.gates['b']}/admin/limits").json())["version"]
                    > before["version"]
                    else None
                ),
                20,
                pause=pilot.pause,
            )
            chat = before["lanes"]["chat"]["max_inflight"]
            assert after["lanes"]["chat"]["max_inflight"] == chat + 1
    finally:
        await fleet.source.close()


async def test_enter_with_direct_scrapes_the_node_and_backfills_its_charts(rig: Fleet) -> None:
    # Two 15 s steps of query_range before the drill-down, at least.
    eventually_sync(
        lambda: rig.query("count_over_time(up[45s]) >= 40", time.time()), 60, message="history"
    )
    app = fleet_app(rig, direct=True)
    async with app.run_test(size=(160, 48)) as pilot:
        table = app.screen.query_one(FleetTable)
        await eventually(lambda: table.row_count == 3, 20, pause=pilot.pause)
        screen = app.screen
        assert isinstance(screen, FleetScreen)
        await pilot.press("s")  # sorted by the next column: kept when coming back
        sort = screen.sort
        row = next(r for r in app.fleet.state.rows if r.node == "c")  # no gate on node c
        await pilot.press("slash", *row.instance, "enter")
        await eventually(lambda: table.row_count == 1, 30, pause=pilot.pause)
        await pilot.press("enter")
        dash = await eventually(
            lambda: app.screen if isinstance(app.screen, Dashboard) else None, 30, pause=pilot.pause
        )
        drilled_at = time.time()
        assert node(app).options.engine_poll is None and node(app).options.urls == [
            f"http://{row.instance}/metrics"
        ]
        assert node(app).options.admin_url is None  # node c has no gate: no steering keys
        # No DCGM exporter on node c: GPUs N/A, said in one line.
        gpus = dash.query_one(GpuPanel)
        await eventually(lambda: "N/A" in gpus.markup, 10, pause=pilot.pause)
        panel = dash.query_one(EnginePanel)
        await eventually(lambda: "m-one" in panel.markup, 20, pause=pilot.pause)
        # Scraped points start at the drill-down; the ones before it come from query_range.
        history = node(app).monitor.serving_engines()[0].history.series
        await eventually(
            lambda: history["running"].points()[0].t < drilled_at - 3, 20, pause=pilot.pause
        )
        await pilot.press("escape")
        await eventually(lambda: isinstance(app.screen, FleetScreen), 30, pause=pilot.pause)
        assert screen.sort == sort != "health" and table.row_count == 1


async def test_fleet_screen_marked_rows_change_both_gates(rig: Fleet) -> None:
    before = {n: httpx.get(f"{u}/admin/limits").json() for n, u in rig.gates.items()}
    app = fleet_app(rig)
    async with app.run_test(size=(160, 48)) as pilot:
        screen = app.screen
        assert isinstance(screen, FleetScreen)
        table = screen.query_one(FleetTable)
        await eventually(lambda: table.row_count == 3, 20, pause=pilot.pause)
        screen.sort = "instance"
        gated = [r.key for r in app.fleet.state.rows if r.gate]
        assert len(gated) == 2
        screen.marked.update(gated)
        screen.paint()
        # Pressed together: one change of +2. The window is widened so that a loaded machine
        # delivering the keys slowly cannot split them (coalescing is what is tested).
        screen.coalesce_s = 2.0
        await pilot.press("plus", "plus")
        modal = await eventually(
            lambda: app.screen if isinstance(app.screen, ConfirmationModal) else None,
            10,
            pause=pilot.pause,
        )
        for node, limits in before.items():
            old = limits["lanes"]["chat"]["max_inflight"]
            v = limits["version"]
            assert any(
                line.startswith(f"{node} (")
                and f"v{v}: chat.max_inflight {old} -> {old + 2}" in line
                for line in modal.lines
            ), modal.lines
        await pilot.click("#apply")
        results = await eventually(
            lambda: app.screen if isinstance(app.screen, ResultsScreen) else None,
            10,
            pause=pilot.pause,
        )
        assert sorted(o.result for o in results.outcomes) == ["applied", "applied"]
    for node, url in rig.gates.items():
        after = httpx.get(f"{url}/admin/limits").json()
        assert (
            after["lanes"]["chat"]["max_inflight"]
            == before[node]["lanes"]["chat"]["max_inflight"] + 2
        )


async def test_fleet_screen_read_only_refuses_and_sends_nothing(rig: Fleet) -> None:
    before = [httpx.get(f"{u}/admin/limits").json()["version"] for u in rig.gates.values()]
    app = fleet_app(rig, read_only=True)
    async with app.run_test(size=(160, 48)) as pilot:
        screen = app.screen
        assert isinstance(screen, FleetScreen)
        await eventually(lambda: len(app.fleet.state.rows) == 3, 20, pause=pilot.pause)
        screen.marked.update(r.key for r in app.fleet.state.rows if r.gate)
        await pilot.press("plus")
        await eventually(
            lambda: any("read-only" in e.text for e in app.fleet.state.events),
            30,
            pause=pilot.pause,
        )
        assert not isinstance(app.screen, ConfirmationModal)
    after = [httpx.get(f"{u}/admin/limits").json()["version"] for u in rig.gates.values()]
    assert before == after


async def test_fleet_screen_survives_a_dead_prometheus() -> None:
    with refusing_port() as port:
        url = f"http://127.0.0.1:{port}"
        app = FleetApp(FleetOptions(url, PrometheusSource(url), interval_s=0.2))
        async with app.run_test(size=(80, 24)) as pilot:
            status = app.screen.query_one("#fleet-status", Static)
            await eventually(lambda: "unreachable" in str(status.render()), 10, pause=pilot.pause)
            await pilot.press("s", "m", "slash", "x", "escape")
            assert app.is_running
            errors = [e for e in app.fleet.state.events if "unreachable" in e.text]
            assert len(errors) == 1, "the same failure is one line, not one a second"


async def test_a_reading_that_ends_as_the_app_exits_paints_nothing() -> None:
    """Regression: under load a poll finished after the app's screens were gone, and painting
    it raised ScreenStackError from the worker: a traceback on exit (seen by
    bench/attack_sources.py with both cores busy)."""
    with refusing_port() as port:
        url = f"http://127.0.0.1:{port}"
        app = FleetApp(FleetOptions(url, PrometheusSource(url)))
        app.paint_fleet()  # no screen on the stack, as at exit
        await app.fleet.source.close()


def test_every_dialect_s_generated_query_is_valid_promql(rig: Fleet) -> None:
    """Prometheus itself parses the query of every signal for every stack the table knows."""
    for signal in (*promql.SIGNALS, *promql.CHART_SIGNALS):
        query = promql.signal_query(signal, promql.ENGINE_DIALECTS)
        assert query is not None
        r = httpx.get(f"{rig.prometheus}/api/v1/query", params={"query": query})
        assert r.status_code == 200 and r.json()["status"] == "success", (signal.key, r.text)
    for key in promql.GATE_SIGNALS:
        r = httpx.get(f"{rig.prometheus}/api/v1/query", params={"query": promql.gate_query(key)})
        assert r.json()["status"] == "success", r.text
    # A drill-down's raw samples (every stack's names) and its GPUs from DCGM.
    names = set().union(*(sample_names(d) for d in promql.ENGINE_DIALECTS))
    for query in (promql.raw_samples_query(names, "127.0.0.1:1", 65), dcgm.query("b")):
        r = httpx.get(f"{rig.prometheus}/api/v1/query", params={"query": query})
        assert r.status_code == 200 and r.json()["status"] == "success", (query, r.text)


async def test_the_fleet_at_a_past_instant_is_prometheus_answer_then(rig: Fleet) -> None:
    # A young Prometheus (this test alone) has no 1m rate yet: wait until it answers for every
    # instance at the instant the test will ask about.
    await eventually(lambda: len(rig.query(HAND_WRITTEN["gen_tps"], time.time() - 4.0)) == 3, 60)
    at = time.time() - 4.0
    app = fleet_app(rig, at=at)
    async with app.run_test(size=(160, 48)) as pilot:
        await eventually(lambda: len(app.fleet.state.rows) == 3, 20, pause=pilot.pause)
        title = app.screen.query_one("#fleet-title", Static)
        assert " RO " in str(title.render()) and "REPLAY " in str(title.render())
        reading = app.fleet.state.reading
        assert reading is not None and reading.at == at
        answer = {
            labels["instance"]: value for labels, value in rig.query(HAND_WRITTEN["gen_tps"], at)
        }
        for row in app.fleet.state.rows:
            assert row.values["gen_tps"] == pytest.approx(answer[row.instance], rel=1e-12)
        # The node dashboard at that instant: its newest sample is the last one before it.
        await pilot.press("enter")
        dash = await eventually(
            lambda: app.screen if isinstance(app.screen, Dashboard) else None, 30, pause=pilot.pause
        )
        await eventually(lambda: dash.session.monitor.serving_engines(), 20, pause=pilot.pause)
        (view,) = dash.session.monitor.serving_engines()
        newest = view.history.series["running"].last()
        assert newest is not None and at - 2.0 < newest.t <= at
        row = next(r for r in app.fleet.state.rows if r.node == dash.session.options.hostname)
        sel = f'{{instance="{row.instance}"}}'
        (running,) = rig.query(f"sum(vllm:num_requests_running{sel})", at)
        assert view.snap.running == running[1]


async def test_a_protected_prometheus_gets_the_token_from_a_file(tmp_path: Path) -> None:
    async def answer(request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != "Bearer s3cret":
            return web.json_response({"status": "error", "error": "unauthorized"}, status=401)
        if request.path.endswith("/values"):
            return web.json_response({"status": "success", "data": []})
        if request.path.endswith("/query"):
            return web.json_response(
                {"status": "success", "data": {"resultType": "vector", "result": []}}
            )
        return web.json_response({"status": "success", "data": {}})

    (tmp_path / "token").write_text("s3cret\n")
    with ThreadedServer({"/api/v1/{tail:.*}": answer}) as server:
        headers = auth_headers(str(tmp_path / "token"))
        async with PrometheusSource(server.url(""), headers) as source:
            assert (await source.read_fleet()).error is None
        async with PrometheusSource(server.url("")) as source:
            refused = await source.read_fleet()
    assert refused.error is not None and "HTTP 401: unauthorized" in refused.error
    basic = auth_headers("", "ops", str(tmp_path / "token"))
    assert basic == {"Authorization": "Basic b3BzOnMzY3JldA=="}
    with pytest.raises(ValueError, match="cannot read Prometheus token file"):
        auth_headers(str(tmp_path / "missing"))


def test_the_cli_refuses_a_missing_token_file_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(f'[prometheus]\ntoken_file = "{tmp_path}/nope"\n')
    proc = subprocess.run(
        [sys.executable, "-m", "gpuwatch", "snapshot", "--prometheus", "http://127.0.0.1:1",
         "--config", str(tmp_path / "c.toml")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "Prometheus token file" in proc.stderr


async def test_an_unreachable_or_unconfigured_gate_is_reported_not_fatal() -> None:
    with refusing_port() as port:
        targets = {"127.0.0.1:*": config.GateTarget(admin="http://{instance}")}
        gone = address_of(f"127.0.0.1:{port}", "x", targets)
        unknown = address_of("10.9.9.9:9000", "y", targets)
        change = FleetChange(Guard())
        read = await change.read([gone, unknown])
        outcomes = await change.apply(change.plan(read, [("chat", "max_inflight", lambda v: 1)]))
    assert [o.result for o in outcomes] == ["unreachable", "no admin"]
    assert unknown.admin is None and "unreachable" in outcomes[0].detail


async def test_down_targets_and_firing_alerts_are_events(rig: Fleet) -> None:
    async with PrometheusSource(rig.prometheus) as source:
        reading = await source.read_fleet()
    (down,) = reading.unhealthy
    assert down.job == "dead" and down.health == "down"
    assert "connection refused" in down.last_error  # Prometheus' own lastError
    assert [a.name for a in reading.alerts] == ["FleetTestAlwaysFiring"]
    state = FleetState()
    state.apply(reading)
    texts = [e.text for e in state.events]
    assert any(t.startswith(f"{down.instance} (dead) DOWN: ") for t in texts), texts
    assert "alert FleetTestAlwaysFiring firing (page)" in texts
    state.apply(reading)
    assert [e.text for e in state.events] == texts, "a standing problem is said once"


async def test_a_prometheus_answering_an_endless_or_trickling_body_is_one_line() -> None:
    """The body is read with a bound on its size and on its whole time (httpx's timeout is per
    read): an endless answer stops at the limit, a trickle at the timeout, each one line."""
    sent: list[int] = []  # bytes of body sent, per request

    async def endless(request: web.Request) -> web.StreamResponse:
        if request.path.endswith("/values"):
            return web.json_response({"status": "success", "data": ["vllm:num_requests_running"]})
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(b'{"status": "success", "data": "')
        chunk = b"x" * (1 << 20)
        mine = len(sent)
        sent.append(0)
        while sent[mine] < 4 * MAX_BYTES:  # the client must hang up long before this
            await response.write(chunk)
            sent[mine] += len(chunk)
        return response

    async def trickle(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        for _ in range(600):  # 60 s of a byte every 0.1 s: each read well within the timeout
            await response.write(b" ")
            await asyncio.sleep(0.1)
        return response

    with ThreadedServer({"/api/v1/{tail:.*}": endless}) as server:
        async with PrometheusSource(server.url("")) as source:
            reading = await asyncio.wait_for(source.read_fleet(), 60)
    assert reading.error is not None and "\n" not in reading.error
    assert "exceeds the 32 MiB limit" in reading.error, reading.error
    # It hung up at the limit, not at the end. What the server gets written past the limit is
    # the two loopback sockets' buffers (autotuned to several MiB each) and whatever it writes
    # while the client is scheduled out on a busy machine: up to 11 MiB over was seen.
    assert sent and max(sent) < 2 * MAX_BYTES

    started = time.monotonic()
    with ThreadedServer({"/api/v1/{tail:.*}": trickle}) as server:
        async with PrometheusSource(server.url(""), timeout_s=1.0) as source:
            reading = await asyncio.wait_for(source.read_fleet(), 60)
    assert reading.error is not None and "timed out" in reading.error, reading.error
    assert time.monotonic() - started < 10


async def test_a_gate_without_an_integer_version_is_not_patched_blind() -> None:
    """A fleet change is based on each gate's version; a gate that does not give one (an older
    or broken admin API) is reported, never sent a PATCH without If-Match."""
    patches: list[str | None] = []

    async def limits(_: web.Request) -> web.Response:
        body = {"version": "7", "paused": False, "lanes": {"chat": {"max_inflight": 4}}}
        return web.json_response(body)

    async def patch(request: web.Request) -> web.Response:
        patches.append(request.headers.get("If-Match"))
        return web.json_response({"version": 8, "paused": False, "lanes": {}})

    app = web.Application()
    app.router.add_get("/admin/limits", limits)
    app.router.add_patch("/admin/limits", patch)
    served = await serve(app, "127.0.0.1", 0)
    try:
        change = FleetChange(Guard(), actor="fleet-test")
        gate = address_of("10.0.0.9:8000", "n9", {"*": GateTarget(admin=served.url)})
        planned = change.plan(
            await change.read([gate]), [("chat", "max_inflight", lambda v: v + 1)]
        )
        outcomes = await change.apply(planned)
    finally:
        await served.close()
    assert patches == []
    assert outcomes[0].result != "applied" and "version" in outcomes[0].detail, outcomes[0]


async def test_a_token_file_gone_before_the_patch_is_that_gate_s_outcome(
    rig: Fleet, tmp_path: Path
) -> None:
    """Each gate answers for itself: a token file that cannot be read at apply time is that
    gate's "refused", and the other gate's change still comes back as applied."""
    token = tmp_path / "token"
    token.write_text("s3cret-token-for-the-test\n")
    token.chmod(0o600)
    gates = gates_of(rig)
    gates[1] = replace(gates[1], token_file=str(token))
    change = FleetChange(Guard(), actor="fleet-test")
    planned = change.plan(await change.read(gates), [("chat", "max_queue", lambda v: v + 1)])
    assert [p.problem for p in planned] == [None, None]
    token.unlink()
    outcomes = await change.apply(planned)
    assert outcomes[0].result == "applied"
    assert outcomes[1].result == "refused" and "cannot read" in outcomes[1].detail, outcomes[1]


async def test_a_gate_answering_deeply_nested_json_is_that_gate_s_problem() -> None:
    """A gate's answer is parsed with safejson's bounds: 100,000 nested arrays are one gate
    that cannot take part, not a RecursionError out of the fleet change."""

    async def deep(_: web.Request) -> web.Response:
        return web.Response(text="[" * 100_000 + "]" * 100_000, content_type="application/json")

    app = web.Application()
    app.router.add_get("/admin/limits", deep)
    served = await serve(app, "127.0.0.1", 0)
    try:
        change = FleetChange(Guard(), actor="fleet-test")
        gate = address_of("10.0.0.9:8000", "n9", {"*": GateTarget(admin=served.url)})
        [planned] = await change.read([gate])
    finally:
        await served.close()
    assert planned.problem is not None, planned
