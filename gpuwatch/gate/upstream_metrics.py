"""The upstream's own ``/metrics`` (``gpuwatch gate --upstream-metrics URL``), read for the
adaptive controller: KV cache usage and the preemptions counter, in any dialect the dashboard
reads (vLLM, SGLang, llama.cpp, ...), through the same scrape and mapping.

A page that cannot be read is one log line (and another when it reads again); the controller
then goes on with the gate's own measurements alone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from gpuwatch.gate.background import Background
from gpuwatch.httpclient import async_client
from gpuwatch.model import ScrapeResult
from gpuwatch.sources.scrape import ParseCache, scrape

log = logging.getLogger("gpuwatch.gate")


@dataclass(frozen=True)
class UpstreamReading:
    kv_usage: float | None  # the fullest engine's KV cache usage, 0..1
    preemptions_total: float | None  # summed over engines (a counter)
    waiting: float | None = None  # requests in the engines' own queues, summed
    running: float | None = None  # requests the engines are batching, summed


def reading_of(result: ScrapeResult) -> UpstreamReading | None:
    if result.error is not None or not result.engines:
        return None
    kv = [e.kv_cache_usage for e in result.engines if e.kv_cache_usage is not None]
    pre = [e.preemptions_total for e in result.engines if e.preemptions_total is not None]
    waiting = [e.waiting for e in result.engines if e.waiting is not None]
    running = [e.running for e in result.engines if e.running is not None]
    return UpstreamReading(
        max(kv) if kv else None,
        sum(pre) if pre else None,
        sum(waiting) if waiting else None,
        sum(running) if running else None,
    )


class UpstreamMetrics:
    """Polls one ``/metrics`` URL; ``latest()`` is the last good reading (None when the last
    scrape failed: stale numbers must not steer)."""

    def __init__(self, url: str, interval_s: float = 1.0) -> None:
        self.url = url
        self.interval_s = interval_s
        self._latest: UpstreamReading | None = None
        self._error: str | None = None
        self._background = Background(self.run)
        self._cache = ParseCache()
        # Whoever wants every page as read (the stall watch: stallwatch.py), errors included.
        self.listeners: list[Callable[[ScrapeResult], None]] = []

    def latest(self) -> UpstreamReading | None:
        return self._latest

    async def poll_once(self, client: httpx.AsyncClient) -> None:
        result = await scrape(client, self.url, cache=self._cache)
        for listener in self.listeners:
            listener(result)
        reading = reading_of(result)
        self._latest = reading
        error = (result.error or "no serving engine on the page") if reading is None else None
        if error != self._error:
            if error is not None:
                log.warning("upstream metrics %s: %s", self.url, error)
            else:
                log.info("upstream metrics %s: reading again", self.url)
            self._error = error

    async def run(self) -> None:
        async with async_client() as client:
            while True:
                await self.poll_once(client)
                await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        self._background.start()

    async def stop(self) -> None:
        await self._background.stop()
