"""Neither a client that stops reading nor an upstream that stops answering may hold a slot
(and a generation upstream) forever.

While a stream is relayed, each write to the client either returns at once (the socket takes
it) or waits for the client to read. ``SendWatchdog`` closes the connection when one write has
waited longer than the send timeout, like nginx's ``send_timeout``; the handler then ends the
usual way for a client that left (upstream closed, slot given back). One timer per stream,
checking every half timeout: nothing per chunk beyond two attribute stores.

Upstream side, per lane (``upstream_first_byte_timeout_s``, ``upstream_idle_timeout_s``): the
answer's first byte must come within the first of sending, and each next chunk within the
second of the last; ``IdleWatchdog`` makes the reader of a silent answer raise UpstreamTimeout.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable
from typing import TypeVar

import aiohttp

from gpuwatch.errors import GpuwatchError


class SendWatchdog:
    def __init__(self, transport: asyncio.Transport | None, timeout_s: float) -> None:
        self._transport = transport
        self._timeout_s = timeout_s
        self._since: float | None = None
        self.fired = False
        loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | None = loop.call_later(timeout_s / 2, self._check)

    def writing(self) -> None:
        self._since = time.monotonic()

    def written(self) -> None:
        self._since = None

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _check(self) -> None:
        since = self._since
        if since is not None and time.monotonic() - since > self._timeout_s:
            self.fired = True
            self._timer = None
            if self._transport is not None:
                self._transport.abort()
            return
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self._timeout_s / 2, self._check)


T = TypeVar("T")


async def within(awaitable: Awaitable[T], timeout_s: float | None) -> T:
    """``awaitable``, or asyncio.TimeoutError after ``timeout_s`` (None: no limit)."""
    if timeout_s is None:
        return await awaitable
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(timeout_s):
            return await awaitable
    return await asyncio.wait_for(awaitable, timeout_s)  # pragma: no cover


class UpstreamTimeout(GpuwatchError):
    """The upstream went silent: ``kind`` is ``first_byte`` (no byte of the answer within the
    lane's upstream_first_byte_timeout_s of sending) or ``idle`` (no chunk for
    upstream_idle_timeout_s between two)."""

    def __init__(self, kind: str, timeout_s: float) -> None:
        what = "no first byte" if kind == "first_byte" else "no chunk"
        super().__init__(f"upstream sent {what} for {timeout_s:g} s")
        self.kind = kind
        self.timeout_s = timeout_s


class IdleWatchdog:
    """Cuts an upstream answer that stops coming: the first chunk is due by ``first_at`` (a
    ``time.monotonic()`` instant; None: no limit), each next one within ``idle_s`` (None: no
    limit) of the last. Expired, the answer's stream raises UpstreamTimeout in its reader.

    One timer per answer, moved only when it fires early (a chunk came meanwhile): a chunk
    costs a clock read and a store (``progress``)."""

    def __init__(
        self,
        stream: aiohttp.StreamReader,
        first_at: float | None,
        first_s: float | None,
        idle_s: float | None,
    ) -> None:
        self._stream = stream
        self._first_s = first_s
        self._idle_s = idle_s
        self._last: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.fired: UpstreamTimeout | None = None
        if first_at is not None:
            self._arm(first_at)

    def _arm(self, at: float) -> None:
        loop = asyncio.get_running_loop()
        # The loop's clock and time.monotonic() differ by a constant on every platform asyncio
        # runs on; the delay is what carries over.
        self._timer = loop.call_later(max(0.0, at - time.monotonic()), self._check)

    def progress(self) -> None:
        """A chunk came."""
        first = self._last is None
        self._last = time.monotonic()
        if first:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._idle_s is not None:
                self._arm(self._last + self._idle_s)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _check(self) -> None:
        self._timer = None
        if self._last is None:
            assert self._first_s is not None
            self._fire(UpstreamTimeout("first_byte", self._first_s))
            return
        assert self._idle_s is not None
        due = self._last + self._idle_s
        if time.monotonic() < due:
            self._arm(due)  # a chunk came since the timer was set
            return
        self._fire(UpstreamTimeout("idle", self._idle_s))

    def _fire(self, exc: UpstreamTimeout) -> None:
        self.fired = exc
        self._stream.set_exception(exc)
