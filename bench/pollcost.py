"""What polling costs, source by source, without Textual: the floor under bench/tui.py's
``--floor`` (which adds an idle Textual app and the dashboard's tick).

One simulator (one engine) behind the demo's gate, under light load; for each set of sources
a fresh process of the tree runs the dashboard's own pollers (``live_session``'s, at 1 s, the
fake NVML of bench/tui.py with 8 GPUs) for ``--seconds`` after a 3 s warm-up and prints its
whole-process CPU time (user + sys) over that window as % of one core. ``--tree DIR`` runs
another checkout's pollers in the same run (before); ``--repeat`` windows, the median printed.
It also prints what one GET costs through httpx's client, the pollers' way (``get_stream``: a
request built once, on asyncio's transports) and on a bare asyncio socket, each on one
keep-alive connection (the HTTP floor of each poll).

Run: python bench/pollcost.py [--seconds 15] [--repeat 3] [--tree DIR]
Goal (issue 32): polling <= 0.35% of one core for one engine and a gate.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from baseline import REPO

TOKEN = "bench-token-0123456789"
# Each set: the pollers whose names contain one of these ("tick": the dashboard's 1 s tick).
SETS = ("engine", "gate", "nvml", "host", "tick", "engine,gate", "engine,gate,nvml,host,tick")


async def child(url: str, gate: str, sources: list[str], seconds: float) -> float:
    """Run the chosen pollers; the process's CPU % over ``seconds`` after a warm-up."""
    from tui import fake_gpus

    from gpuwatch.session.node import DashboardOptions, live_session
    from gpuwatch.sources.nvml import FakeNvml, NvmlReader

    options = DashboardOptions(
        urls=[f"{url}/metrics"],
        interval_s=1.0,
        admin_url=gate,
        admin_token=TOKEN,
        nvml=NvmlReader(FakeNvml(fake_gpus(8))),
    )
    session = live_session(options)
    polls = [p for p in session.pollers if any(s in p.name for s in sources)]
    tasks = [asyncio.create_task(p.run()) for p in polls]

    async def tick() -> None:  # what the dashboard's _tick does besides painting
        while True:
            await asyncio.sleep(1.0)
            session.monitor.check_stale()
            if session.alerts is not None:
                session.alerts.tick()
            session.monitor.evaluate()

    if "tick" in sources:
        tasks.append(asyncio.create_task(tick()))
    await asyncio.sleep(3.0)
    cpu, wall = time.process_time(), time.monotonic()
    await asyncio.sleep(seconds)
    used = (time.process_time() - cpu) / (time.monotonic() - wall) * 100
    for task in tasks:
        task.cancel()
    return used


async def get_cost(url: str, n: int = 300) -> tuple[float, float, float]:
    """CPU ms per GET of ``url``: through httpx's client (``stream``), the pollers' way
    (``get_stream``: a request built once, sent to the transport, on asyncio's transports),
    and on a bare socket."""
    from gpuwatch.httpclient import async_client, get_stream, read_bounded

    async with async_client() as client:
        for _ in range(20):
            await client.get(url)
        started = time.process_time()
        for _ in range(n):
            async with client.stream("GET", url) as response:
                await response.aread()
        via_httpx = (time.process_time() - started) / n * 1000
        started = time.process_time()
        for _ in range(n):
            async with get_stream(client, url) as response:
                await read_bounded(response, 1 << 24)
        via_pollers = (time.process_time() - started) / n * 1000
    host, port = url.split("//")[1].split("/")[0].split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    request = f"GET /{url.split('/', 3)[3]} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    started = time.process_time()
    for _ in range(n):
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )
        await reader.readexactly(length)
    bare = (time.process_time() - started) / n * 1000
    writer.close()
    return via_httpx, via_pollers, bare


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tree", type=Path, help="another checkout, measured too (before)")
    parser.add_argument("--role", default="bench")
    parser.add_argument("--url")
    parser.add_argument("--gate")
    parser.add_argument("--sources")
    args = parser.parse_args()
    if args.role == "child":
        used = asyncio.run(child(args.url, args.gate, args.sources.split(","), args.seconds))
        print(f"{used:.4f}")
        return
    from gpuwatch.demo import DEMO_GATE_TOML, DemoStack, _spawn

    stack = DemoStack()
    load = None
    try:
        stack.sim_url = _spawn(stack, ["sim", "--listen", "127.0.0.1:0", "--time-scale", "1",
                                       "--engines", "1"], "the simulator")  # fmt: skip
        tmp = Path(tempfile.mkdtemp())
        (tmp / "token").write_text(TOKEN)
        (tmp / "gate.toml").write_text(DEMO_GATE_TOML)
        gate = _spawn(stack, ["gate", "--upstream", stack.sim_url, "--listen", "127.0.0.1:0",
                              "--config", str(tmp / "gate.toml"), "--admin-token-file",
                              str(tmp / "token"), "--state-file", str(tmp / "state.json")],
                      "the gate")  # fmt: skip
        load = subprocess.Popen([sys.executable, "-m", "gpuwatch", "load", "--url", gate,
                                 "--duration", "100000", "--rate", "2", "--quiet",
                                 "--prompt-tokens", "256:1024", "--output-tokens", "128"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        trees = ([("before", args.tree.resolve())] if args.tree else []) + [("after", REPO)]
        cpu: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.repeat):
            for name, tree in trees:
                for sources in SETS:
                    out = subprocess.run(
                        [sys.executable, __file__, "--role", "child", "--url", stack.sim_url,
                         "--gate", gate, "--sources", sources, "--seconds", str(args.seconds)],
                        env={**os.environ, "PYTHONPATH": f"{tree}:{REPO / 'bench'}"},
                        cwd=tree, capture_output=True, text=True, check=True,
                    )  # fmt: skip
                    cpu.setdefault((name, sources), []).append(float(out.stdout.split()[-1]))
        via_httpx, via_pollers, bare = asyncio.run(get_cost(f"{stack.sim_url}/metrics"))
    finally:
        if load is not None:
            load.terminate()
            load.wait(5)
        stack.stop()
    print(f"pollers without Textual, one engine (sim) behind a gate at 2 req/s, 8 fake GPUs, 1 s "
          f"interval; whole-process CPU over {args.seconds:g} s, median of {args.repeat}:")  # fmt: skip
    print(f"{'sources':30}" + "".join(f"{name + ' %, median (runs)':>34}" for name, _ in trees))
    for sources in SETS:
        cells = []
        for name, _ in trees:
            runs = cpu[(name, sources)]
            shown = " ".join(f"{v:.2f}" for v in runs)
            cells.append(f"{statistics.median(runs):>16.3f} ({shown})".rjust(34))
        print(f"{sources:30}" + "".join(cells))
    print(f"one GET of the sim's /metrics, CPU per request: httpx's stream {via_httpx:.3f} ms, "
          f"the pollers' get_stream {via_pollers:.3f} ms, a bare asyncio socket {bare:.3f} ms "
          "(keep-alive all)")  # fmt: skip
    print(
        "goal: engine,gate <= 0.35% of one core"
        + (f"   (before = {args.tree})" if args.tree else "")
    )


if __name__ == "__main__":
    main()
