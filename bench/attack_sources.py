"""Hostile strings from sources, before (a baseline commit) and after (this checkout): does any
control character or escape sequence reach the terminal?

A local /metrics page, a fake GPU source (/sim/gpu), a Prometheus API and a fake gate's admin
API answer with labels,
names and process names holding terminal escapes (a window title, a screen clear, a colour, a
bidi override). Each command runs as a real process on the tree under test; its output (pipes:
Rich adds no styling of its own there) is searched for control characters other than a newline.
The two TUIs (dashboard, fleet screen) are run headless (Textual's ``run_test``) and every line
every widget draws is searched the same way.

Run: python bench/attack_sources.py [--baseline 8ebca5e] [--skip-before] [--show]
Prints one line per (surface, side): how many control characters reached the output (or
CRASHED: the program ended with a traceback).
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from aiohttp import web
from appthread import serve_in_thread
from baseline import run_on, trees

EVIL = "\x1b]0;PWNED\x07\x1b[2J\x1b[31mFAKE\u202egnp.exe\x1b[0m"


def page() -> str:
    label = EVIL.replace("\\", "\\\\").replace('"', '\\"')
    return (
        "# TYPE vllm:num_requests_running gauge\n"
        f'vllm:num_requests_running{{model_name="{label}"}} 3\n'
        f'vllm:num_requests_waiting{{model_name="{label}"}} 1\n'
        f'vllm:generation_tokens_total{{model_name="{label}"}} 10\n'
    )


def gpu_state() -> dict:
    proc = {"pid": 4242, "name": EVIL, "used_memory": 1 << 30}
    gpu = {
        "index": 0,
        "name": EVIL,
        "uuid": "GPU-" + EVIL,
        "memory_total": 80 << 30,
        "memory_used": 10 << 30,
        "utilization_gpu": 50,
        "utilization_memory": 20,
        "temperature": 60,
        "power_usage_w": 300,
        "power_limit_w": 700,
        "processes": [proc],
    }
    return {"gpus": [gpu]}


async def metrics(_: web.Request) -> web.Response:
    return web.Response(text=page())


async def sim_gpu(_: web.Request) -> web.Response:
    return web.json_response(gpu_state())


async def prom_query(request: web.Request) -> web.Response:
    labels = {"instance": EVIL, "node": EVIL, "model_name": EVIL, "gpuwatch_dialect": EVIL}
    now = time.time()
    result = [{"metric": labels, "value": [now, "1"]}]
    return web.json_response(
        {"status": "success", "data": {"resultType": "vector", "result": result}}
    )


async def prom_names(_: web.Request) -> web.Response:
    return web.json_response({"status": "success", "data": ["vllm:num_requests_running"]})


async def prom_targets(_: web.Request) -> web.Response:
    target = {"health": "down", "labels": {"instance": EVIL, "job": EVIL}, "lastError": EVIL}
    return web.json_response({"status": "success", "data": {"activeTargets": [target]}})


async def prom_alerts(_: web.Request) -> web.Response:
    labels = {"alertname": EVIL, "instance": EVIL, "severity": EVIL}
    alert = {"state": "firing", "labels": labels}
    return web.json_response({"status": "success", "data": {"alerts": [alert]}})


async def gate_limits(request: web.Request) -> web.Response:
    if request.method == "PATCH":
        return web.json_response({"error": {"message": EVIL}}, status=400)
    lane = {"max_inflight": 4, "max_queue": 8, "queue_timeout_s": 30.0,
            "max_prompt_tokens": None, "max_output_tokens": None, "output_tokens_policy": EVIL}  # fmt: skip
    return web.json_response({"version": 1, "paused": False, "lanes": {EVIL: lane},
                              "tenants": {EVIL: {}}})  # fmt: skip


async def prom_other(request: web.Request) -> web.Response:
    return web.json_response({"status": "error", "error": EVIL})


@contextlib.contextmanager
def server() -> Iterator[str]:
    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/sim/gpu", sim_gpu)
    app.router.add_get("/api/v1/query", prom_query)
    app.router.add_get("/api/v1/label/__name__/values", prom_names)
    app.router.add_get("/api/v1/targets", prom_targets)
    app.router.add_get("/api/v1/alerts", prom_alerts)
    app.router.add_get("/api/v1/{tail:.*}", prom_other)
    app.router.add_route("*", "/admin/limits", gate_limits)
    with serve_in_thread(app) as url:
        yield url


def controls(text: str) -> int:
    """Characters a terminal acts on (C0 but newline, DEL, C1) or that reorder text (bidi)."""
    bidi = set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f")
    return sum(
        1 for c in text if (ord(c) < 32 and c != "\n") or 0x7F <= ord(c) <= 0x9F or c in bidi
    )


def cli_cases(url: str) -> dict[str, list[str]]:
    gpu = ["--fake-gpu-from", f"{url}/sim/gpu"]
    return {
        "snapshot --metrics (table)": ["snapshot", "--metrics", f"{url}/metrics", *gpu],
        "snapshot --prometheus (table)": ["snapshot", "--prometheus", url],
        "watch --metrics --count 2": [
            "watch",
            "--metrics",
            f"{url}/metrics",
            *gpu,
            "--count",
            "2",
            "--interval",
            "0.3",
        ],
        "watch --prometheus --count 1": ["watch", "--prometheus", url, "--count", "1"],
        "limits --admin (a fake gate)": ["limits", "--admin", url],
        "limits set (refused by it)": ["limits", "set", "chat.max_inflight=2", "--admin", url],
    }


TUI_CHILD = r"""
import asyncio, sys
from textual.geometry import Region
from gpuwatch.sources.nvml import FakeNvml, NvmlReader, SimGpuSource
url, which = sys.argv[1], sys.argv[2]

