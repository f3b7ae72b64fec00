"""httpcore's network on asyncio's own transports: what ``httpclient`` gives httpx's pool.

httpcore runs on asyncio through AnyIO, whose every read and write opens a cancel scope and
looks up the current task, and whose "is this idle connection still open" check walks AnyIO's
typed attributes: about a sixth of the CPU of a poller's GET on a keep-alive connection
(bench/pollcost.py). This backend reads from an ``asyncio.Protocol`` into a buffer instead: a
read waits on one future, its timeout is one timer, and a closed connection is known from the
protocol's own state. The errors are httpcore's (ReadTimeout, ConnectError ...), which httpx
maps to its own as it does for AnyIO's.

Reading is bounded as a stream is: past ``HIGH_WATER`` bytes unread the transport stops
reading from the socket until the reader takes them, so a server sending faster than a
caller reads never fills memory.
"""

from __future__ import annotations

import asyncio
import select
import socket
import ssl
from collections.abc import Iterable
from typing import Any, cast

import httpcore

HIGH_WATER = 256 * 1024
# httpcore's SOCKET_OPTION: what ``socket.setsockopt`` takes.
SocketOption = (
    tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]
)


class _Reader(asyncio.Protocol):
    """One connection's unread bytes and state, filled by the event loop."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.eof = False
        self.error: Exception | None = None
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[None] | None = None  # a read waiting for bytes
        self.drained: asyncio.Future[None] | None = None  # a write waiting for the buffer
        self.reading_paused = False
        self.writing_paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) > HIGH_WATER and not self.reading_paused and self.transport:
            self.reading_paused = True
            self.transport.pause_reading()
        _wake(self.waiter)

    def eof_received(self) -> bool:
        self.eof = True
        _wake(self.waiter)
        return False  # close the transport: HTTP/1.1 never half-closes

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        self.error = exc
        _wake(self.waiter)
        _wake(self.drained)

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        _wake(self.drained)


def _wake(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


def _expire(waiter: asyncio.Future[None], error: Exception) -> None:
    if not waiter.done():
        waiter.set_exception(error)


async def _wait(waiter: asyncio.Future[None], timeout: float | None, error: Exception) -> None:
    """``waiter`` done, or ``error`` raised after ``timeout`` seconds: one timer, no task."""
    if timeout is None:
        await waiter
        return
    timer = asyncio.get_running_loop().call_later(timeout, _expire, waiter, error)
    try:
        await waiter
    finally:
        timer.cancel()


def _readable(sock: socket.socket | None) -> bool:
    """Whether the socket has bytes or an EOF waiting (a closed one counts as readable)."""
    if sock is None or sock.fileno() == -1:
        return True
    return bool(select.select([sock], [], [], 0)[0])


class AsyncioStream(httpcore.AsyncNetworkStream):
    """One connection: reads take what the protocol has buffered, or wait for it."""

    def __init__(self, transport: asyncio.Transport, reader: _Reader) -> None:
        self._transport = transport
        self._reader = reader

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        r = self._reader
        if not r.buffer and not r.eof:
            r.waiter = asyncio.get_running_loop().create_future()
            try:
                await _wait(r.waiter, timeout, httpcore.ReadTimeout("timed out reading"))
            finally:
                r.waiter = None
        if r.buffer:
            data = bytes(r.buffer[:max_bytes])
            del r.buffer[:max_bytes]
            if r.reading_paused and len(r.buffer) <= HIGH_WATER // 4:
                r.reading_paused = False
                self._transport.resume_reading()
            return data
        if r.error is not None:
            raise httpcore.ReadError(str(r.error) or type(r.error).__name__)
        return b""  # EOF: httpcore says "server disconnected" where it expected more

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        if self._transport.is_closing():
            raise httpcore.WriteError("the connection is closed")
        self._transport.write(buffer)
        r = self._reader
        if r.writing_paused:
            r.drained = asyncio.get_running_loop().create_future()
            try:
                await _wait(r.drained, timeout, httpcore.WriteTimeout("timed out writing"))
            finally:
                r.drained = None
            if r.error is not None:
                raise httpcore.WriteError(str(r.error) or type(r.error).__name__)

    async def aclose(self) -> None:
        self._transport.close()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            tls = await loop.start_tls(
                self._transport,
                self._reader,
                ssl_context,
                server_hostname=server_hostname,
                ssl_handshake_timeout=timeout,
            )
        except (TimeoutError, asyncio.TimeoutError) as exc:
            self._transport.abort()
            raise httpcore.ConnectTimeout(str(exc) or "TLS handshake timed out") from exc
        except (OSError, ssl.SSLError) as exc:
            self._transport.abort()
            raise httpcore.ConnectError(str(exc) or type(exc).__name__) from exc
        if tls is None:  # the connection closed during the handshake
            raise httpcore.ConnectError("the connection closed during the TLS handshake")
        self._reader.transport = tls
        return AsyncioStream(tls, self._reader)

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":  # httpcore's test of an idle keep-alive connection
            if self._reader.buffer or self._reader.eof:
                return True
            return _readable(self._transport.get_extra_info("socket"))
        key = {"client_addr": "sockname", "server_addr": "peername"}.get(info, info)
        if key in ("ssl_object", "sockname", "peername", "socket"):
            return self._transport.get_extra_info(key)
        return None


class AsyncioBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend on the running asyncio loop (TCP and unix sockets)."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        local = None if local_address is None else (local_address, 0)
        connecting = loop.create_connection(_Reader, host, port, local_addr=local)
        return await _connected(connecting, timeout, socket_options)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        connecting = asyncio.get_running_loop().create_unix_connection(_Reader, path)
        return await _connected(connecting, timeout, socket_options)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


async def _connected(
    connecting: Any, timeout: float | None, socket_options: Iterable[SocketOption] | None
) -> AsyncioStream:
    # A connection is made once and kept: wait_for's task here costs nothing per request.
    try:
        transport, reader = await asyncio.wait_for(connecting, timeout)
    except (TimeoutError, asyncio.TimeoutError) as exc:
        raise httpcore.ConnectTimeout("timed out connecting") from exc
    except OSError as exc:
        raise httpcore.ConnectError(str(exc) or type(exc).__name__) from exc
    sock = transport.get_extra_info("socket")
    for option in socket_options or ():
        sock.setsockopt(*option)
    return AsyncioStream(transport, reader)
