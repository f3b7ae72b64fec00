"""The knob adapters' HTTP (control/knobs/http.py) and the Ray adapter's write, against real
HTTP servers on 127.0.0.1 that answer badly: each failure is one KnobError saying where."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from gpuwatch.control.knobs import http as knob_http
from gpuwatch.control.knobs.base import KnobChange, KnobEndpoint, KnobError
from gpuwatch.control.knobs.http import KnobHttp
from gpuwatch.control.knobs.ray import RayServeKnobs
from tests.functional.servers import ThreadedServer
from tests.helpers import refusing_port

ANSWER = Path(__file__).parent.parent / "fixtures" / "ray" / "serve-applications.json"


async def _seen(request: web.Request) -> web.Response:
    return web.json_response({"auth": request.headers.get("Authorization")})


async def _error(request: web.Request) -> web.Response:
    return web.Response(status=500, text="Traceback (most recent call last):\n  boom\x1b[31m")


async def _not_json(request: web.Request) -> web.Response:
    return web.Response(text="<html>a login page</html>")


async def _big(request: web.Request) -> web.Response:
    return web.Response(body=b"[" + b"1," * 5000 + b"1]")


async def _empty(request: web.Request) -> web.Response:
    return web.Response()


ROUTES = {"/seen": _seen, "/error": _error, "/html": _not_json, "/big": _big, "/empty": _empty}


@pytest.fixture(scope="module")
def server() -> Iterator[ThreadedServer]:
    with ThreadedServer(ROUTES) as s:
        yield s


async def test_the_credential_goes_as_a_bearer_token(server: ThreadedServer) -> None:
    http = KnobHttp(KnobEndpoint("litellm", server.url(""), credential="sk-1"))
    try:
        assert await http.call("GET", "/seen") == {"auth": "Bearer sk-1"}
        assert await http.call("POST", "/empty", body={"a": 1}) is None
    finally:
        await http.close()


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/error", "HTTP 500: Traceback (most recent call last): boom"),
        ("/html", "the answer is not JSON"),
        ("/big", "bytes exceeds the"),
    ],
)
async def test_a_bad_answer_is_one_error_naming_the_request(
    server: ThreadedServer, path: str, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(knob_http, "MAX_ANSWER_BYTES", 4096)
    http = KnobHttp(KnobEndpoint("ray", server.url("")))
    try:
        with pytest.raises(KnobError) as caught:
            await http.call("GET", path)
    finally:
        await http.close()
    text = str(caught.value)
    assert text.startswith(f"ray GET {server.url(path)}: ")
    assert message in text
    assert "\n" not in text and "\x1b" not in text


async def test_a_dead_endpoint_is_unreachable() -> None:
    with refusing_port() as port:
        http = KnobHttp(KnobEndpoint("vllm", f"http://127.0.0.1:{port}"))
        try:
            with pytest.raises(KnobError, match=r"vllm GET .*/is_paused: unreachable"):
                await http.call("GET", "/is_paused")
        finally:
            await http.close()


def test_a_credential_that_cannot_be_sent_is_refused_up_front() -> None:
    with pytest.raises(KnobError, match="litellm credential cannot be sent: it contains a space"):
        KnobHttp(KnobEndpoint("litellm", "http://h", credential="sk 1"))


async def test_rays_refusal_of_the_put_is_its_own_words() -> None:
    """A PUT Ray refuses (400 with its validation error): the error carries Ray's text."""
    answer = json.loads(ANSWER.read_text())
    puts: list[object] = []

    async def apps(request: web.Request) -> web.Response:
        if request.method == "PUT":
            puts.append(await request.json())
            return web.Response(status=400, text="1 validation error for ServeDeploySchema")
        return web.json_response(answer)

    with ThreadedServer({"/api/serve/applications/": apps}) as ray:
        adapter = RayServeKnobs(KnobEndpoint("ray", ray.url("")))
        try:
            knobs = await adapter.read()
            shown = next(k for k in knobs if k.target == "llm/Forward" and k.name == "num_replicas")
            with pytest.raises(KnobError, match="HTTP 400: 1 validation error for Serve"):
                await adapter.write([KnobChange(shown, 2)])
        finally:
            await adapter.close()
    assert len(puts) == 1
