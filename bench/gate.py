"""The gate's overhead, measured side by side: direct to upstream, through the gate before
(``--baseline``, default main before issue 19's gate work, from a temporary git worktree) and
after (this checkout), through a bare aiohttp proxy (the floor: aiohttp's own server and client
with nothing of the gate's, on uvloop like the gate) and through nginx.

Run: python bench/gate.py [--seconds 10] [--repeat 1] [--baseline REV | none] [--caps]
     (needs Debian's nginx and wrk)

``--caps`` gives the chat lane a prompt cap, an output cap and a token budget none of the
requests reach, so every request is read and judged (the typed request, ``gate/request.py``)
on top of what the gate does for a lane without caps.

- short requests: wrk, 64 connections, small JSON POSTs: requests/s, and the gate's CPU per
  request (its process CPU time / requests);
- added latency at a fixed 200 requests/s (an aiohttp client on a schedule): p50 / p99;
- streamed requests (32 chunks each, 64 concurrent): wrk requests/s, and added TTFT p50 / p99
  at a fixed rate.
The upstream is a fast aiohttp stub in its own process. With ``--repeat N`` every figure is the
median of N rounds (each round measures every target once, in turn).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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
from baseline import BEFORE, REPO, checkout

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


def run_floor(port: int, upstream: int) -> None:
    """The least an aiohttp proxy does: a pooled client, the body read, the headers copied,
    the answer relayed (whole when short, else chunk by chunk). No lanes, caps or metrics."""
    import uvloop
    from aiohttp import ClientSession, TCPConnector, web

    hop = {"host", "content-length", "transfer-encoding", "connection", "keep-alive"}
    base = f"http://127.0.0.1:{upstream}"

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in hop}
        session = request.app["session"]
        async with session.request(
            request.method, base + request.raw_path, headers=headers, data=body
        ) as up:
            out = {k: v for k, v in up.headers.items() if k.lower() not in hop}
            if up.content_length is not None:
                return web.Response(body=await up.read(), status=up.status, headers=out)
            resp = web.StreamResponse(status=up.status, headers=out)
            await resp.prepare(request)
            async for chunk in up.content.iter_any():
                await resp.write(chunk)
            await resp.write_eof()
            return resp

    async def session(app: web.Application):  # type: ignore[no-untyped-def]
        app["session"] = ClientSession(connector=TCPConnector(limit=0), auto_decompress=False)
        yield
        await app["session"].close()

    import logging

    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)  # wrk cuts its streams
    uvloop.install()
    app = web.Application()
    app.cleanup_ctx.append(session)
    app.router.add_route("*", "/{tail:.*}", handle)
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
    parser.add_argument("--upstream", type=int)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--baseline", default=BEFORE, help="a git revision, or none")
    parser.add_argument("--caps", action="store_true", help="caps and a budget on the chat lane")
    args = parser.parse_args()
    if args.role == "upstream":
        run_upstream(args.port)
        return
    if args.role == "floor":
        run_floor(args.port, args.upstream)
        return
    for tool in ("nginx", "wrk"):
        if not shutil.which(tool) and not Path(f"/usr/sbin/{tool}").exists():
            raise SystemExit(f"bench/gate.py needs {tool} (apt-get install nginx-light wrk)")
    up, nginx_port, floor_port = free_port(), free_port(), free_port()
    procs = []
    tmp = Path(tempfile.mkdtemp(prefix="gwbench-"))
    with contextlib.ExitStack() as stack:
        trees = {"gate": REPO}
        if args.baseline != "none":
            trees = {"before": stack.enter_context(checkout(args.baseline)), **trees}
        try:
            procs.append(
                subprocess.Popen(
                    [sys.executable, __file__, "--role", "upstream", "--port", str(up)]
                )
            )
            config = tmp / "gate.toml"
            lane = "[lanes.chat]\nmax_inflight = 4096\nmax_queue = 4096\n"
            if args.caps:
                lane += (
                    "max_prompt_tokens = 100000\nmax_output_tokens = 4096\n"
                    "max_inflight_tokens = 100000000\n"
                )
            config.write_text(lane)
            gates, ports = {}, {}
            for name, tree in trees.items():
                ports[name] = free_port()
                gates[name] = subprocess.Popen(
                    [sys.executable, "-m", "gpuwatch", "gate", "--upstream", f"http://127.0.0.1:{up}",
                     "--listen", f"127.0.0.1:{ports[name]}", "--config", str(config),
                     "--state-file", str(tmp / f"state-{name}.json")],
                    stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(tree)}, cwd=str(tree),
                )  # fmt: skip
                procs.append(gates[name])
            floor = subprocess.Popen(
                [sys.executable, __file__, "--role", "floor", "--port", str(floor_port), "--upstream", str(up)]
            )  # fmt: skip
            procs.append(floor)
            (tmp / "nginx.conf").write_text(
                NGINX_CONF.format(dir=tmp, upstream=up, port=nginx_port)
            )
            nginx_bin = shutil.which("nginx") or "/usr/sbin/nginx"
            procs.append(
                subprocess.Popen(
                    [nginx_bin, "-c", str(tmp / "nginx.conf"), "-e", str(tmp / "error.log")]
                )
            )
            for port in (up, nginx_port, floor_port, *ports.values()):
                wait_port(port)
            targets = {
                "direct": f"http://127.0.0.1:{up}/v1/completions",
                **{n: f"http://127.0.0.1:{p}/v1/completions" for n, p in ports.items()},
                "floor": f"http://127.0.0.1:{floor_port}/v1/completions",
                "nginx": f"http://127.0.0.1:{nginx_port}/v1/completions",
            }
            cpu_of = {n: psutil.Process(p.pid) for n, p in {**gates, "floor": floor}.items()}
            short = '{"prompt":"hi","max_tokens":8}'
            streamed = '{"prompt":"hi","max_tokens":32,"stream":true}'
            rounds: list[dict] = []
            for _ in range(args.repeat):
                rps_short, rps_stream, cpu_us = {}, {}, {}
                for name, url in targets.items():
                    wrk(url, 2, short)  # warm-up
                    before = {n: p.cpu_times() for n, p in cpu_of.items()}
                    rps_short[name] = wrk(url, args.seconds, short)
                    if name in cpu_of:
                        after = cpu_of[name].cpu_times()
                        used = (after.user + after.system) - (
                            before[name].user + before[name].system
                        )
                        cpu_us[name] = used / (rps_short[name] * args.seconds) * 1e6
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
                rounds.append(
                    {
                        "short": rps_short,
                        "stream": rps_stream,
                        "cpu": cpu_us,
                        "latency": latency,
                        "ttft": ttft,
                    }
                )
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
            shutil.rmtree(tmp, ignore_errors=True)
    report(rounds, list(targets), list(trees), args.baseline)


def report(rounds: list[dict], names: list[str], gates: list[str], baseline: str) -> None:
    def med(kind: str, name: str) -> float:
        return statistics.median(r[kind][name] for r in rounds)

    print(f"{len(rounds)} round(s), medians; 'gate' is this checkout, 'before' is {baseline}, "
          "'floor' a bare aiohttp proxy")  # fmt: skip
    print(f"{'':30}" + "".join(f"{n:>10}" for n in names) + "   gate/nginx  goal")
    for kind, label, goal in (("short", "short requests/s (64 conn)", ">= 35%"),
                              ("stream", "streamed requests/s (32 ch)", ">= 90%")):  # fmt: skip
        cells = "".join(f"{med(kind, n):>10.0f}" for n in names)
        print(f"{label:30}{cells}   {med(kind, 'gate') / med(kind, 'nginx'):>9.0%}   {goal}")
    print(f"{'CPU per short request':30}" + "".join(
        f"{med('cpu', n):>8.0f}us" if n in gates or n == "floor" else f"{'':>10}" for n in names) + "   (goal <= 250 us)")  # fmt: skip
    for kind, label, goal in (("latency", "latency p50 at 200 req/s", 0.5),
                              ("ttft", "streamed TTFT p50 at 100/s", 2.0)):  # fmt: skip
        p50 = {
            n: statistics.median(statistics.median(r[kind][n]) for r in rounds)
            for n in names
            if n != "nginx"
        }
        p99 = {
            n: statistics.median(pct(r[kind][n], 0.99) for r in rounds)
            for n in names
            if n != "nginx"
        }
        print(
            f"{label:30}"
            + "".join(f"{p50[n] * 1000:>8.2f}ms" if n in p50 else f"{'':>10}" for n in names)
        )
        print(f"{'  added p50 over direct':30}" + "".join(
            f"{(p50[n] - p50['direct']) * 1000:>8.2f}ms" if n in p50 and n != "direct" else f"{'':>10}" for n in names)
            + f"   (goal: gate added p50 <= {goal:g} ms)")  # fmt: skip
        print(f"{'  added p99 over direct':30}" + "".join(
            f"{(p99[n] - p99['direct']) * 1000:>8.2f}ms" if n in p99 and n != "direct" else f"{'':>10}" for n in names))  # fmt: skip


if __name__ == "__main__":
    main()
