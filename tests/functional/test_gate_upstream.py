"""The gate's upstream connections: a request the upstream never got is sent again, once, on
a new connection; a request it got is never sent twice."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from gpuwatch.aioserve import serve
from gpuwatch.gate.config import GateConfig
from gpuwatch.gate.limits import DEFAULT_LANES
from gpuwatch.gate.server import start_gate


class RawUpstream:
    """HTTP/1.1 by hand, one request per connection, each connection then closed as ``mode``
    says: "linger" (answer, wait, close without reading what came meanwhile, like llama.cpp
    after a stream), "silent" (read the request, close without a byte), or "half" (send the
    headers and part of the body, then close)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.handled = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                (int(line.split(b":")[1]) for line in head.split(b"\r\n")
                 if line.lower().startswith(b"content-length:")), 0,
            )  # fmt: skip
            await reader.readexactly(length)
            self.handled += 1
            if self.mode == "silent":
                return
            if self.mode == "half":
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 10)
                await writer.drain()
                return
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nKeep-Alive: timeout=5\r\n\r\nok")
            await writer.drain()
            with contextlib.suppress(asyncio.CancelledError):  # the test may end meanwhile
                await asyncio.sleep(0.1)  # the gate's next request arrives here, never read
        finally:
            writer.close()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[str]:
        server = await asyncio.start_server(self.serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.close()


async def metric(url: str, name: str) -> float:
    async with aiohttp.ClientSession() as s, s.get(f"{url}/metrics") as r:
        for line in (await r.text()).splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"{name} not exported")


async def test_a_request_on_a_connection_closed_under_it_is_sent_again_once(
    tmp_path: Path,
) -> None:
    """Regression: the reused connection's close became a 502 (ServerDisconnectedError)."""
    up = RawUpstream("linger")
    async with up.running() as url:
        _, served = await start_gate(url, GateConfig(DEFAULT_LANES), state_file=tmp_path / "s")
        try:
            async with aiohttp.ClientSession() as s:
                for _ in range(4):
                    async with s.post(f"{served.url}/v1/embeddings", json={"input": "x"}) as r:
                        assert r.status == 200 and await r.read() == b"ok"
            retries = await metric(served.url, "gpuwatch_gate_upstream_retries_total")
        finally:
            await served.close()
    assert up.handled == 4  # each request reached the upstream exactly once
    assert retries >= 1


@pytest.mark.parametrize(
    ("behaviour", "message"),
    [
        # The upstream read the request on a new connection, then closed it unanswered.
        ("silent", "unreachable: ServerDisconnectedError"),
        # The upstream began an answer and broke off.
        ("half", "upstream broke"),
    ],
)
async def test_a_request_the_upstream_has_seen_is_never_sent_twice(
    tmp_path: Path, behaviour: str, message: str
) -> None:
    up = RawUpstream(behaviour)
    async with up.running() as url:
        _, served = await start_gate(url, GateConfig(DEFAULT_LANES), state_file=tmp_path / "s")
        try:
            async with (
                aiohttp.ClientSession() as s,
                s.post(f"{served.url}/v1/embeddings", json={"input": "x"}) as r,
            ):
                assert r.status == 502
                assert message in (await r.json())["error"]["message"]
        finally:
            await served.close()
    assert up.handled == 1


async def test_a_cookie_the_upstream_set_for_one_client_never_reaches_another(
    tmp_path: Path,
) -> None:
    """The gate's client keeps no cookie jar: what one client's answer set is that client's.
    (aiohttp's jar ignores cookies from an IP address: the upstream is named by host.)"""
    seen: list[str | None] = []

    async def answer(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Cookie"))
        response = web.json_response({"ok": True})
        response.set_cookie("session", f"user-{len(seen)}")
        return response

    app = web.Application()
    app.router.add_post("/v1/completions", answer)
    upstream = await serve(app, "127.0.0.1", 0)
    _, served = await start_gate(
        f"http://localhost:{upstream.port}", GateConfig(DEFAULT_LANES), state_file=tmp_path / "s"
    )
    try:
        for _ in range(3):  # three clients, each with its own session (no cookies of its own)
            async with (
                aiohttp.ClientSession() as s,
                s.post(f"{served.url}/v1/completions", json={"prompt": "x"}) as r,
            ):
                assert r.status == 200
                assert "session=user-" in r.headers.get("Set-Cookie", "")  # passed back
        assert seen == [None, None, None]
    finally:
        await served.close()
        await upstream.close()


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_an_upstream_redirect_goes_back_to_the_client_unfollowed(
    tmp_path: Path, status: int
) -> None:
    """Regression: the gate followed upstream redirects (a 307 re-sent the POST body to
    another origin, and the client got that origin's answer as a 200)."""
    elsewhere: list[bytes] = []

    async def other(request: web.Request) -> web.Response:
        elsewhere.append(await request.read())
        return web.json_response({"from": "elsewhere"})

    other_app = web.Application()
    other_app.router.add_route("*", "/{tail:.*}", other)
    other_server = await serve(other_app, "127.0.0.1", 0)

    async def redirect(_: web.Request) -> web.Response:
        return web.Response(status=status, headers={"Location": f"{other_server.url}/steal"})

    app = web.Application()
    app.router.add_post("/v1/completions", redirect)
    upstream = await serve(app, "127.0.0.1", 0)
    _, served = await start_gate(upstream.url, GateConfig(DEFAULT_LANES), state_file=tmp_path / "s")
    try:
        async with (
            aiohttp.ClientSession() as s,
            s.post(
                f"{served.url}/v1/completions",
                json={"prompt": "secret"},
                allow_redirects=False,
            ) as r,
        ):
            assert r.status == status
            assert r.headers["Location"] == f"{other_server.url}/steal"
        assert elsewhere == []
    finally:
        await served.close()
        await upstream.close()
        await other_server.close()
