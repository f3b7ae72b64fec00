"""Soak the gate: steady load plus churn for N minutes, then check nothing leaked.

Through a gate (its own process, so its memory is its own) in front of ``gpuwatch sim``:
- ``gpuwatch load`` (the library) at a steady rate over the chat and embed lanes;
- 24 churning clients with client timeouts of 0.05-0.6 s, and aborts of raw connections
  mid-request (queued, waiting or streaming), each request under a fairness id drawn from a
  million (so per-tenant state that outlived its requests would show);
- a limit change every second (chat max_inflight / max_queue / queue_timeout_s, a pause now
  and then, an in-flight cap set on or taken off one of 16 of those tenants);
- the upstream simulator restarted twice (at 1/3 and 2/3 of the run).

At the end it prints whether the gate is back at in-flight 0 / queued 0, whether every lane
still admits, the gate's RSS minute by minute, and what the gate logged (goal: no traceback).

The leak goal: RSS within 10% from minute 6 to the end. The gate keeps per-second blocks for
its longest window (5 minutes, ``gate/latency.py`` WINDOWS_S), so its memory is meant to grow
until that window is full and stay flat after; minute 6 leaves a minute's margin. A run
shorter than 7 minutes is judged from minute 1 instead and says the window was still filling
(growth there is expected, so a short run only shows gross leaks).

``--tracemalloc DIR`` runs the gate under ``bench/traced_gate.py`` and has it write a
tracemalloc snapshot to DIR every minute from minute 5, for finding what grows (compare two with
``python bench/traced_gate.py --compare DIR/snap-6.pickle DIR/snap-9.pickle``). The simulator has no /v1/embeddings: embed requests are admitted
by the gate and answered 404 upstream, which is all this needs.

Run: python bench/soak.py [--minutes 10] [--tracemalloc DIR]     Not a CI step.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import aiohttp
import psutil

from gpuwatch.gate.classes import FAIRNESS_HEADER
from gpuwatch.load import LoadRun, LoadSpec
from gpuwatch.load.spec import Dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root, for tests/
from tests.helpers import stop_process

sys.path.insert(0, str(Path(__file__).parent))
from gate import free_port, wait_port

LANE_PATHS = {
    "chat": ("/v1/completions", {"prompt": "soak", "max_tokens": 4}),
    "embed": ("/v1/embeddings", {"input": "soak"}),
    "image": ("/v1/images/generations", {"prompt": "soak"}),
    "default": ("/v1/models", None),
}


def start_sim(port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuwatch", "sim", "--listen", f"127.0.0.1:{port}",
         "--time-scale", "20"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    wait_port(port)
    return proc


async def churn(url: str, stop_at: float, rng: random.Random, counts: dict[str, int]) -> None:
    """One impatient client: short timeouts, and sometimes a raw connection dropped."""
    host, port = url.removeprefix("http://").split(":")
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < stop_at:
            body = {"prompt": "churn " * rng.randint(1, 50), "max_tokens": rng.randint(4, 64),
                    "stream": rng.random() < 0.7}  # fmt: skip
            tenant = f"churn-{rng.randrange(1_000_000)}"
            if rng.random() < 0.3:
                with contextlib.suppress(OSError, asyncio.TimeoutError):
                    _, writer = await asyncio.open_connection(host, int(port))
                    data = json.dumps(body).encode()
                    writer.write(
                        b"POST /v1/completions HTTP/1.1\r\nHost: g\r\n"
                        + f"{FAIRNESS_HEADER}: {tenant}\r\n".encode()
                        + f"Content-Length: {len(data)}\r\n\r\n".encode()
                        + data
                    )
                    await asyncio.sleep(rng.uniform(0, 0.4))
                    writer.transport.abort()
                    counts["aborted"] += 1
                continue
            timeout = aiohttp.ClientTimeout(total=rng.uniform(0.05, 0.6))
            try:
                async with s.post(f"{url}/v1/completions", json=body, timeout=timeout,
                                  headers={FAIRNESS_HEADER: tenant}) as r:  # fmt: skip
                    await r.read()
                    counts[str(r.status)] = counts.get(str(r.status), 0) + 1
            except asyncio.TimeoutError:
                counts["timed_out"] += 1
            except aiohttp.ClientError:
                counts["client_error"] += 1


async def change_limits(url: str, stop_at: float, rng: random.Random) -> int:
    changes = 0
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < stop_at:
            patch: dict[str, Any] = {
                "paused": rng.random() < 0.05,
                "lanes": {"chat": {"max_inflight": rng.randint(1, 8),
                                   "max_queue": rng.randint(2, 64),
                                   "queue_timeout_s": rng.uniform(0.2, 5)}},
                # Tenants the churn draws (churn-0..15 among a million): rarely busy, but
                # their limits are part of every audit entry.
                "tenants": {f"churn-{rng.randrange(16)}":
                            {"max_inflight": rng.randint(1, 4)} if rng.random() < 0.5 else None},
            }  # fmt: skip
            async with s.patch(f"{url}/admin/limits", json=patch) as r:
                assert r.status == 200, await r.text()
                changes += 1
            await asyncio.sleep(1)
    return changes


async def restart_sim_twice(
    port: int, holder: list[subprocess.Popen[bytes]], minutes: float, started: float
) -> None:
    for fraction in (1 / 3, 2 / 3):
        await asyncio.sleep(max(0.0, started + fraction * minutes * 60 - time.monotonic()))
        await asyncio.to_thread(stop_process, holder[0])
        await asyncio.sleep(1)  # a second with nothing listening: 502s, then recovery
        holder[0] = await asyncio.to_thread(start_sim, port)
        print(f"  [{time.monotonic() - started:6.0f} s] upstream restarted", flush=True)


async def sample_rss(
    gate: psutil.Process, stop_at: float, started: float, samples: list[tuple[float, int]],
    snapshots: bool,
) -> None:  # fmt: skip
    """RSS every 5 s, a line each minute (and a tracemalloc snapshot, when traced)."""
    minute = 0
    while time.monotonic() < stop_at:
        now = time.monotonic() - started
        samples.append((now, gate.memory_info().rss))
        if now >= (minute + 1) * 60:
            minute += 1
            print(f"  [{now:6.0f} s] gate RSS {samples[-1][1] / 2**20:.1f} MiB", flush=True)
            if snapshots and minute >= STEADY_MINUTE - 1:  # each one stalls the gate a moment
                os.kill(gate.pid, signal.SIGUSR1)
        await asyncio.sleep(5)


async def final_checks(url: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as s:
        async with s.patch(
            f"{url}/admin/limits",
            json={
                "paused": False,
                "lanes": {"chat": {"max_inflight": 8, "max_queue": 64, "queue_timeout_s": 30}},
            },
        ) as r:
            assert r.status == 200
        end = time.monotonic() + 30
        while True:
            async with s.get(f"{url}/admin/status") as r:
                status = await r.json()
            busy = {n: (v["inflight"], v["queued"]) for n, v in status["lanes"].items()
                    if v["inflight"] or v["queued"]}  # fmt: skip
            if not busy or time.monotonic() > end:
                break
            await asyncio.sleep(0.1)
        admits = {}
        for lane, (path, body) in LANE_PATHS.items():
            before = status["lanes"][lane]["admitted_total"]
            if body is None:
                async with s.get(f"{url}{path}") as r:
                    await r.read()
            else:
                async with s.post(f"{url}{path}", json=body) as r:
                    await r.read()
            async with s.get(f"{url}/admin/status") as r:
                after = (await r.json())["lanes"][lane]["admitted_total"]
            admits[lane] = after > before
        async with s.get(f"{url}/metrics") as r:
            metrics = {
                line.split()[0]: line.split()[1]
                for line in (await r.text()).splitlines()
                if line.startswith(("gpuwatch_gate_upstream", "gpuwatch_gate_streams_broken"))
                and "_created" not in line
            }
    return {"busy_at_end": busy, "admits": admits, "metrics": metrics}


# The longest window the gate keeps (gate/latency.py WINDOWS_S: 5 minutes) is full from
# minute 5; judging from minute 6 leaves a minute's margin.
STEADY_MINUTE = 6


async def soak(minutes: float, trace_dir: str | None) -> int:
    with TemporaryDirectory() as tmp, open(f"{tmp}/gate.log", "w") as gate_log:
        sim_port, gate_port = free_port(), free_port()
        holder = [start_sim(sim_port)]
        command = [sys.executable, "-m", "gpuwatch"]
        env = dict(os.environ)
        if trace_dir:
            command = [sys.executable, str(Path(__file__).parent / "traced_gate.py")]
            env["GPUWATCH_TRACE_DIR"] = str(Path(trace_dir).resolve())
            Path(trace_dir).mkdir(parents=True, exist_ok=True)
        gate_proc = subprocess.Popen(
            [*command, "gate", "--upstream", f"http://127.0.0.1:{sim_port}",
             "--listen", f"127.0.0.1:{gate_port}", "--state-file", f"{tmp}/state.json"],
            stdout=subprocess.DEVNULL, stderr=gate_log, env=env,
        )  # fmt: skip
        wait_port(gate_port)
        url = f"http://127.0.0.1:{gate_port}"
        started = time.monotonic()
        stop_at = started + minutes * 60
        rng = random.Random(7)
        counts: dict[str, int] = {"aborted": 0, "timed_out": 0, "client_error": 0}
        rss: list[tuple[float, int]] = []
        spec = LoadSpec(url=url, rate=15, duration_s=minutes * 60, api="chat",
                        prompt_tokens=Dist("uniform", 16, 256), output_tokens=Dist("uniform", 8, 64),
                        lane_mix={"chat": 0.8, "embed": 0.2}, seed=3)  # fmt: skip
        run = LoadRun(spec)
        try:
            load = asyncio.create_task(run.run())
            changing = asyncio.create_task(change_limits(url, stop_at, rng))
            others = [
                asyncio.create_task(restart_sim_twice(sim_port, holder, minutes, started)),
                asyncio.create_task(sample_rss(psutil.Process(gate_proc.pid), stop_at, started, rss,
                                               trace_dir is not None)),
                *(asyncio.create_task(churn(url, stop_at, random.Random(i), counts))
                  for i in range(24)),
            ]  # fmt: skip
            await asyncio.gather(load, changing, *others)
            results, changes = load.result(), changing.result()
            checks = await final_checks(url)
            rss_end = psutil.Process(gate_proc.pid).memory_info().rss
        finally:
            gate_proc.terminate()
            gate_proc.wait(10)
            stop_process(holder[0])
        log = Path(f"{tmp}/gate.log").read_text()
    statuses: dict[str, int] = {}
    for r in results:
        statuses[str(r.status)] = statuses.get(str(r.status), 0) + 1
    # Judged once the longest window is full, when the run is long enough to see it flat.
    base_minute = STEADY_MINUTE if minutes >= STEADY_MINUTE + 1 else 1
    at_base = min(rss, key=lambda s: abs(s[0] - 60 * base_minute))[1]
    growth = (rss_end - at_base) / at_base
    print(f"soak: {minutes:g} min, {len(results)} load requests {statuses}, churn {counts}, "
          f"{changes} limit changes, upstream restarted twice")  # fmt: skip
    print(f"gate at the end: in flight / queued per busy lane {checks['busy_at_end'] or 'none'} "
          f"(goal: none)")  # fmt: skip
    print(f"every lane admits: {checks['admits']}")
    by_minute = [min(rss, key=lambda s: abs(s[0] - 60 * m))[1] for m in range(1, int(minutes) + 1)]
    print("gate RSS by minute (MiB): " + " ".join(f"{b / 2**20:.1f}" for b in by_minute)
          + f", end {rss_end / 2**20:.1f}")  # fmt: skip
    window = ("the 5-minute window full" if base_minute == STEADY_MINUTE
              else "the 5-minute window still filling: growth expected, only gross leaks show")  # fmt: skip
    print(f"gate RSS: {at_base / 2**20:.1f} MiB at minute {base_minute} ({window}), "
          f"{rss_end / 2**20:.1f} MiB at the end ({growth:+.1%}; goal within 10%)")  # fmt: skip
    print(f"gate metrics: {checks['metrics']}")
    print(f"gate log: {len(log.splitlines())} lines, {log.count('Traceback')} tracebacks (goal 0)")
    kinds: dict[str, int] = {}
    for line in log.splitlines():
        if line and not line.startswith((" ", "Traceback")):
            kind = line[:60]
            kinds[kind] = kinds.get(kind, 0) + 1
    for kind, n in sorted(kinds.items(), key=lambda kv: -kv[1])[:8]:
        print(f"  {n:6}  {kind}")
    if "Traceback" in log:
        first = log[log.index("Traceback") :]
        print("first traceback:\n" + "\n".join(first.splitlines()[:30]))
    ok = (
        not checks["busy_at_end"]
        and all(checks["admits"].values())
        and abs(growth) <= 0.10
        and "Traceback" not in log
    )
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--tracemalloc", metavar="DIR", help="snapshot the gate each minute")
    args = parser.parse_args()
    sys.exit(asyncio.run(soak(args.minutes, args.tracemalloc)))


if __name__ == "__main__":
    main()
