"""Small real HTTP servers on 127.0.0.1 for tests (aiohttp), run in a background thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ThreadedServer:
    """An aiohttp app on its own loop in a thread, so sync code (subprocess CLIs) can use it."""

    def __init__(self, routes: dict[str, Handler], unix_path: str | None = None) -> None:
        self.routes = routes
        self.unix_path = unix_path  # serve on this unix socket instead of a TCP port
        self.port = 0  # the port the OS picked, once started
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        for path, handler in self.routes.items():
            app.router.add_route("*", path, handler)  # GET mostly; PATCH for a fake gate
        self._runner = web.AppRunner(
            app, handler_cancellation=True, access_log=None, shutdown_timeout=0.5
        )
        self._loop.run_until_complete(self._runner.setup())
        if self.unix_path is not None:
            self._loop.run_until_complete(web.UnixSite(self._runner, self.unix_path).start())
        else:
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            self._loop.run_until_complete(site.start())
            self.port = self._runner.addresses[0][1]
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._runner.cleanup())

    def __enter__(self) -> ThreadedServer:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("test server did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
