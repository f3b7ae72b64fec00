"""GateClient: where the gate's contract is read (409 shape, tokens it can send, answers that
are not the admin API's)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from gpuwatch.adminapi import LimitsPatch
from gpuwatch.control.gate import MAX_ANSWER_BYTES, GateClient, GateConflict, GateError
from gpuwatch.control.guard import Guard
from tests.functional.gatekit import rig
from tests.functional.servers import ThreadedServer


async def test_conflict_is_typed_for_clients(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        async with GateClient(r.url, None, Guard(), actor="alice@box") as alice:
            await alice.patch(LimitsPatch(lanes={"chat": {"max_inflight": 6}}))
        async with GateClient(r.url, None, Guard(), actor="bob@box") as bob:
            with pytest.raises(GateConflict) as info:
                await bob.patch(LimitsPatch(lanes={"chat": {"max_inflight": 7}}), if_match=1)
        conflict = info.value
        assert (conflict.status, conflict.actor, conflict.version) == (409, "alice@box", 2)
        assert conflict.limits is not None and conflict.limits.lanes["chat"].max_inflight == 6


def test_a_token_that_cannot_be_sent_is_a_clear_error() -> None:
    """Regression: httpx failed with LocalProtocolError, reported as "unreachable"."""
    with pytest.raises(GateError, match="admin token cannot be sent: it contains U\\+00E9"):
        GateClient("http://127.0.0.1:9", "caf\u00e9", Guard())


def _answer(body: str, status: int = 200) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(_: web.Request) -> web.Response:
        return web.Response(text=body, status=status, content_type="application/json")

    return handle


async def _ask(url: str, what: str) -> Any:
    async with GateClient(url, None, Guard()) as client:
        if what == "limits":
            return await client.limits()
        if what == "status":
            return await client.status()
        if what == "audit":
            return await client.audit()
        return await client.patch(LimitsPatch(paused=True), if_match=1)


@pytest.mark.parametrize(
    ("what", "body", "says"),
    [
        ("limits", '{"lanes": {}}', "/admin/limits is not its API (limits: no version)"),
        ("limits", '{"version": 1, "lanes": {"chat": {"max_inflight": "many"}}}',
         "limits.lanes.chat.max_inflight: must be an integer, got a string"),
        ("limits", '{"version": 1, "lanes": {"chat": [1]}}',
         "limits.lanes.chat: must be an object, got an array"),
        ("status", "[1, 2]", "/admin/status is not its API (status: must be an object"),
        ("status", '{"version": 1, "lanes": {"chat": {"tenants": [{"id": 5}]}}}',
         "status.lanes.chat.tenants[0].id: must be a string, got a number"),
        ("status", '{"version": 1, "lanes": {"chat": {"latency": {"1m": {"ttft": 3}}}}}',
         "status.lanes.chat.latency.1m.ttft: must be an object, got a number"),
        ("status", '{"version": 1, "lanes": {"chat": {"adaptive": {"history": [[1]]}}}}',
         "history[0]: must be [seconds ago, limit]"),
        ("audit", '{"entries": "none"}', "/admin/audit is not its API (audit: no list"),
        ("patch", '{"version": true, "lanes": {}}', "limits.version: must be an integer, got a boolean"),
    ],
)  # fmt: skip
async def test_an_answer_that_is_not_the_api_is_one_clear_error(
    what: str, body: str, says: str
) -> None:
    """Whatever answers at the admin URL (an old gate, a proxy, a hostile server), a reader
    gets one GateError saying where the answer is wrong, never a KeyError or TypeError."""
    routes = {f"/admin/{what if what != 'patch' else 'limits'}": _answer(body)}
    with ThreadedServer(routes) as server, pytest.raises(GateError) as info:
        await _ask(server.url(""), what)
    assert says in str(info.value)
    assert info.value.status == 200


async def test_a_409_of_another_shape_is_still_a_conflict() -> None:
    body = json.dumps({"error": {"message": "changed"}, "limits": {"lanes": "x"}, "actor": 7})
    with (
        ThreadedServer({"/admin/limits": _answer(body, 409)}) as server,
        pytest.raises(GateConflict) as info,
    ):
        await _ask(server.url(""), "patch")
    conflict = info.value
    assert (conflict.actor, conflict.version, conflict.limits) == (None, None, None)
    assert "HTTP 409: changed" in str(conflict)


async def test_entries_that_are_not_audit_entries_are_left_out() -> None:
    entries = [
        {"time": 1.0, "actor": "alice", "version": 2, "change": {"paused": True}},
        {"time": 2.0, "actor": 3, "version": 3},
        "junk",
    ]
    with ThreadedServer({"/admin/audit": _answer(json.dumps({"entries": entries}))}) as server:
        read = await _ask(server.url(""), "audit")
    assert [(e.actor, e.version, e.change.paused) for e in read] == [("alice", 2, True)]


async def test_an_answer_past_the_limit_is_refused_as_it_arrives() -> None:
    """A status or limits answer is read at most MAX_ANSWER_BYTES: one GateError saying so,
    whether the length is declared or the body just keeps coming."""
    endless = b"[" + b"1," * (MAX_ANSWER_BYTES // 2) + b"1]"

    async def declared(_: web.Request) -> web.Response:
        return web.Response(body=endless, content_type="application/json")

    async def streamed(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        for start in range(0, len(endless), 65536):
            await response.write(endless[start : start + 65536])
        return response

    routes = {"/admin/status": declared, "/admin/limits": streamed}
    said = {"status": f"body of {len(endless)} bytes exceeds", "limits": "body exceeds"}
    with ThreadedServer(routes) as server:
        for what, reason in said.items():
            with pytest.raises(GateError) as info:
                await _ask(server.url(""), what)
            assert str(info.value) == (
                f"gate {server.url('')}: /admin/{what}: {reason} the 4 MiB limit"
            )


async def test_an_error_answer_that_is_not_json_is_its_first_bytes_on_one_line() -> None:
    with (
        ThreadedServer({"/admin/status": _answer("<html>nope</html>" * 100, 503)}) as server,
        pytest.raises(GateError) as info,
    ):
        await _ask(server.url(""), "status")
    assert info.value.status == 503
    assert str(info.value).startswith("HTTP 503: <html>nope</html>")
    assert len(str(info.value)) <= 300 and "\n" not in str(info.value)
