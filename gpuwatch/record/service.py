"""``gpuwatch record``: the dashboard's sources polled into a recording, with no screen.

The same poll loops as the dashboard, and the same once-a-second tick (stale sources, the
badge), so the recording holds what a dashboard would have been fed. It ends on SIGINT /
SIGTERM (the last rows committed), or when the file cannot be written (a line saying why).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import IO, Any

from gpuwatch import polling
from gpuwatch.alerts.node import node_alerts
from gpuwatch.config import AlertSettings, ScrapeSettings
from gpuwatch.control.gate import GateClient
from gpuwatch.control.guard import Guard
from gpuwatch.monitor.state import Monitor
from gpuwatch.record.recorder import Recorder
from gpuwatch.sources.nvml import NvmlReader

TICK_S = 1.0


@dataclass
class RecordOptions:
    urls: list[str]
    interval_s: float = 1.0
    admin_url: str | None = None
    admin_token: str | None = None
    slo: dict[str, float | None] = field(default_factory=dict)
    nvml: NvmlReader | None = None
    scrape: ScrapeSettings = field(default_factory=ScrapeSettings)
    duration_s: float | None = None  # for tests and benchmarks: stop after this long
    alerts: AlertSettings = field(default_factory=AlertSettings)


async def record(options: RecordOptions, recorder: Recorder, err: IO[str] = sys.stderr) -> bool:
    """Poll and record until told to stop; False when recording stopped on its own."""
    o = options
    m = Monitor(o.urls, o.interval_s, o.slo, o.admin_url)
    recorder.attach(m, host=socket.gethostname(), max_engines=o.scrape.max_engines)
    # The SLO's burn-rate alerts, each change an event in the recording and a notification
    # (linking to this recording) where [alerts] names receivers: a node-level alerter.
    alerts = node_alerts(
        m,
        o.alerts,
        report=lambda text: print(f"gpuwatch record: {text}", file=err, flush=True),
        recording=os.path.abspath(recorder.path),
    )
    jobs: list[Coroutine[Any, Any, None]] = [
        polling.poll_endpoint(m, url, o.interval_s, o.scrape) for url in o.urls
    ]
    if o.nvml is not None:
        jobs.append(polling.poll_gpus(m, o.nvml, o.interval_s))
    jobs.append(polling.poll_host(m))
    client = None
    if o.admin_url:
        # Read-only: recording never changes anything, and says so to the one guard.
        client = GateClient(o.admin_url, o.admin_token, Guard(read_only=True))
        jobs.append(polling.poll_gate(m, client, o.interval_s))
    jobs.append(alerts.run())
    tasks = [asyncio.create_task(job) for job in jobs]
    writer = asyncio.create_task(recorder.run(o.admin_url, o.admin_token))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    started = loop.time()
    try:
        while not stop.is_set() and not writer.done():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), TICK_S)
            m.check_stale()
            alerts.tick()  # before the badge: a replay moved to the tick shows its budget
            m.evaluate()
            if o.duration_s is not None and loop.time() - started >= o.duration_s:
                break
    finally:
        await alerts.close()
        for task in [*tasks, writer]:
            task.cancel()
        await asyncio.gather(*tasks, writer, return_exceptions=True)
        if client is not None:
            await client.close()
        recorder.close()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)
        if o.nvml is not None:
            o.nvml.close()
    if recorder.stopped:
        print(f"gpuwatch record: {recorder.path}: stopped: {recorder.stopped}", file=err)
        return False
    return True
