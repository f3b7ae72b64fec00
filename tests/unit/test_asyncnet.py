"""httpcore on asyncio's transports (asyncnet.py) and the pollers' client (PollClient): real
HTTP/1.1 servers on 127.0.0.1, each case run on AnyIO's backend (httpx's own) and on ours,
which must give the same bodies and the same errors."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import httpcore
import httpx
import pytest

from gpuwatch.asyncnet import HIGH_WATER, AsyncioBackend
from gpuwatch.httpclient import PollClient, async_client, get_stream, read_bounded
from gpuwatch.sources.scrape import ScrapeError, fetch
from tests.helpers import eventually

Serve = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
BACKENDS = {"anyio": None, "asyncio": AsyncioBackend}


def answer(body: bytes, extra: str = "") -> bytes:
    return (
        f"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
    ).encode() + body


async def read_request(reader: asyncio.StreamReader) -> bytes:
    return await reader.readuntil(b"\r\n\r\n")


@contextlib.asynccontextmanager
async def server(serve: Serve, tls: ssl.SSLContext | None = None) -> AsyncIterator[str]:
    """A raw HTTP server on 127.0.0.1 running ``serve`` for each connection; its base URL."""
    handlers: set[asyncio.Task[None]] = set()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        try:
            await serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the client went away, or the test is over (cancelled below)
        finally:
            writer.close()
            handlers.discard(task)

    srv = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=tls)
    port = srv.sockets[0].getsockname()[1]
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    finally:
        srv.close()
        for task in list(handlers):
            task.cancel()
        await srv.wait_closed()


def client(backend: str, timeout_s: float = 3.0) -> httpx.AsyncClient:
    """``async_client``'s (ours), or a plain httpx client on AnyIO with the same timeouts."""
    if backend == "asyncio":
        return async_client(connect_timeout_s=1.0, timeout_s=timeout_s, tls=False)
    return httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=1.0), trust_env=False)


def test_the_pollers_client_runs_on_asyncio_transports() -> None:
    made = async_client(tls=False)
    assert isinstance(made, PollClient)
    assert isinstance(made._direct._pool._network_backend, AsyncioBackend)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_keep_alive_one_connection_for_many_gets(backend: str) -> None:
    connections = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        for n in range(1000):
            await read_request(reader)
            writer.write(answer(f"page {n}\n".encode()))

    async with server(serve) as url, client(backend) as c:
        pages = [await fetch(c, f"{url}/metrics") for _ in range(5)]
    assert pages == [f"page {n}\n" for n in range(5)]
    assert connections == 1


@pytest.mark.parametrize("backend", BACKENDS)
async def test_an_idle_connection_the_server_closed_is_replaced(backend: str) -> None:
    """The server answers once per connection and closes it while the client is idle: the
    next GET must see the closed connection (``is_readable``) and open another."""
    closed = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(answer(b"once\n"))
        await writer.drain()
        writer.close()
        closed.set()

    async with server(serve) as url, client(backend) as c:
        assert await fetch(c, url) == "once\n"
        await closed.wait()
        await asyncio.sleep(0)  # the loop delivers the FIN (or not: is_readable polls too)
        assert await fetch(c, url) == "once\n"


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_body_past_the_high_water_mark_is_read_whole(backend: str) -> None:
    body = bytes(range(256)) * (3 * HIGH_WATER // 256 + 7)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(answer(body))
        await writer.drain()

    async with server(serve) as url, client(backend) as c, get_stream(c, url) as response:
        got = await read_bounded(response, 16 * HIGH_WATER)
    assert got == body


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_silent_server_is_a_read_timeout(backend: str) -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await asyncio.Event().wait()  # never answers

    async with server(serve) as url, client(backend, timeout_s=0.3) as c:
        with pytest.raises(ScrapeError, match=r"^timed out \(127\.0\.0\.1:\d+\)$"):
            await fetch(c, url)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_body_cut_short_is_closed_mid_response(backend: str) -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(answer(b"x" * 1000)[:-500])
        await writer.drain()

    async with server(serve) as url, client(backend) as c:
        with pytest.raises(ScrapeError, match="connection closed mid-response"):
            await fetch(c, url)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_nothing_listening_is_connection_refused(backend: str) -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)

    async with server(serve) as url:
        pass  # closed: nothing listens on its port now
    async with client(backend) as c:
        with pytest.raises(ScrapeError, match="connection refused") as info:
            await fetch(c, url)
    assert info.value.unreachable


