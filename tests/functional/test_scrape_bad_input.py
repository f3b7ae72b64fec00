"""Every kind of bad source gives a one-line reason; the others still report (real HTTP)."""

from __future__ import annotations

import asyncio
import gzip
import time
import zlib
from collections.abc import Iterator

import pytest
from aiohttp import web

from gpuwatch.config import ScrapeSettings
from gpuwatch.fmt import LINE_LIMIT
from gpuwatch.httpclient import async_client
from gpuwatch.series import EngineHistory
from gpuwatch.snapshot import collect
from gpuwatch.sources.scrape import scrape
from tests.conftest import fixture_text
from tests.functional.servers import ThreadedServer
from tests.helpers import refusing_port

GOOD = fixture_text("vllm-3.prom")


async def good(_: web.Request) -> web.Response:
    return web.Response(text=GOOD, content_type="text/plain")


async def error500(_: web.Request) -> web.Response:
    return web.Response(status=500, text="boom")


async def html(_: web.Request) -> web.Response:
    return web.Response(
        text="<!DOCTYPE html><html><body>login</body></html>", content_type="text/html"
    )


async def truncated(_: web.Request) -> web.Response:
    cut = GOOD.index('vllm:num_requests_waiting{engine="0"') + 30
    return web.Response(text=GOOD[:cut], content_type="text/plain")


async def bad_utf8(_: web.Request) -> web.Response:
    return web.Response(body=b"vllm:num_requests_running 1\n# \xff\xfe\n")


async def huge(request: web.Request) -> web.StreamResponse:
    # No Content-Length: the cap must hold while streaming, not only on the header.
    resp = web.StreamResponse()
    await resp.prepare(request)
    line = b"# " + b"x" * 1022 + b"\n"
    for _ in range(20 * 1024):
        await resp.write(line)
    return resp


async def huge_declared(_: web.Request) -> web.Response:
    return web.Response(body=b"# x\n" * (5 * 1024 * 1024))


async def nan_inf(_: web.Request) -> web.Response:
    return web.Response(
        text=(
            'vllm:num_requests_running{model_name="m"} NaN\n'
            'vllm:num_requests_waiting{model_name="m"} +Inf\n'
            'vllm:generation_tokens_total{model_name="m"} 12\n'
        )
    )


async def no_inf(_: web.Request) -> web.Response:
    return web.Response(
        text=(
            "# TYPE vllm:time_to_first_token_seconds histogram\n"
            'vllm:time_to_first_token_seconds_bucket{le="0.5",model_name="m"} 3\n'
            'vllm:time_to_first_token_seconds_bucket{le="1.0",model_name="m"} 4\n'
            'vllm:time_to_first_token_seconds_count{model_name="m"} 4\n'
            'vllm:num_requests_running{model_name="m"} 2\n'
        )
    )


async def slow(_: web.Request) -> web.Response:
    await asyncio.sleep(30)
    return web.Response(text=GOOD)


