"""The one place that builds httpx clients, so every poller has the same timeouts and pool."""

from __future__ import annotations

import contextlib
import ssl
import sys
import zlib
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import httpx

from gpuwatch.bounds import DEFAULT_CONNECT_TIMEOUT_S, DEFAULT_TIMEOUT_S
from gpuwatch.errors import GpuwatchError
from gpuwatch.fmt import clip

try:
    import sniffio  # noqa: F401
except ImportError:
    # httpcore imports sniffio on every async request; without it each failed import searches
    # sys.path again (~0.15 ms, 12 times a fleet refresh). A None entry fails at once.
    sys.modules.setdefault("sniffio", None)  # type: ignore[arg-type]


def async_client(
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_connections: int = 16,
    headers: dict[str, str] | None = None,
    tls: bool = True,
) -> PollClient:
    """An async client for low-rate polling: short connect timeout, bounded total time.
    ``tls=False`` for a client that reads only http:// URLs (see below)."""
    timeout = httpx.Timeout(timeout_s, connect=connect_timeout_s)
    limits = httpx.Limits(
        max_connections=max_connections, max_keepalive_connections=max_connections
    )
    # trust_env=False: a proxy set for the shell must not sit between us and a local server.
    # Only the codings ``read_bounded`` inflates under a cap are asked for (httpx would add br
    # or zstd whenever their packages happen to be installed).
    headers = {"Accept-Encoding": ACCEPT_ENCODING, **(headers or {})}
    # Loading the certificate store is 25-45 ms of every client made; a one-shot read of
    # http:// endpoints needs none. Its context trusts no certificate, so were it ever sent to
    # an https URL it would refuse to connect, never connect unverified.
    if tls:
        context = httpx.create_ssl_context(verify=True, trust_env=False)
    else:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    transport = httpx.AsyncHTTPTransport(verify=context, limits=limits, trust_env=False)
    return PollClient(transport=transport, timeout=timeout, headers=headers, trust_env=False)


class PollClient(httpx.AsyncClient):
    """The pollers' client: an ``httpx.AsyncClient`` whose ``open_get`` sends a GET built once
    per URL (and query) straight to its transport.

    A poller asks for the same URL every second, and the client's path around the transport
    (building the request, merging headers, cookies, auth and redirect handling, event hooks)
    was a fifth of each GET's CPU (bench/pollcost.py). None of it changes between polls: the
    request, headers and timeouts included, is the one ``build_request`` makes, sent as it
    is. What is skipped: cookies the server sets (no polled endpoint sets any) and redirects
    (the client never follows them)."""

    MAX_KEPT = 64  # requests kept; a caller asking for endless distinct URLs starts over

    def __init__(self, *, transport: httpx.AsyncHTTPTransport, **kwargs: Any) -> None:
        super().__init__(transport=transport, **kwargs)
        self._direct = transport
        self._requests: dict[tuple[str, tuple[tuple[str, str], ...]], httpx.Request] = {}

    async def open_get(self, url: str, params: Mapping[str, str] | None = None) -> httpx.Response:
        """The answer to a GET of ``url``, its body not read yet: read it (``read_bounded``)
        and close it (``aclose``, which gives the connection back), as ``stream`` would."""
        key = (url, tuple(params.items()) if params else ())
        request = self._requests.get(key)
        if request is None:
            if len(self._requests) >= self.MAX_KEPT:
                self._requests.clear()
            request = self._requests[key] = self.build_request("GET", url, params=params)
        response = await self._direct.handle_async_request(request)
        response.request = request
        return response


@contextlib.asynccontextmanager
async def get_stream(
    client: httpx.AsyncClient, url: str, params: Mapping[str, str] | None = None
) -> AsyncIterator[httpx.Response]:
    """``client.stream("GET", url, params=params)``, by ``PollClient.open_get`` where the
    client is one (``async_client``'s)."""
    if isinstance(client, PollClient):
        response = await client.open_get(url, params)
        try:
            yield response
        finally:
            await response.aclose()
    else:
        async with client.stream("GET", url, params=params) as response:
            yield response


def unix_client(path: str, timeout_s: float) -> httpx.Client:
    """A blocking client for a local API on a unix socket (Docker's, Podman's): one connection,
    ``timeout_s`` for everything, plain bodies (what a caller bounds by their length)."""
    transport = httpx.HTTPTransport(uds=path, retries=0)
    return httpx.Client(
        transport=transport,
        timeout=httpx.Timeout(timeout_s),
        headers={"Accept-Encoding": "identity"},
        trust_env=False,
    )


