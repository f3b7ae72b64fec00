"""The sources, polled into a ``Monitor``: what the dashboard and ``gpuwatch watch`` share.

Each source polls on its own schedule, and its next poll is scheduled when the last one ends,
so a slow source never overlaps itself or delays another. A failing poll becomes an event; it
never ends the loop. The dashboard runs these loops in Textual workers, ``watch`` in plain
asyncio tasks.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from gpuwatch.config import ScrapeSettings
from gpuwatch.control.gate import GateClient, GateError
from gpuwatch.httpclient import async_client
from gpuwatch.monitor.state import Monitor
from gpuwatch.sources import host as host_source
from gpuwatch.sources.nvml import NvmlReader
from gpuwatch.sources.scrape import ParseCache, scrape

HOST_INTERVAL_S = 2.0


async def every(
    interval_s: float, poll: Callable[[], Awaitable[Any]], name: str, monitor: Monitor
) -> None:
    """Call ``poll`` forever, ``interval_s`` apart from start to start (never overlapping)."""
    while True:
        started = time.monotonic()
        try:
            await poll()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug in one source must not take the others down
            monitor.event("bad", f"{name}: {type(exc).__name__}: {exc}")
        await asyncio.sleep(max(0.05, interval_s - (time.monotonic() - started)))


async def poll_endpoint(
    monitor: Monitor, url: str, interval_s: float, limits: ScrapeSettings | None = None
) -> None:
    """One /metrics endpoint, bounded by ``[scrape]``'s timeouts, size and engine count. Its
    parse cache keeps the last page's parsed blocks, so each scrape parses only what changed."""
    bounds = limits or ScrapeSettings()
    cache = ParseCache()  # this endpoint's own; its scrapes never overlap
    async with async_client(bounds.connect_timeout_s, bounds.timeout_s) as client:

        async def once() -> None:
            monitor.apply_scrape(
                await scrape(
                    client, url, bounds.max_bytes, bounds.timeout_s, bounds.max_engines, cache
                )
            )

        await every(interval_s, once, url, monitor)


async def poll_host(monitor: Monitor) -> None:
    host_source.prime_cpu()

    async def once() -> None:
        monitor.apply_host(await asyncio.to_thread(host_source.read_host))

    await every(HOST_INTERVAL_S, once, "host", monitor)


async def poll_gpus(monitor: Monitor, reader: NvmlReader, interval_s: float) -> None:
    """NVML in a thread (its calls block), its reading applied on the loop."""

    async def once() -> None:
        try:
            reading = await asyncio.to_thread(reader.read)
        except Exception as exc:  # never let NVML end the program
            monitor.event("bad", f"NVML: {type(exc).__name__}: {exc}")
        else:
            monitor.apply_gpus(reading)

    await every(interval_s, once, "NVML", monitor)


async def poll_gate(monitor: Monitor, client: GateClient, interval_s: float) -> None:
    """The gate's limits and per-lane status, read through its admin API."""

    async def once() -> None:
        try:
            slo = monitor.health.slo
            limits, status = await asyncio.gather(
                client.limits(), client.status(slo.get("ttft_p99_s"), slo.get("itl_p99_s"))
            )
        except GateError as exc:
            monitor.apply_gate(None, None, str(exc))
        else:
            monitor.apply_gate(limits, status)

    await every(interval_s, once, "gate", monitor)
