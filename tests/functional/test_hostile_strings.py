"""Every string from a source is cleaned before it is printed or drawn: labels, names and
errors holding terminal escapes (a window title, a screen clear, a colour, a bidi override)
from a /metrics page, a GPU source and a Prometheus reach neither the terminal nor Textual's
markup parser (real HTTP, real processes for the CLI, the TUIs headless)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from aiohttp import web
from textual.app import App
from textual.geometry import Region

from gpuwatch.session.fleet import FleetOptions
from gpuwatch.session.node import DashboardOptions, live_session
from gpuwatch.sources.nvml import FakeNvml, NvmlReader, SimGpuSource
from gpuwatch.sources.prometheus import PrometheusSource
from gpuwatch.tui.app import GpuwatchApp
from gpuwatch.tui.fleet_app import FleetApp
from tests.functional.servers import ThreadedServer
from tests.helpers import eventually

EVIL = "\x1b]0;PWNED\x07\x1b[2J\x1b[31mFAKE\u202egnp.exe\x1b[0m"
BIDI = set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def controls(text: str) -> list[str]:
    """What a terminal would act on: C0 controls but a newline, DEL and C1, bidi overrides."""
    return [c for c in text if (ord(c) < 32 and c != "\n") or 0x7F <= ord(c) <= 0x9F or c in BIDI]


async def metrics(_: web.Request) -> web.Response:
    label = EVIL.replace("\\", "\\\\").replace('"', '\\"')
    return web.Response(
        text="".join(
            f'vllm:{name}{{model_name="{label}"}} 3\n'
            for name in ("num_requests_running", "num_requests_waiting")
        )
    )


async def sim_gpu(_: web.Request) -> web.Response:
    gpu = {"index": 0, "name": EVIL, "uuid": EVIL, "memory_total": 80 << 30,
           "memory_used": 10 << 30, "utilization_gpu": 50}  # fmt: skip
    # A GPU in MIG mode whose MIG device's profile (read from its name) is hostile too.
    mig = {"profile": EVIL, "gpu_instance_id": 1, "compute_instance_id": 0,
           "memory_total": 40 << 30, "memory_used": 1 << 30}  # fmt: skip
    return web.json_response({"gpus": [gpu, {**gpu, "index": 1, "mig": [mig]}]})


async def query(_: web.Request) -> web.Response:
    labels = {"instance": EVIL, "node": EVIL, "model_name": EVIL, "gpuwatch_dialect": EVIL}
    result = [{"metric": labels, "value": [time.time(), "1"]}]
    data = {"resultType": "vector", "result": result}
    return web.json_response({"status": "success", "data": data})


async def names(_: web.Request) -> web.Response:
    return web.json_response({"status": "success", "data": ["vllm:num_requests_running"]})


async def targets(_: web.Request) -> web.Response:
    down = {"health": "down", "labels": {"instance": EVIL, "job": EVIL}, "lastError": EVIL}
    return web.json_response({"status": "success", "data": {"activeTargets": [down]}})


async def alerts(_: web.Request) -> web.Response:
    return web.json_response({"status": "success", "data": {"alerts": []}})


async def gate_limits(request: web.Request) -> web.Response:
    """Whatever answers at an --admin URL: lanes, tenants and refusals named with escapes."""
    if request.method == "PATCH":
        return web.json_response({"error": {"message": EVIL}}, status=400)
    lane = {"max_inflight": 4, "max_queue": 8, "queue_timeout_s": 30.0, "max_prompt_tokens": None,
            "max_output_tokens": None, "output_tokens_policy": EVIL}  # fmt: skip
    body = {"version": 1, "paused": False, "lanes": {EVIL: lane}, "tenants": {EVIL: {}}}
    return web.json_response(body)


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    routes = {"/metrics": metrics, "/sim/gpu": sim_gpu, "/api/v1/query": query,
              "/api/v1/label/__name__/values": names, "/api/v1/targets": targets,
              "/api/v1/alerts": alerts, "/admin/limits": gate_limits}  # fmt: skip
    with ThreadedServer(routes) as server:
        yield server.url("")


def gw(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "gpuwatch", *args], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "COLUMNS": "240"})  # fmt: skip
    return proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["snapshot", "--prometheus", "{url}"],
        ["watch", "--prometheus", "{url}", "--count", "1"],
        ["watch", "--metrics", "{url}/metrics", "--no-gpu", "--count", "1", "--interval", "0.2"],
        ["snapshot", "--metrics", "{url}/metrics", "--fake-gpu-from", "{url}/sim/gpu"],
        ["limits", "--admin", "{url}"],
        ["limits", "set", "chat.max_inflight=2", "--admin", "{url}"],
    ],
    ids=[
        "snapshot-prometheus",
        "watch-prometheus",
        "watch-metrics",
        "snapshot-metrics",
        "limits",
        "limits-refused",
    ],
)
def test_the_cli_prints_hostile_labels_visibly_and_drives_nothing(
    url: str, args: list[str]
) -> None:
    """Regression: the fleet table (snapshot/watch --prometheus) and watch's engine column
    printed labels raw: the window retitled, the screen cleared, fake rows drawn."""
    out = gw(*(a.format(url=url) for a in args))
    assert "PWNED" in out, out  # the label is shown, escaped
    assert controls(out) == [], out


def drawn(app: App[object]) -> str:
    """Every line every visible widget of the screen draws."""
    lines = []
    for widget in app.screen.walk_children(with_self=True):
        if widget.display and widget.size.area:
            region = Region(0, 0, widget.size.width, widget.size.height)
            lines += ["".join(s.text for s in strip) for strip in widget.render_lines(region)]
    return "\n".join(lines)


async def test_the_dashboard_draws_hostile_names_visibly_and_stays_up(url: str) -> None:
    """Regression: a GPU named with an escape sequence ended the dashboard (MarkupError: its
    ``[2J`` read as a tag); control characters went to the terminal as they were."""
    nvml = NvmlReader(FakeNvml(SimGpuSource(f"{url}/sim/gpu")))
    app = GpuwatchApp(
        live_session(DashboardOptions(urls=[f"{url}/metrics"], interval_s=0.2, nvml=nvml))
    )
    async with app.run_test(size=(200, 50)) as pilot:
        await eventually(lambda: drawn(app).count("PWNED") >= 2, 20, pause=pilot.pause)
        assert controls(drawn(app)) == []
        await pilot.press("g")  # the GPU screen: names, UUIDs, the MIG device's row
        await eventually(lambda: drawn(app).count("PWNED") >= 5, 20, pause=pilot.pause)
        assert controls(drawn(app)) == []


async def test_the_fleet_screen_draws_hostile_labels_visibly(url: str) -> None:
    """Regression: the fleet table's dialect column was drawn raw."""
    app = FleetApp(FleetOptions(url, PrometheusSource(url), interval_s=0.2))
    async with app.run_test(size=(240, 40)) as pilot:
        await eventually(lambda: len(app.fleet.state.rows) == 1, 20, pause=pilot.pause)
        await eventually(lambda: drawn(app).count("PWNED") >= 4, 20, pause=pilot.pause)
        assert controls(drawn(app)) == []
