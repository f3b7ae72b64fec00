"""One normal form of the path decides the lane, the caps and what the upstream is asked for."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.functional.gatekit import rig

# Each of these is /v1/completions to a server that resolves paths (yarl, Starlette, ...).
DISGUISED = [
    "/v1/x/%2e%2e/completions",
    "/v1/x/../completions",
    "/v1/./completions",
    "/v1//completions",
    "//v1/completions",
    "/v1/%63ompletions",
    "/v1/x/%2E./completions",
]


async def test_a_disguised_path_stays_in_its_lane_with_its_caps(tmp_path: Path) -> None:
    """Regression: the lane was chosen on the raw path (default lane for /v1/x/%2e%2e/...) and
    the request forwarded on the resolved one, so a closed chat lane and its caps were skipped."""
    async with rig(tmp_path) as r:
        status, _ = await r.patch({"lanes": {"chat": {"max_inflight": 0, "max_queue": 0}}})
        assert status == 200
        for target in DISGUISED:
            reply = await r.request("POST", target, b'{"prompt": "hi"}')
            assert reply.status == 429, (target, reply)
            assert reply.json()["error"]["code"] == "queue_full"
        assert r.upstream.arrivals == []
        await r.patch({"lanes": {"chat": {"max_inflight": 4, "max_output_tokens": 8}}})
        for target in DISGUISED:
            reply = await r.request("POST", target, b'{"prompt": "hi", "max_tokens": 999}')
            assert reply.status == 200 and reply.json()["max_tokens"] == 8, (target, reply)
        # The upstream is asked for the normal form, the one the lane was chosen on.
        assert r.upstream.paths == ["/v1/completions"] * len(DISGUISED)


async def test_dot_segments_cannot_reach_paths_outside_v1(tmp_path: Path) -> None:
    """Regression: GET /v1/../sim/gpu matched the /v1/ rule, then went upstream as /sim/gpu."""
    async with rig(tmp_path) as r:
        for target in ("/v1/../sim/gpu", "/v1/%2e%2e/sim/gpu", "/v1/x/../../admin-x"):
            reply = await r.request("GET", target)
            assert reply.status == 404, (target, reply)
            assert "is not routed by this gate" in reply.json()["error"]["message"]


@pytest.mark.parametrize(
    ("target", "reason"),
    [
        ("/v1/a%2F..%2F..%2Fcompletions", "encoded %2F"),
        ("/v1/a%5c../completions", "encoded %5C"),
        ("/v1/../../completions", "climbs above the root"),
        ("/v1/completions%00", "encoded %00"),
        ("/v1/%zzcompletions", "malformed percent-escape"),
        ("/v1/compl\x01etions", "malformed"),  # refused by the HTTP parser already
    ],
)
async def test_paths_without_one_meaning_are_400(tmp_path: Path, target: str, reason: str) -> None:
    async with rig(tmp_path) as r:
        reply = await r.raw(
            f"POST {target} HTTP/1.1\r\nHost: g\r\nConnection: close\r\n"
            "Content-Length: 2\r\n\r\n{}".encode("latin-1")
        )
        assert reply.status == 400, reply
        assert reason in reply.body.decode(), reply
        assert r.upstream.arrivals == []
