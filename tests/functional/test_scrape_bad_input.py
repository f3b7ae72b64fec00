"""Every kind of bad source gives a one-line reason; the others still report (real HTTP)."""

from __future__ import annotations

import asyncio
import time

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
    return web.Response(text='vllm:num_requests_running{model_name="' + "z" * 100_000 + "\n")


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
}


@pytest.fixture(scope="module")
def server():
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
}


async def test_each_bad_source_has_one_line_reason_and_good_still_reports(server) -> None:
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


async def test_nan_inf_and_missing_inf_bucket_are_warnings_not_failures(server) -> None:
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
async def test_foreign_text_in_an_error_is_one_bounded_line(server, path: str, start: str) -> None:
    async with async_client() as client:
        result = await scrape(client, server.url(path))
    assert result.error is not None and result.error.startswith(start), result.error
    assert len(result.error) <= LINE_LIMIT and "..." in result.error
