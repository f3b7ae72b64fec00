"""The pollers' client (``PollClient``, whose GETs are built once and sent straight to httpx's
transport): real HTTP/1.1 servers on 127.0.0.1, each case run through a plain
``httpx.AsyncClient`` and through ours, which must give the same bodies and the same errors."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest

from gpuwatch.httpclient import PollClient, async_client, get_stream, read_bounded
from gpuwatch.sources.scrape import ScrapeError, fetch

Serve = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
BACKENDS = ("httpx", "poll")
BIG = 1 << 20  # a body many reads long


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
    """``async_client``'s (ours), or a plain httpx client with the same timeouts."""
    if backend == "poll":
        return async_client(connect_timeout_s=1.0, timeout_s=timeout_s, tls=False)
    return httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=1.0), trust_env=False)


def test_the_pollers_client_is_a_poll_client() -> None:
    assert isinstance(async_client(tls=False), PollClient)


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
async def test_a_big_body_is_read_whole(backend: str) -> None:
    body = bytes(range(256)) * (BIG // 256 + 7)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(answer(body))
        await writer.drain()

    async with server(serve) as url, client(backend) as c, get_stream(c, url) as response:
        got = await read_bounded(response, 4 * BIG)
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


async def test_one_built_request_serves_concurrent_gets_of_its_url() -> None:
    """A request built once is sent as it is: GETs of the same URL at the same time (a
    snapshot reading every source at once) each get their own answer on their own connection."""
    served = 0
    all_in = asyncio.Event()  # no answer until every GET has arrived: all in flight at once

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal served
        while True:
            await read_request(reader)
            served += 1
            mine = served
            if served == 5:
                all_in.set()
            await all_in.wait()
            writer.write(answer(f"answer {mine}\n".encode()))

    async with server(serve) as url, async_client(tls=False) as c:
        gets = asyncio.gather(*(fetch(c, f"{url}/metrics") for _ in range(5)))
        pages = await asyncio.wait_for(gets, 10)
        assert isinstance(c, PollClient) and len(c._requests) == 1
    assert sorted(pages) == [f"answer {n}\n" for n in range(1, 6)]
