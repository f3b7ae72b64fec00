"""The one place aiohttp servers are started (the simulator, and later the gate)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from dataclasses import dataclass
from typing import Protocol

from aiohttp import web


def parse_listen(text: str, default_port: int) -> tuple[str, int]:
    """``host:port``, ``:port`` or ``host`` -> (host, port); ValueError with the reason."""
    host, sep, port = text.rpartition(":")
    if not sep:
        return text or "127.0.0.1", default_port
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"bad port in --listen {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


@dataclass
class Served:
    runner: web.AppRunner
    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def close(self) -> None:
        await self.runner.cleanup()


async def serve(app: web.Application, host: str, port: int) -> Served:
    """Start ``app``; port 0 picks a free one. Handlers are cancelled when a client leaves,
    which is how a disconnect reaches the code that must abort the work."""
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = runner.addresses[0][1] if runner.addresses else port  # the port 0 picked
    return Served(runner, host, bound)


class Closable(Protocol):
    async def close(self) -> None: ...


async def run_until_signalled(served: Closable) -> None:
    """Serve until SIGINT or SIGTERM, then close cleanly."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await served.close()