async def trickle(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse()
    await resp.prepare(request)
    for _ in range(300):
        await resp.write(b"# still here\n")
        await asyncio.sleep(0.1)
    return resp


async def huge_name(_: web.Request) -> web.Response:
    return web.Response(text="x" * (8 * 1024 * 1024) + " 1\n")


async def long_reason(_: web.Request) -> web.Response:
    return web.Response(status=503, reason="Busy " + "y" * 20_000)


async def long_garbage(_: web.Request) -> web.Response:
    # Long enough to need clipping, short enough (under MAX_LINE_CHARS) to reach the parser.
    return web.Response(text='vllm:num_requests_running{model_name="' + "z" * 50_000 + "\n")


async def long_label(_: web.Request) -> web.Response:
    line = 'vllm:num_requests_running{model_name="' + "m" * (4 * 1024 * 1024) + '"} 7\n'
    return web.Response(text=GOOD + line)


def _gzip_stream(size: int, wrap: int = zlib.MAX_WBITS | 16) -> bytes:
    """``size`` newlines (a valid, empty page) compressed, built without holding them."""
    packer = zlib.compressobj(9, zlib.DEFLATED, wrap)
    mib = b"\n" * (1024 * 1024)
    return b"".join([*(packer.compress(mib) for _ in range(size // len(mib))), packer.flush()])


BOMB = _gzip_stream(64 * 1024 * 1024)  # 62 KiB that inflate to 64 MiB


def _encoded(body: bytes, coding: str) -> web.Response:
    return web.Response(body=body, headers={"Content-Encoding": coding})


async def gzip_bomb(_: web.Request) -> web.Response:
    return _encoded(BOMB, "gzip")


async def double_gzip_bomb(_: web.Request) -> web.Response:
    return _encoded(gzip.compress(BOMB), "gzip, gzip")


async def gzip_good(_: web.Request) -> web.Response:
    return _encoded(gzip.compress(GOOD.encode()), "gzip")


async def deflate_raw(_: web.Request) -> web.Response:
    packer = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)  # what some servers send
    return _encoded(packer.compress(GOOD.encode()) + packer.flush(), "deflate")


async def gzip_corrupt(_: web.Request) -> web.Response:
    return _encoded(b"\x1f\x8b" + b"not gzip at all" * 10, "gzip")


async def brotli(_: web.Request) -> web.Response:
    return _encoded(b"\x0b\x02\x80hello\x03", "br")


ROUTES = {
    "/good": good,
    "/500": error500,
    "/html": html,
    "/truncated": truncated,
    "/utf8": bad_utf8,
    "/huge": huge,
    "/huge-declared": huge_declared,
    "/nan": nan_inf,
    "/noinf": no_inf,
    "/slow": slow,
    "/trickle": trickle,
    "/huge-name": huge_name,
    "/long-reason": long_reason,
    "/long-garbage": long_garbage,
    "/long-label": long_label,
    "/gzip-bomb": gzip_bomb,
    "/double-gzip-bomb": double_gzip_bomb,
    "/gzip-good": gzip_good,
    "/deflate-raw": deflate_raw,
    "/gzip-corrupt": gzip_corrupt,
    "/br": brotli,
}


@pytest.fixture(scope="module")
def server() -> Iterator[ThreadedServer]:
    with ThreadedServer(ROUTES) as srv:
        yield srv


EXPECTED_ERRORS = {
    "/500": "HTTP 500 Internal Server Error",
    "/html": "not a Prometheus metrics page (got HTML)",
    "/truncated": "malformed metrics page",
    "/utf8": "body is not valid UTF-8 (byte 30)",
    "/huge": "body exceeds the 16 MiB limit",
    "/huge-declared": "bytes exceeds the 16 MiB limit",
    "/slow": "timed out",
    "/trickle": "timed out after 1.5 s",
    # Refused while inflating, the moment the decoded body passes the limit (before: inflated
    # whole chunks, 175-304 MiB for a 1 MB bomb, then "exceeds"; the memory is in
    # bench/scrape_memory.py).
    "/gzip-bomb": "body inflates past the 16 MiB limit",
    "/double-gzip-bomb": "body inflates past the 16 MiB limit",
    "/gzip-corrupt": "body does not inflate as its Content-Encoding gzip",
    "/br": "unsupported Content-Encoding 'br'",
}


async def test_each_bad_source_has_one_line_reason_and_good_still_reports(
    server: ThreadedServer,
) -> None:
    with refusing_port() as port:
        refused = f"http://127.0.0.1:{port}/metrics"
        urls = [server.url(p) for p in ["/good", *EXPECTED_ERRORS]] + [refused]
        started = time.monotonic()
        snap = await collect(urls, bounds=ScrapeSettings(timeout_s=1.5))
        elapsed = time.monotonic() - started
    by_source = {r.source: r for r in snap.results}
    good_result = by_source[server.url("/good")]
    assert good_result.error is None
    assert good_result.engines[0].generation_tokens_total == 600
    for path, reason in EXPECTED_ERRORS.items():
        error = by_source[server.url(path)].error
        assert error is not None and reason in error, (path, error)
        assert "\n" not in error
    assert by_source[refused].error == f"connection refused ({refused.split('/')[2]})"
    assert not snap.ok
    # Scrapes run concurrently: the slow ones cost one timeout, not one each.
    assert elapsed < 10


async def test_nan_inf_and_missing_inf_bucket_are_warnings_not_failures(
    server: ThreadedServer,
) -> None:
    async with async_client() as client:
        nan = await scrape(client, server.url("/nan"))
        noinf = await scrape(client, server.url("/noinf"))
    assert nan.error is None and nan.engines[0].generation_tokens_total == 12
    assert nan.engines[0].running is None and nan.engines[0].waiting is None
    assert len(nan.warnings) == 2
    assert noinf.error is None and noinf.engines[0].running == 2
    assert noinf.warnings == [
        "vllm:time_to_first_token_seconds has no +Inf bucket: ttft quantiles unknown"
    ]


async def test_counter_going_backwards_between_scrapes_is_an_event() -> None:
    pages = iter(
        [
            GOOD,
            GOOD.replace(
                'vllm:generation_tokens_total{engine="0",model_name="Qwen/Qwen3-0.6B"} 600.0',
                'vllm:generation_tokens_total{engine="0",model_name="Qwen/Qwen3-0.6B"} 5.0',
            ),
        ]
    )

    async def changing(_: web.Request) -> web.Response:
        return web.Response(text=next(pages))

    with ThreadedServer({"/metrics": changing}) as srv:
        history = EngineHistory()
        events = []
        async with async_client() as client:
            for t in (0.0, 1.0):
                result = await scrape(client, srv.url("/metrics"))
                events += history.update(t, result.engines[0])
    assert len(events) == 1
    assert "generation_tokens_total went backwards (600 -> 5)" in events[0]


@pytest.mark.parametrize(
    ("path", "start"),
    [
        ("/huge-name", "no known serving metrics (first families: xxx"),
        ("/long-reason", "HTTP 503 Busy yyy"),
        ("/long-garbage", "malformed metrics page: "),
    ],
)
async def test_foreign_text_in_an_error_is_one_bounded_line(
    server: ThreadedServer, path: str, start: str
) -> None:
    async with async_client() as client:
        result = await scrape(client, server.url(path))
    assert result.error is not None and result.error.startswith(start), result.error
    assert len(result.error) <= LINE_LIMIT and "..." in result.error


@pytest.mark.parametrize("path", ["/gzip-good", "/deflate-raw"])
async def test_a_compressed_page_is_read_like_a_plain_one(
    server: ThreadedServer, path: str
) -> None:
    async with async_client() as client:
        result = await scrape(client, server.url(path))
    assert result.error is None and result.engines[0].generation_tokens_total == 600


async def test_a_4_mib_label_is_dropped_unread_with_one_line_and_the_rest_reports(
    server: ThreadedServer,
) -> None:
    """Regression: the model-label regex kept ~140 bytes a character: one 4 MiB label took a
    scrape to 600 MiB (15 MiB: 2.1 GiB), and the label became an engine named by it. The
    line is dropped before any regex or parser reads it (peak memory: bench/scrape_memory.py)."""
    async with async_client() as client:
        result = await scrape(client, server.url("/long-label"))
    assert result.error is None
    assert [e.model for e in result.engines] == ["Qwen/Qwen3-0.6B"]
    assert all(e.running != 7 for e in result.engines)
    assert result.warnings[0] == (
        "1 line(s) over 64 KiB dropped unread (a label that long is a broken exporter)"
    )