def drawn(app):
    out = []
    for w in app.screen.walk_children(with_self=True):
        if not w.display or not w.size.area:
            continue
        for strip in w.render_lines(Region(0, 0, w.size.width, w.size.height)):
            out.append("".join(seg.text for seg in strip))
    return "\n".join(out)

async def main():
    if which == "fleet":
        from gpuwatch.sources.prometheus import PrometheusSource
        from gpuwatch.session.fleet import FleetOptions
        from gpuwatch.tui.fleet_app import FleetApp
        app = FleetApp(FleetOptions(url, PrometheusSource(url), interval_s=0.3))
    else:
        from gpuwatch.session.node import DashboardOptions, live_session
        from gpuwatch.tui.app import GpuwatchApp
        nvml = NvmlReader(FakeNvml(SimGpuSource(url + "/sim/gpu")))
        app = GpuwatchApp(
            live_session(DashboardOptions(urls=[url + "/metrics"], interval_s=0.3, nvml=nvml))
        )
    async with app.run_test(size=(200, 50)) as pilot:
        for _ in range(30):
            await pilot.pause(0.1)
        text = drawn(app)
    print(repr(text))

asyncio.run(main())
"""


def run(tree: Path, argv: list[str], **env: str) -> tuple[int, str, str]:
    out = run_on(tree, argv, **env)
    return out.returncode, out.stdout, out.stderr


def run_cli(tree: Path, args: list[str]) -> str:
    _, out, err = run(tree, ["-m", "gpuwatch", *args], COLUMNS="200", NO_COLOR="1")
    return out + err


def run_tui(tree: Path, url: str, which: str) -> str:
    code, out, err = run(tree, ["-c", TUI_CHILD, url, which])
    if code != 0:
        return "CRASHED " + err[-300:]
    text: str = eval(out.strip().splitlines()[-1])
    return text


def main() -> None:
    show = "--show" in sys.argv
    if show:
        sys.argv.remove("--show")
    with contextlib.ExitStack() as stack:
        sides = trees(stack, __doc__.split("\n\n")[0])
        url = stack.enter_context(server())
        print("control characters reaching the output (0 = clean)")
        surfaces: list[tuple[str, object]] = [(k, v) for k, v in cli_cases(url).items()]
        surfaces += [
            ("dashboard TUI (drawn lines)", "dashboard"),
            ("fleet TUI (drawn lines)", "fleet"),
        ]
        for title, what in surfaces:
            for side, tree in sides.items():
                if isinstance(what, list):
                    text = run_cli(tree, what)
                else:
                    text = run_tui(tree, url, str(what))
                said = "CRASHED" if text.startswith("CRASHED") else f"{controls(text):5}"
                print(f"{title:32} {side:6} {said}", flush=True)
                if show:
                    print(json.dumps(text)[:2000])


if __name__ == "__main__":
    main()
