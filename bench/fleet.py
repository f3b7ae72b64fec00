"""The fleet screen's own cost: whole-process CPU of `gpuwatch --prometheus URL` at 1 s refresh,
160x48 in tmux, against a synthetic Prometheus API (aiohttp) that answers for N engines (a
quarter of the nodes with a gate), for N = 8, 64, 256; and the queries it sent per refresh.

The synthetic server answers each signal's query with N series whose values move every call,
so the table really changes every second. CPU is the dashboard process's user + system time
(psutil) over a steady window after a warm-up: robust to a busy machine, unlike wall-clock
sampling.

Run: python bench/fleet.py [--seconds 30] [--engines 8,64,256]   (needs tmux)
Goals: <= 3% of one core at 64 engines; one query per signal per refresh whatever N.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from aiohttp import web

from gpuwatch.aioserve import serve
from gpuwatch.sources import promql

# Which signal a query asks for, by a metric name only that signal's query holds.
MARKERS = {
    "num_requests_running": "running",
    "num_requests_waiting": "waiting",
    "kv_cache_usage_perc": "kv",
    "time_to_first_token": "ttft",
    "inter_token_latency": "itl",
    "generation_tokens_total": "gen",
    "num_preemptions_total": "preempt",
    "gpuwatch_gate_inflight": "gate",
    "gpuwatch_gate_queued": "gate",
    "gpuwatch_gate_rejected_total": "gate",
}


class SyntheticPrometheus:
    def __init__(self, engines: int) -> None:
        self.engines = engines
        self.queries = 0
        self.rng = random.Random(1)

    def _series(self, kind: str, at: float) -> list[dict[str, object]]:
        out: list[dict[str, object]] = []
        gates = kind == "gate"
        count = self.engines // 4 if gates else self.engines
        for i in range(count):
            labels = {"instance": f"10.0.{i // 250}.{i % 250}:8000", "node": f"node-{i:03d}"}
            if gates:
                labels["instance"] = labels["instance"].replace(":8000", ":9000")
            else:
                labels |= {"model_name": f"model-{i % 4}", promql.DIALECT_LABEL: "vllm"}
            value = self.rng.random() * (1.0 if kind in ("kv", "ttft", "itl") else 40)
            out.append({"metric": labels, "value": [at, f"{value:.6g}"]})
        return out

    async def query(self, request: web.Request) -> web.Response:
        self.queries += 1
        expr = request.query.get("query", "")
        at = float(request.query.get("time", time.time()))
        kind = next((k for marker, k in MARKERS.items() if marker in expr), "")
        data = {"resultType": "vector", "result": self._series(kind, at) if kind else []}
        return web.json_response({"status": "success", "data": data})

    async def names(self, _: web.Request) -> web.Response:
        names = ["vllm:num_requests_running", "vllm:time_to_first_token_seconds_bucket",
                 "gpuwatch_gate_inflight"]  # fmt: skip
        return web.json_response({"status": "success", "data": names})

    async def targets(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "success", "data": {"activeTargets": []}})

    async def alerts(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "success", "data": {"alerts": []}})

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/api/v1/query", self.query)
        app.router.add_get("/api/v1/label/__name__/values", self.names)
        app.router.add_get("/api/v1/targets", self.targets)
        app.router.add_get("/api/v1/alerts", self.alerts)
        return app


async def measure(engines: int, seconds: float) -> tuple[float, float]:
    """(percent of one core, queries per refresh) for ``engines`` engines."""
    fake = SyntheticPrometheus(engines)
    served = await serve(fake.app(), "127.0.0.1", 0)
    session = f"gwfleet{os.getpid()}-{engines}"
    tmp = Path(tempfile.mkdtemp())
    pid_file = tmp / "pid"
    cmd = f"echo $$ > {pid_file}; exec {sys.executable} -m gpuwatch --prometheus {served.url}"
    # The user's config must not change what is measured: XDG points at an empty directory.
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp)}
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "48", cmd],
        check=True, env=env,
    )  # fmt: skip
    try:
        end = time.monotonic() + 20
        while not pid_file.exists() or fake.queries < 10:
            if time.monotonic() > end:
                raise SystemExit("the fleet screen never asked Prometheus")
            await asyncio.sleep(0.05)
        proc = psutil.Process(int(pid_file.read_text()))
        await asyncio.sleep(5)  # warm: first frames drawn, discovery done
        before, q0 = proc.cpu_times(), fake.queries
        t0 = time.monotonic()
        await asyncio.sleep(seconds)
        after, q1 = proc.cpu_times(), fake.queries
        elapsed = time.monotonic() - t0
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        await served.close()
        shutil.rmtree(tmp, ignore_errors=True)
    cpu = (after.user + after.system) - (before.user + before.system)
    return cpu / elapsed * 100, (q1 - q0) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--engines", default="8,64,256")
    args = parser.parse_args()
    if not shutil.which("tmux"):
        raise SystemExit("bench/fleet.py needs tmux")
    per_refresh = len(promql.SIGNALS) + len(promql.GATE_SIGNALS)
    for n in (int(x) for x in args.engines.split(",")):
        cpu, qps = asyncio.run(measure(n, args.seconds))
        print(f"N={n:4d} engines: {cpu:5.2f}% of one core over {args.seconds:.0f} s at 160x48, "
              f"{qps:.1f} instant queries/s (the {per_refresh} signals once a refresh)")  # fmt: skip
    print("goal: <= 3% of one core at N=64; queries per refresh independent of N")


if __name__ == "__main__":
    main()