async def test_open_get_sends_one_request_built_once_with_the_clients_headers() -> None:
    seen: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            seen.append(await read_request(reader))
            writer.write(answer(b"{}"))

    async with server(serve) as url:
        c = async_client(headers={"Authorization": "Bearer t0ken"}, tls=False)
        async with c:
            for params in ({"a": "1"}, {"a": "1"}, {"a": "2"}, None):
                async with get_stream(c, f"{url}/admin/status", params) as response:
                    assert await read_bounded(response, 100) == b"{}"
            assert isinstance(c, PollClient)
            assert len(c._requests) == 3  # one per URL and query
    heads = [h.decode().split("\r\n") for h in seen]
    assert [h[0] for h in heads] == [
        "GET /admin/status?a=1 HTTP/1.1",
        "GET /admin/status?a=1 HTTP/1.1",
        "GET /admin/status?a=2 HTTP/1.1",
        "GET /admin/status HTTP/1.1",
    ]
    for head in heads:
        assert "Authorization: Bearer t0ken" in head
        assert "Accept-Encoding: gzip, deflate" in head


def self_signed(tmp: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context with a fresh self-signed certificate for 127.0.0.1, and a client
    context that trusts only it."""
    key, cert = tmp / "key.pem", tmp / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(cert, key)
    return served, ssl.create_default_context(cafile=str(cert))


@pytest.mark.skipif(not shutil.which("openssl"), reason="needs openssl for a certificate")
async def test_tls_over_asyncio_transports(tmp_path: Path) -> None:
    served, trusting = self_signed(tmp_path)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            writer.write(answer(b"secret\n"))

    async with server(serve, tls=served) as url:
        for context, works in ((trusting, True), (ssl.create_default_context(), False)):
            pool = httpcore.AsyncConnectionPool(
                ssl_context=context, network_backend=AsyncioBackend()
            )
            async with pool:
                if works:
                    for _ in range(2):
                        response = await pool.request("GET", url)
                        assert response.content == b"secret\n"
                    assert len(pool.connections) == 1
                else:  # a certificate it does not trust: refused, never read unverified
                    with pytest.raises(httpcore.ConnectError):
                        await pool.request("GET", url)


async def test_a_reader_that_lags_stops_the_socket_being_read_past_the_high_water_mark() -> None:
    """Flow control: bytes the caller has not read are held up to about ``HIGH_WATER``, the
    rest left in the kernel (and the server) until the caller reads on."""
    size = 16 * HIGH_WATER

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"y" * size)
        await writer.drain()

    async with server(serve) as url:
        port = int(url.rsplit(":", 1)[1])
        stream = await AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=1.0)
        await stream.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", timeout=1.0)
        held = stream._reader  # type: ignore[attr-defined]
        await eventually(lambda: held.reading_paused, message="reading never paused")
        assert HIGH_WATER < len(held.buffer) <= 2 * HIGH_WATER
        got = 0
        while got < size:
            got += len(await stream.read(64 * 1024, timeout=2.0))
        assert got == size
        assert not held.reading_paused
        await stream.aclose()


async def test_one_built_request_serves_concurrent_gets_of_its_url() -> None:
    """A request built once is sent as it is: GETs of the same URL at the same time (a
    snapshot reading every source at once) each get their own answer on their own connection."""
    served = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal served
        while True:
            await read_request(reader)
            served += 1
            mine = served
            await asyncio.sleep(0.05)  # every GET is in flight at once
            writer.write(answer(f"answer {mine}\n".encode()))

    async with server(serve) as url, async_client(tls=False) as c:
        pages = await asyncio.gather(*(fetch(c, f"{url}/metrics") for _ in range(5)))
        assert isinstance(c, PollClient) and len(c._requests) == 1
    assert sorted(pages) == [f"answer {n}\n" for n in range(1, 6)]
