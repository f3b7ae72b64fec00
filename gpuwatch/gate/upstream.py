"""The gate's client to its upstream: pooled connections, and one retry where it is safe.

A pooled (kept-alive) connection can be closed by the server at any moment between two
requests, and the close can cross the next request on the wire. llama.cpp's server does it
after every streamed response while announcing ``Keep-Alive``: the gate hands the connection
to the next queued request, which dies with ServerDisconnectedError before a byte comes back.
Such a request never reached the server (a server closes idle connections, never one whose
request it is answering), so it is sent again, once, on a new connection. A request that got
anything back, or failed on a new connection, is never sent twice: it may be running.

Redirects are never followed: a 3xx goes back to the client as the upstream sent it. Following
one would send the request (a 307 or 308: its body too) to whatever origin the upstream names,
past the gate's routing, and pass that origin's answer off as the upstream's.
"""

from __future__ import annotations

import asyncio
import contextvars
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
from aiohttp.client_reqrep import ClientRequest
from aiohttp.connector import Connection
from aiohttp.tracing import Trace
from yarl import URL

from gpuwatch.errors import GpuwatchError

# Below the idle timeout of common servers (uvicorn and llama.cpp close after 5 s), so the
# pool drops a connection before the server does, which makes the race above rarer.
KEEPALIVE_S = 4.0


# Whether the connection the current request got had carried a request before. Set by the
# connector in the request's own task, read by that task when the request fails.
_reused: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "gate_upstream_reused", default=False
)


class _PoolConnector(aiohttp.TCPConnector):
    """A TCPConnector that notes whether each connection it hands out was used before.

    (aiohttp's tracing can say so too, but costs ~15 us per request: a third of the gate's own
    overhead on short requests.)"""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._seen: weakref.WeakSet[object] = weakref.WeakSet()

    async def connect(
        self, req: ClientRequest, traces: list[Trace], timeout: aiohttp.ClientTimeout
    ) -> Connection:
        conn = await super().connect(req, traces, timeout)
        protocol = conn.protocol
        reused = protocol in self._seen
        if not reused and protocol is not None:
            self._seen.add(protocol)
        _reused.set(reused)
        return conn


class UpstreamError(GpuwatchError):
    """The upstream could not be reached or broke before answering; ``kind`` is for logs."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


class Upstream:
    def __init__(self, base: str, on_retry: Callable[[], None] = lambda: None) -> None:
        self.base = base.rstrip("/")
        self._pooled: aiohttp.ClientSession | None = None
        self._fresh: aiohttp.ClientSession | None = None
        self._on_retry = on_retry

    def url(self, path: str, query: str = "") -> URL:
        """The upstream URL of an already normalised path: built once, never re-parsed."""
        return URL(f"{self.base}{path}{'?' + query if query else ''}", encoded=True)

    async def open(self) -> None:
        common: dict[str, Any] = {
            "timeout": aiohttp.ClientTimeout(total=None, sock_connect=5),
            "auto_decompress": False,
            "skip_auto_headers": ("User-Agent",),
            # A proxy keeps no cookies: a Set-Cookie answered to one client must never ride
            # along with another client's request (and the jar costs ~5% of a short request).
            "cookie_jar": aiohttp.DummyCookieJar(),
        }
        # No connection limit: admission already bounds concurrency, and a pool smaller than
        # max_inflight would queue requests where nobody can see them.
        self._pooled = aiohttp.ClientSession(
            connector=_PoolConnector(limit=0, ttl_dns_cache=300, keepalive_timeout=KEEPALIVE_S),
            **common,
        )
        self._fresh = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, force_close=True), **common
        )

    async def close(self) -> None:
        for session in (self._pooled, self._fresh):
            if session is not None:
                await session.close()

    async def request(
        self, method: str, url: URL, headers: Mapping[str, str], body: bytes | None
    ) -> aiohttp.ClientResponse:
        """The upstream's response (headers read, body not); UpstreamError when none came."""
        assert self._pooled is not None and self._fresh is not None
        _reused.set(False)
        try:
            return await self._pooled.request(
                method, url, data=body, headers=headers, allow_redirects=False
            )
        except (
            aiohttp.ServerDisconnectedError,
            aiohttp.ClientOSError,
            aiohttp.ClientConnectionResetError,
        ) as exc:
            if not _reused.get() or isinstance(exc, aiohttp.ClientConnectorError):
                raise UpstreamError(type(exc).__name__) from exc
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise UpstreamError(type(exc).__name__) from exc
        self._on_retry()
        try:
            return await self._fresh.request(
                method, url, data=body, headers=headers, allow_redirects=False
            )
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise UpstreamError(type(exc).__name__) from exc

    async def post_json(self, path: str, payload: Any, max_bytes: int) -> bytes | None:
        """A small side request (the tokenizer): the body when 200 and under ``max_bytes``."""
        assert self._pooled is not None
        try:
            async with self._pooled.post(
                self.url(path), json=payload, allow_redirects=False
            ) as resp:
                if resp.status != 200:
                    return None
                if resp.content_length is not None and resp.content_length > max_bytes:
                    return None
                data = bytearray()
                async for chunk in resp.content.iter_any():
                    data += chunk
                    if len(data) > max_bytes:
                        return None
                return bytes(data)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            return None
