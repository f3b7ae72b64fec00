"""The gate's client to its upstream: pooled connections, and one retry where it is safe.

A pooled (kept-alive) connection can be closed by the server at any moment between two
requests, and the close can cross the next request on the wire. llama.cpp's server does it
after every streamed response while announcing ``Keep-Alive``: the gate hands the connection
to the next queued request, which dies with ServerDisconnectedError before a byte comes back.
Such a request never reached the server (a server closes idle connections, never one whose
request it is answering), so it is sent again, once, on a new connection. A request that got
anything back, or failed on a new connection, is never sent twice: it may be running.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import aiohttp
from yarl import URL

# Below the idle timeout of common servers (uvicorn and llama.cpp close after 5 s), so the
# pool drops a connection before the server does, which makes the race above rarer.
KEEPALIVE_S = 4.0


@dataclass
class _Attempt:
    reused: bool = False


class UpstreamError(Exception):
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
        trace = aiohttp.TraceConfig()
        trace.on_connection_reuseconn.append(self._on_reuse)
        common: dict[str, Any] = {
            "timeout": aiohttp.ClientTimeout(total=None, sock_connect=5),
            "auto_decompress": False,
            "skip_auto_headers": ("User-Agent",),
        }
        # No connection limit: admission already bounds concurrency, and a pool smaller than
        # max_inflight would queue requests where nobody can see them.
        self._pooled = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(
                limit=0, ttl_dns_cache=300, keepalive_timeout=KEEPALIVE_S
            ),
            trace_configs=[trace],
            **common,
        )
        self._fresh = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, force_close=True), **common
        )

    async def close(self) -> None:
        for session in (self._pooled, self._fresh):
            if session is not None:
                await session.close()

    @staticmethod
    async def _on_reuse(_: aiohttp.ClientSession, ctx: SimpleNamespace, __: Any) -> None:
        attempt = ctx.trace_request_ctx
        if isinstance(attempt, _Attempt):
            attempt.reused = True

    async def request(
        self, method: str, url: URL, headers: Mapping[str, str], body: bytes | None
    ) -> aiohttp.ClientResponse:
        """The upstream's response (headers read, body not); UpstreamError when none came."""
        assert self._pooled is not None and self._fresh is not None
        attempt = _Attempt()
        try:
            return await self._pooled.request(
                method, url, data=body, headers=headers, trace_request_ctx=attempt
            )
        except (
            aiohttp.ServerDisconnectedError,
            aiohttp.ClientOSError,
            aiohttp.ClientConnectionResetError,
        ) as exc:
            if not attempt.reused or isinstance(exc, aiohttp.ClientConnectorError):
                raise UpstreamError(type(exc).__name__) from exc
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise UpstreamError(type(exc).__name__) from exc
        self._on_retry()
        try:
            return await self._fresh.request(method, url, data=body, headers=headers)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise UpstreamError(type(exc).__name__) from exc

    async def post_json(self, path: str, payload: Any, max_bytes: int) -> bytes | None:
        """A small side request (the tokenizer): the body when 200 and under ``max_bytes``."""
        assert self._pooled is not None
        try:
            async with self._pooled.post(self.url(path), json=payload) as resp:
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
