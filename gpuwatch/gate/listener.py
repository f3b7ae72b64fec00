"""The gate's listening socket: aiohttp's HTTP/1 protocol with two things it lacks.

1. A header timeout (nginx's ``client_header_timeout``): a connection whose request line and
   headers are not complete within it gets a 408 and is closed. aiohttp only closes a
   connection idle for its keep-alive timeout, so a slowloris client trickling header bytes
   holds a socket for minutes.
2. Parse errors answered without echoing the request: aiohttp's 400 for an oversized header
   quotes its first 100 bytes (an ``Authorization`` header: the token) and logs a traceback.
   Here the reply names the kind of error, and the log gets one line.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import http_exceptions, web
from aiohttp.web_protocol import RequestHandler

from gpuwatch.aioserve import Served

log = logging.getLogger("gpuwatch.gate")

KEEPALIVE_S = 75.0  # nginx's default: an idle kept-alive connection is closed after it

_PARSE_ERRORS: tuple[tuple[type[Exception], str], ...] = (
    (http_exceptions.LineTooLong, "a request line or header is too long"),
    (http_exceptions.InvalidHeader, "a header is malformed"),
    (http_exceptions.BadStatusLine, "the request line is malformed"),
    (http_exceptions.BadHttpMethod, "the request method is malformed"),
    (http_exceptions.TransferEncodingError, "the chunked body is malformed"),
    (http_exceptions.ContentLengthError, "the body is shorter than its Content-Length"),
)


def _describe(exc: BaseException | None) -> str:
    for kind, text in _PARSE_ERRORS:
        if isinstance(exc, kind):
            return text
    return "the request is malformed"


def _error_bytes(status: int, reason: str, message: str) -> bytes:
    body = json.dumps(
        {
            "error": {
                "message": message,
                "type": "invalid_request_error",
                "param": None,
                "code": status,
            }
        }
    ).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


class GateConnection(RequestHandler):
    """One client connection. ``request_started`` / ``request_finished`` are called by the
    gate's middleware: between two requests the header clock runs from the first byte."""

    def __init__(self, *args: Any, header_timeout_s: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timeout_s = header_timeout_s
        self._header_timer: asyncio.TimerHandle | None = None
        # When the headers now being read must be in; None while none are being read. The
        # timer is lazy: a request that starts in time clears the deadline and leaves the
        # timer to find nothing to do, and the next request's deadline reuses it, so a busy
        # kept-alive connection makes one timer per timeout, not one per request (a timer
        # made and cancelled per request cost ~4% of a short request).
        self._deadline: float | None = None
        self._between_requests = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._arm()  # a connection that sends nothing at all is also on the clock

    def data_received(self, data: bytes) -> None:
        if self._between_requests and self._deadline is None:
            self._arm()
        super().data_received(data)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._deadline = None
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        super().connection_lost(exc)

    def request_started(self) -> None:
        self._between_requests = False
        self._deadline = None

    def request_finished(self) -> None:
        self._between_requests = True

    def _arm(self) -> None:
        loop = asyncio.get_running_loop()
        self._deadline = loop.time() + self._header_timeout_s
        if self._header_timer is None:
            self._header_timer = loop.call_at(self._deadline, self._headers_late)

    def _headers_late(self) -> None:
        self._header_timer = None
        deadline = self._deadline
        if deadline is None:
            return  # those headers came in time; the next request arms it again
        loop = asyncio.get_running_loop()
        if loop.time() < deadline:  # a later request's clock: wait for its deadline
            self._header_timer = loop.call_at(deadline, self._headers_late)
            return
        transport = self.transport
        if not self._between_requests or transport is None or transport.is_closing():
            return
        message = f"request headers did not arrive within {self._header_timeout_s:g} s"
        transport.write(_error_bytes(408, "Request Timeout", message))
        self.force_close()  # closes the transport once the 408 is flushed

    def handle_error(
        self,
        request: Any,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if status >= 500:
            # A bug in the gate, not a client's doing: keep the traceback.
            return super().handle_error(request, status, exc, message)
        text = _describe(exc)
        log.info("refused a malformed request from %s: %s", request.remote, text)
        if request.writer.output_size > 0:
            raise ConnectionError("response already started")
        body = {
            "error": {
                "message": text,
                "type": "invalid_request_error",
                "param": None,
                "code": status,
            }
        }
        resp = web.Response(status=status, text=json.dumps(body), content_type="application/json")
        resp.force_close()
        return resp


@web.middleware
async def track_requests(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Tell the connection a request's headers are in (its header clock stops)."""
    protocol = request.protocol
    if isinstance(protocol, GateConnection):
        protocol.request_started()
    try:
        return await handler(request)
    finally:
        if isinstance(protocol, GateConnection):
            protocol.request_finished()


@dataclass
class Listening(Served):
    """``Served`` (url, close) for the gate: ``close()`` stops accepting, then closes the app."""

    server: asyncio.Server | None = None

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        await self.runner.cleanup()


async def listen(app: web.Application, host: str, port: int, header_timeout_s: float) -> Listening:
    """Serve ``app`` on host:port (0: a free port) with ``GateConnection`` per connection.

    Handlers are cancelled when their client leaves: that is how a disconnect reaches the code
    that must abort the upstream request.
    """
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    manager = runner.server
    assert manager is not None
    loop = asyncio.get_running_loop()

    def connection() -> GateConnection:
        return GateConnection(
            manager,
            loop=loop,
            header_timeout_s=header_timeout_s,
            keepalive_timeout=KEEPALIVE_S,
            access_log=None,
        )

    try:
        server = await loop.create_server(connection, host, port, reuse_address=True)
    except BaseException:
        await runner.cleanup()
        raise
    bound = server.sockets[0].getsockname()[1] if server.sockets else port
    return Listening(runner, host, bound, server)
