"""Reading a request body within a size and a pace, before anything is buffered whole.

The size is refused up front from Content-Length (413 without reading a byte) and counted as a
chunked body streams in, so a request never holds more than its lane's ``max_body``. A body
that stalls longer than the body timeout between two pieces is a 408, like nginx's
``client_body_timeout``: a client that promises 100 bytes and sends 30 is not held forever.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from gpuwatch.gate.watchdog import within


class BodyRefused(Exception):
    """``status`` 413 or 408, with the reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


async def read_body(request: web.Request, max_body: int, timeout_s: float) -> bytes:
    length = request.content_length
    if length is not None and length > max_body:
        raise BodyRefused(413, f"body of {length} bytes is over this path's limit of {max_body}")
    if not request.can_read_body:
        return b""
    body = bytearray()
    content = request.content
    while True:
        # What has arrived already is taken without a timer: most bodies come with their
        # headers, and a timer per read is a measurable share of a short request's cost.
        chunk = content.read_nowait()
        if not chunk and content.at_eof():
            return bytes(body)
        try:
            if not chunk:
                chunk = await within(request.content.readany(), timeout_s)
        except asyncio.TimeoutError:
            raise BodyRefused(
                408, f"the body stalled for {timeout_s:g} s after {len(body)} bytes"
            ) from None
        if not chunk:
            return bytes(body)
        if len(body) + len(chunk) > max_body:
            raise BodyRefused(413, f"body is over this path's limit of {max_body} bytes")
        body += chunk
