"""A client that stops reading must not hold a slot (and a generation upstream) forever.

While a stream is relayed, each write to the client either returns at once (the socket takes
it) or waits for the client to read. ``SendWatchdog`` closes the connection when one write has
waited longer than the send timeout, like nginx's ``send_timeout``; the handler then ends the
usual way for a client that left (upstream closed, slot given back). One timer per stream,
checking every half timeout: nothing per chunk beyond two attribute stores.
"""

from __future__ import annotations

import asyncio
import time


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
