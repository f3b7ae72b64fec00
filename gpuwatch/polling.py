"""The sources, polled into a ``Monitor``: what the dashboard and ``gpuwatch watch`` share.

Each source polls on its own schedule, and its next poll is scheduled when the last one ends,
so a slow source never overlaps itself or delays another. A failing poll becomes an event; it
never ends the loop. The dashboard runs these loops in Textual workers, ``watch`` in plain
asyncio tasks.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

from gpuwatch.adminapi import GateStatus, Limits
from gpuwatch.config import ScrapeSettings
from gpuwatch.control.gate import GateClient, GateError
from gpuwatch.httpclient import async_client
from gpuwatch.model import GpuReading
from gpuwatch.monitor.state import Monitor
from gpuwatch.sources import dcgm
from gpuwatch.sources import host as host_source
from gpuwatch.sources.nvml import NvmlReader
from gpuwatch.sources.prometheus import PrometheusError, PrometheusSource
from gpuwatch.sources.promnode import History, NodeSamples
from gpuwatch.sources.scrape import ParseCache, scrape

HOST_INTERVAL_S = 2.0
# The gate's limits are read when its status says they moved, and at least this often.
LIMITS_EVERY_S = 10.0


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
    """The gate's per-lane status every interval, and its limits when the status says they
    moved (``limits_moved``), else every ``LIMITS_EVERY_S``: the limits document changes a
    few times an hour, and reading it each second was a third of the gate's polling cost."""
    read_at = -math.inf

    async def once() -> None:
        nonlocal read_at
        try:
            slo = monitor.health.slo
            status = await client.status(slo.get("ttft_p99_s"), slo.get("itl_p99_s"))
            limits = None
            shown = monitor.gate.limits if monitor.gate is not None else None
            now = time.monotonic()
            if shown is None or limits_moved(shown, status) or now - read_at >= LIMITS_EVERY_S:
                limits, read_at = await client.limits(), now
        except GateError as exc:
            monitor.apply_gate(None, None, str(exc))
        else:
            monitor.apply_gate(limits, status)

    await every(interval_s, once, "gate", monitor)


def limits_moved(shown: Limits, status: GateStatus) -> bool:
    """Whether the gate's status says its limits are not ``shown``: another version (a change,
    or a gate restarted without its state), the pause, or a lane's effective limits (the
    adaptive controller's, which move without a new version)."""
    if status.version != shown.version or status.paused != shown.paused:
        return True
    effective = shown.effective or {}
    for name, lane in status.lanes.items():
        if lane.effective_max_inflight is None:
            continue  # a gate that does not say: read every LIMITS_EVERY_S
        # Without an adaptive controller the limits in force are the configured ones.
        held = effective.get(name) or shown.lanes.get(name)
        if held is None or (held.max_inflight, held.max_inflight_tokens) != (
            lane.effective_max_inflight,
            lane.effective_max_inflight_tokens,
        ):
            return True
    return False


async def poll_prometheus_engine(
    monitor: Monitor, reader: NodeSamples, interval_s: float, at: float | None = None
) -> None:
    """One node's engines from Prometheus' samples, each stamped with its scrape time (the
    monitor's clock must be Unix time); at a past instant ``at``, read once."""

    async def once() -> None:
        first = reader.newest is None
        results = await reader.read(time.time() if at is None else at)
        for result in results:
            monitor.apply_scrape(result)
        if first and results and results[0].at is not None:
            # The first read's first minute had less than a window behind each point.
            for view in monitor.serving_engines():
                view.history.drop_partial(results[0].at)

    if at is not None:
        await once()
        return
    await every(interval_s, once, f"Prometheus {reader.instance}", monitor)


async def poll_dcgm(
    monitor: Monitor,
    source: PrometheusSource,
    node: str,
    interval_s: float,
    at: float | None = None,
) -> None:
    """One node's GPUs from the DCGM exporter's series in Prometheus (N/A without them)."""

    async def once() -> None:
        try:
            vector = await source.query(dcgm.query(node, source.node_label), at or time.time())
        except PrometheusError as exc:
            monitor.apply_gpus(GpuReading([], str(exc)))
        else:
            monitor.apply_gpus(dcgm.reading_from(vector, node))

    if at is not None:
        await once()
        return
    await every(interval_s, once, f"DCGM {node}", monitor)


def apply_history(monitor: Monitor, history: History) -> int:
    """A backfill (``promnode.read_history``) put before what each engine's charts hold;
    the number of points added."""
    added = 0
    for view in monitor.serving_engines():
        for name, points in history.get((view.snap.dialect, view.snap.model or ""), {}).items():
            ring = view.history.series[name]
            before = len(ring)
            ring.prepend(points)
            added += len(ring) - before
    if added:
        monitor.version += 1
    return added
