"""The gate's overhead, measured side by side: direct to upstream, through the gate, through nginx.

Run: python bench/gate.py [--seconds 10]   (needs Debian's nginx and wrk)

- short requests: wrk, 64 connections, small JSON POSTs: requests/s, and the gate's CPU per
  request (its process CPU time / requests);
- added latency at a fixed 200 requests/s (an aiohttp client on a schedule): p50 / p99;
- streamed requests (32 chunks each, 64 concurrent): wrk requests/s, and added TTFT p50 / p99
  at a fixed rate.
The upstream is a fast aiohttp stub in its own process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

STREAM_CHUNKS = 32


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_upstream(port: int) -> None:
    import logging

    from aiohttp import web

    # wrk cuts its connections at the end of a run; the stub need not log each one.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)

    chunk = b'data: {"choices":[{"index":0,"text":" tok"}]}\n\n'

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if b'"stream": true' not in body and b'"stream":true' not in body:
            return web.Response(
                body=b'{"id":"x","choices":[{"text":"ok"}]}', content_type="application/json"
            )
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for _ in range(STREAM_CHUNKS):
            await resp.write(chunk)
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/completions", handle)
    app.router.add_post("/v1/chat/completions", handle)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


def wait_port(port: int, timeout: float = 10) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listening on {port}")


NGINX_CONF = """
worker_processes 1;
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {dir}/body;
  proxy_temp_path {dir}/proxy;
  fastcgi_temp_path {dir}/fastcgi;
  uwsgi_temp_path {dir}/uwsgi;
  scgi_temp_path {dir}/scgi;
  upstream up {{ server 127.0.0.1:{upstream}; keepalive 128; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }}
  }}
}}
"""

WRK_LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{body}'
"""


def wrk(url: str, seconds: int, body: str, connections: int = 64) -> float:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as fh:
        fh.write(WRK_LUA.format(body=body))
        script = fh.name
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "-s", script, url],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    os.unlink(script)
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        raise RuntimeError(f"wrk saw {errors.group(1)} errors from {url}")
    return float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))


async def fixed_rate(url: str, rate: float, seconds: float, stream: bool) -> list[float]:
    """Latency (or TTFT when streaming) of requests sent on a fixed schedule."""
    import aiohttp

    body = json.dumps({"prompt": "hi", "max_tokens": 8, "stream": stream})
    out: list[float] = []

    async def one(session: aiohttp.ClientSession) -> None:
        t0 = time.perf_counter()
        async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
            if stream:
                await r.content.readany()
                out.append(time.perf_counter() - t0)
                await r.read()
            else:
                await r.read()
                out.append(time.perf_counter() - t0)

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        for _ in range(20):  # warm the pools
            await one(session)
        out.clear()
        tasks = []
        start = time.perf_counter()
        n = int(rate * seconds)
        for i in range(n):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(session)))
        await asyncio.gather(*tasks)
    return out


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--role", default="bench")
    parser.add_argument("--port", type=int)
    args = parser.parse_args()
    if args.role == "upstream":
        run_upstream(args.port)
        return
    for tool in ("nginx", "wrk"):
        if not shutil.which(tool) and not Path(f"/usr/sbin/{tool}").exists():
            raise SystemExit(f"bench/gate.py needs {tool} (apt-get install nginx-light wrk)")
    up, gate_port, nginx_port = free_port(), free_port(), free_port()
    procs = []
    tmp = Path(tempfile.mkdtemp(prefix="gwbench-"))
    try:
        procs.append(
            subprocess.Popen([sys.executable, __file__, "--role", "upstream", "--port", str(up)])
        )
        config = tmp / "gate.toml"
        config.write_text("[lanes.chat]\nmax_inflight = 4096\nmax_queue = 4096\n")
        gate = subprocess.Popen(
            [sys.executable, "-m", "gpuwatch", "gate", "--upstream", f"http://127.0.0.1:{up}",
             "--listen", f"127.0.0.1:{gate_port}", "--config", str(config), "--state-file", str(tmp / "state.json")],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        procs.append(gate)
        (tmp / "nginx.conf").write_text(NGINX_CONF.format(dir=tmp, upstream=up, port=nginx_port))
        nginx_bin = shutil.which("nginx") or "/usr/sbin/nginx"
        procs.append(
            subprocess.Popen(
                [nginx_bin, "-c", str(tmp / "nginx.conf"), "-e", str(tmp / "error.log")]
            )
        )
        for port in (up, gate_port, nginx_port):
            wait_port(port)
        targets = {
            "direct": f"http://127.0.0.1:{up}/v1/completions",
            "gate": f"http://127.0.0.1:{gate_port}/v1/completions",
            "nginx": f"http://127.0.0.1:{nginx_port}/v1/completions",
        }
        gate_proc = psutil.Process(gate.pid)
        short = '{"prompt":"hi","max_tokens":8}'
        streamed = '{"prompt":"hi","max_tokens":32,"stream":true}'
        rps_short, rps_stream, cpu_us = {}, {}, 0.0
        for name, url in targets.items():
            wrk(url, 2, short)  # warm-up
            before = gate_proc.cpu_times()
            rps_short[name] = wrk(url, args.seconds, short)
            after = gate_proc.cpu_times()
            if name == "gate":
                used = (after.user + after.system) - (before.user + before.system)
                cpu_us = used / (rps_short[name] * args.seconds) * 1e6
            rps_stream[name] = wrk(url, args.seconds, streamed)
        latency = {
            n: asyncio.run(fixed_rate(u, 200, args.seconds, False))
            for n, u in targets.items()
            if n != "nginx"
        }
        ttft = {
            n: asyncio.run(fixed_rate(u, 100, args.seconds, True))
            for n, u in targets.items()
            if n != "nginx"
        }
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"{'':28}{'direct':>10}{'gate':>10}{'nginx':>10}   gate/nginx  goal")
    print(f"{'short requests/s (64 conn)':28}{rps_short['direct']:>10.0f}{rps_short['gate']:>10.0f}"
          f"{rps_short['nginx']:>10.0f}   {rps_short['gate'] / rps_short['nginx']:>9.0%}   >= 35%")  # fmt: skip
    print(f"{'streamed requests/s (32 ch)':28}{rps_stream['direct']:>10.0f}{rps_stream['gate']:>10.0f}"
          f"{rps_stream['nginx']:>10.0f}   {rps_stream['gate'] / rps_stream['nginx']:>9.0%}   >= 90%")  # fmt: skip
    print(f"gate CPU per short request: {cpu_us:.0f} us (goal <= 250 us)")
    for label, data, goal in (
        ("latency at 200 req/s", latency, "p50 < 1 ms"),
        ("streamed TTFT at 100 req/s", ttft, "p50 < 2 ms"),
    ):
        d50, g50 = statistics.median(data["direct"]), statistics.median(data["gate"])
        d99, g99 = pct(data["direct"], 0.99), pct(data["gate"], 0.99)
        print(f"{label}: direct p50 {d50 * 1000:.2f} ms p99 {d99 * 1000:.2f} ms; gate p50 "
              f"{g50 * 1000:.2f} ms p99 {g99 * 1000:.2f} ms; added p50 {(g50 - d50) * 1000:.2f} ms "
              f"p99 {(g99 - d99) * 1000:.2f} ms (goal: added {goal})")  # fmt: skip


if __name__ == "__main__":
    main()
