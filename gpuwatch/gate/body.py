"""Reading a request body within a size and a pace, before anything is buffered whole.

The size is refused up front from Content-Length (413 without reading a byte) and counted as a
chunked body streams in, so a request never holds more than its lane's ``max_body``. A body
that stalls longer than the body timeout between two pieces is a 408, like nginx's
``client_body_timeout``: a client that promises 100 bytes and sends 30 is not held forever.
"""

from __future__ import annotations

import asyncio

from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError

from gpuwatch.errors import GpuwatchError
from gpuwatch.gate.watchdog import within

# The error code of each refusal, for the reply and the bad-requests count.
CODES = {413: "body_too_large", 408: "body_timeout", 400: "body_undecodable"}


class BodyRefused(GpuwatchError):
    """``status`` 413, 408 or 400 (a compressed body that does not inflate), with the reason;
    ``code`` names it."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.code = CODES[status]


def inflated(request: web.Request) -> bool:
    """Whether aiohttp inflates the body as it comes in (a gzip, deflate, br or zstd
    Content-Encoding): what is read is not what was sent. (The stream counts the bytes it
    inflated from only when it inflates them; a request without a body has an empty stream
    without the count.)"""
    return getattr(request.content, "total_compressed_bytes", None) is not None


async def read_body(request: web.Request, max_body: int, timeout_s: float) -> bytes:
    length = request.content_length
    if length is not None and length > max_body:
        raise BodyRefused(413, f"body of {length} bytes is over this path's limit of {max_body}")
    if not request.can_read_body:
        return b""
    body = bytearray()
    content = request.content
    while True:
        try:
            # What has arrived already is taken without a timer: most bodies come with their
            # headers, and a timer per read is a measurable share of a short request's cost.
            chunk = content.read_nowait()
            if not chunk and content.at_eof():
                return bytes(body)
            if not chunk:
                chunk = await within(request.content.readany(), timeout_s)
        except asyncio.TimeoutError:
            raise BodyRefused(
                408, f"the body stalled for {timeout_s:g} s after {len(body)} bytes"
            ) from None
        except RequestPayloadError:
            # Bytes that do not inflate (or a broken framing): the client's error, named
            # without echoing anything of it.
            what = "decode as its Content-Encoding says" if inflated(request) else "parse"
            # Nothing more of it can be read: marked ended, so that aiohttp does not try to
            # drain it after the reply (and log the same error again with a traceback).
            content.feed_eof()
            raise BodyRefused(400, f"the body does not {what}") from None
        if not chunk:
            return bytes(body)
        if len(body) + len(chunk) > max_body:
            raise BodyRefused(413, f"body is over this path's limit of {max_body} bytes")
        body += chunk
