"""The one place that builds httpx clients, so every poller has the same timeouts and pool."""

from __future__ import annotations

import sys

import httpx

try:
    import sniffio  # noqa: F401
except ImportError:
    # httpcore imports sniffio on every async request; without it each failed import searches
    # sys.path again (~0.15 ms, 12 times a fleet refresh). A None entry fails at once.
    sys.modules.setdefault("sniffio", None)  # type: ignore[arg-type]

DEFAULT_CONNECT_TIMEOUT_S = 1.0
DEFAULT_TIMEOUT_S = 3.0


def async_client(
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_connections: int = 16,
    headers: dict[str, str] | None = None,
) -> httpx.AsyncClient:
    """An async client for low-rate polling: short connect timeout, bounded total time."""
    timeout = httpx.Timeout(timeout_s, connect=connect_timeout_s)
    limits = httpx.Limits(
        max_connections=max_connections, max_keepalive_connections=max_connections
    )
    # trust_env=False: a proxy set for the shell must not sit between us and a local server.
    return httpx.AsyncClient(timeout=timeout, limits=limits, headers=headers, trust_env=False)


class BodyTooLarge(Exception):
    """The answer's body is over the caller's limit (declared or as read)."""


async def read_bounded(response: httpx.Response, max_bytes: int) -> bytes:
    """The body of a streamed ``response``, refused past ``max_bytes`` as it arrives: a
    declared length over the limit before a byte is read, an endless body at the limit (never
    held whole, as ``response.content`` would)."""
    declared = response.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_bytes:
        raise BodyTooLarge(f"body of {int(declared)} bytes exceeds the {mib_limit(max_bytes)}")
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > max_bytes:
            raise BodyTooLarge(body_too_big(max_bytes))
        chunks.append(chunk)
    return b"".join(chunks)


def mib_limit(n: int) -> str:
    return f"{n / 1048576:g} MiB limit"


def body_too_big(max_bytes: int) -> str:
    return f"body exceeds the {mib_limit(max_bytes)}"