class BodyRefused(GpuwatchError):
    """An answer's body not read: over the caller's limit, or in a form that cannot be bounded."""


class BodyTooLarge(BodyRefused):
    """The answer's body is over the caller's limit (declared, as sent, or as decoded)."""


ACCEPT_ENCODING = "gzip, deflate"
_MAX_CODINGS = 2  # "gzip, gzip" is legal; ten stacked codings are an attack
_PIECE = 64 * 1024  # the most one inflate step may produce: the cap is checked between steps


class _Inflater:
    """One content coding, undone a bounded piece at a time."""

    def __init__(self, coding: str) -> None:
        self.coding = coding
        # gzip has its header; "deflate" is meant to be zlib-wrapped but some servers send it
        # raw: try zlib first and fall back, as browsers (and httpx) do.
        wbits = zlib.MAX_WBITS | 16 if coding in ("gzip", "x-gzip") else zlib.MAX_WBITS
        self._unzip = zlib.decompressobj(wbits)
        self._started = False

    def feed(self, data: bytes) -> Iterator[bytes]:
        """What ``data`` inflates to, in pieces of at most ``_PIECE`` bytes, produced only as
        they are asked for: a bomb is never inflated further than the reader reads."""
        try:
            out = self._unzip.decompress(data, _PIECE)
        except zlib.error:
            if self._started or self.coding != "deflate":
                raise
            self._unzip = zlib.decompressobj(-zlib.MAX_WBITS)
            out = self._unzip.decompress(data, _PIECE)
        self._started = True
        yield out
        # A full piece may leave output pending inside zlib even when all input was taken.
        while self._unzip.unconsumed_tail or len(out) == _PIECE:
            out = self._unzip.decompress(self._unzip.unconsumed_tail, _PIECE)
            yield out


def _codings(response: httpx.Response) -> list[_Inflater]:
    """The inflaters for the answer's Content-Encoding, in the order to apply them."""
    header = response.headers.get("content-encoding", "")
    codings = [c.strip().lower() for c in header.split(",") if c.strip()]
    codings = [c for c in codings if c != "identity"]
    if len(codings) > _MAX_CODINGS:
        raise BodyRefused(f"Content-Encoding with {len(codings)} codings: {clip(header, 60)}")
    for coding in codings:
        if coding not in ("gzip", "x-gzip", "deflate"):
            raise BodyRefused(f"unsupported Content-Encoding {clip(coding, 40)!r}")
    return [_Inflater(c) for c in reversed(codings)]  # the last one applied is undone first


def _inflate(stages: list[_Inflater], data: bytes) -> Iterator[bytes]:
    if not stages:
        yield data
        return
    for piece in stages[0].feed(data):
        if piece:
            yield from _inflate(stages[1:], piece)


async def read_bounded(response: httpx.Response, max_bytes: int) -> bytes:
    """The body of a streamed ``response``, refused past ``max_bytes`` as it arrives: a
    declared length over the limit before a byte is read, an endless body at the limit (never
    held whole, as ``response.content`` would). A compressed body is inflated here, piece by
    piece, and refused as soon as what it inflates to passes ``max_bytes``: a 1 MB gzip bomb
    costs at most the limit, never the gigabyte it would become."""
    declared = response.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_bytes:
        raise BodyTooLarge(f"body of {int(declared)} bytes exceeds the {mib_limit(max_bytes)}")
    stages = _codings(response)
    chunks: list[bytes] = []
    size = sent = 0
    try:
        async for raw in response.aiter_raw():
            sent += len(raw)  # a stream that inflates to nothing is still bounded
            if sent > max_bytes:
                raise BodyTooLarge(body_too_big(max_bytes))
            for chunk in _inflate(stages, raw):
                size += len(chunk)
                if size > max_bytes:
                    raise BodyTooLarge(body_too_big(max_bytes, inflated=bool(stages)))
                chunks.append(chunk)
    except zlib.error as exc:
        coding = clip(response.headers.get("content-encoding", ""), 40)
        raise BodyRefused(
            f"body does not inflate as its Content-Encoding {coding}: {exc}"
        ) from None
    return b"".join(chunks)


def mib_limit(n: int) -> str:
    return f"{n / 1048576:g} MiB limit"


def body_too_big(max_bytes: int, inflated: bool = False) -> str:
    return f"body {'inflates past' if inflated else 'exceeds'} the {mib_limit(max_bytes)}"
