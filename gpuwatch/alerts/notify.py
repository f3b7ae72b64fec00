"""Notifications: each alert change POSTed to every configured receiver, in the background.

A bounded queue per receiver (a dead receiver never holds the node's memory: the oldest waiting
notification is dropped, and counted), retries with exponential backoff, and one line when a
receiver fails (and one when it answers again), never one per try.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from gpuwatch.alerts.payload import Alert, body_for, is_api
from gpuwatch.fmt import clip
from gpuwatch.httpclient import async_client

QUEUE_SIZE = 64  # notifications waiting per receiver
TRIES = 4
BACKOFF_S = 0.5  # then 1, 2: a receiver has about 4 s (plus timeouts) to come back
TIMEOUT_S = 5.0


@dataclass
class Receiver:
    url: str
    queue: asyncio.Queue[list[Alert]] = field(
        default_factory=lambda: asyncio.Queue(maxsize=QUEUE_SIZE)
    )
    failing: bool = False
    sent: int = 0
    dropped: int = 0


class Notifier:
    """Sends alert batches to ``urls``; ``report`` hears the one-line failures and recoveries.

    ``send`` may be called from the event loop's thread at any time; ``run`` is the sender."""

    def __init__(
        self,
        urls: list[str],
        report: Callable[[str], None],
        backoff_s: float = BACKOFF_S,
        timeout_s: float = TIMEOUT_S,
    ) -> None:
        self.receivers = [Receiver(url) for url in urls]
        self.report = report
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s

    def send(self, alerts: list[Alert]) -> None:
        if not alerts:
            return
        for r in self.receivers:
            if r.queue.full():
                r.queue.get_nowait()  # the oldest goes: the newest state is what matters
                r.queue.task_done()
                r.dropped += 1
            r.queue.put_nowait(list(alerts))

    def send_api(self, alerts: list[Alert]) -> None:
        """Firing alerts again, to Alertmanager's API only (a webhook would notify again)."""
        for r in self.receivers:
            if is_api(r.url) and alerts and not r.queue.full():
                r.queue.put_nowait(list(alerts))

    async def run(self) -> None:
        async with async_client(timeout_s=self.timeout_s) as client:
            await asyncio.gather(*(self._drain(client, r) for r in self.receivers))

    async def _drain(self, client: httpx.AsyncClient, r: Receiver) -> None:
        while True:
            alerts = await r.queue.get()
            try:
                error = await self._post(client, r.url, body_for(r.url, alerts))
            finally:
                r.queue.task_done()
            if error is None:
                r.sent += 1
                if r.failing:
                    r.failing = False
                    self.report(f"alert receiver {clip(r.url, 80)} answers again")
                continue
            if not r.failing:
                r.failing = True
                lost = f"; {r.dropped} dropped while queued" if r.dropped else ""
                self.report(
                    f"alert receiver {clip(r.url, 80)} failed {TRIES} tries: {error}; "
                    f"{len(alerts)} alert(s) not delivered{lost}"
                )

    async def _post(self, client: httpx.AsyncClient, url: str, body: Any) -> str | None:
        """None when delivered; else the last try's reason."""
        error = "not sent"
        for attempt in range(TRIES):
            if attempt:
                await asyncio.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                response = await client.post(url, json=body)
            except httpx.HTTPError as exc:
                error = clip(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
                continue
            if response.status_code < 300:
                return None
            error = f"HTTP {response.status_code} {clip(response.text, 120)}"
            if 400 <= response.status_code < 500 and response.status_code != 429:
                break  # the receiver refuses this body: sending it again will not help
        return error

    async def flush(self, timeout_s: float = 5.0) -> None:
        """Wait (bounded) for queued notifications to go: the resolved ones at shutdown."""
        joined = asyncio.gather(*(r.queue.join() for r in self.receivers))
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(joined, timeout_s)
