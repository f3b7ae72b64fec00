"""The admin plane: auth, actors, hostile PATCH bodies, ETag / If-Match, the audit log, and the
state file read back at start."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import aiohttp
import pytest

from gpuwatch.gate.config import GateConfig
from gpuwatch.gate.limits import DEFAULT_LANES
from gpuwatch.gate.server import start_gate
from gpuwatch.gate.state import StateError
from tests.functional.gatekit import rig

UP = "http://127.0.0.1:9"
CONFIG = GateConfig(DEFAULT_LANES)


async def test_401_names_the_scheme(tmp_path: Path) -> None:
    _, served = await start_gate(UP, CONFIG, token="tok", state_file=tmp_path / "s.json")
    try:
        async with aiohttp.ClientSession() as s, s.get(f"{served.url}/admin/status") as r:
            assert r.status == 401
            assert r.headers["WWW-Authenticate"] == 'Bearer realm="gpuwatch-admin"'
    finally:
        await served.close()


@pytest.mark.parametrize("actor", ["eve\u202egnp.exe", "mallory\x1b[31m", "a" * 200, "x\u200by"])
async def test_actors_that_would_mislead_a_terminal_are_refused(tmp_path: Path, actor: str) -> None:
    """Regression: bidi overrides and escape sequences went into the audit trail as sent."""
    async with rig(tmp_path) as r:
        reply = await r.request(
            "PATCH", "/admin/limits", b'{"paused": true}', headers={"X-Gpuwatch-Actor": actor}
        )
        assert reply.status == 400, reply  # by the gate, or already by the HTTP parser (ESC)
        assert r.gate.state.audit == [] and r.gate.state.limits.paused is False


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 20_000 + b"]" * 20_000,
        b'{"lanes": {"chat": {"max_queue": ' + b"9" * 5000 + b"}}}",
        b'{"lanes": {"chat": {"max_queue": 1' + b"0" * 100 + b"}}}",
        b'{"lanes": {"chat": {"queue_timeout_s": 1e100}}}',
        b'{"paused": true, "paused": false}',
        b"\xff",
    ],
    ids=["deep", "5000-digits", "1e100-as-int", "huge-timeout", "dup", "not-utf8"],
)
async def test_hostile_patch_bodies_are_400(tmp_path: Path, body: bytes) -> None:
    """Regression: deep nesting and 5000-digit numbers were 500s; 10**100 was accepted."""
    async with rig(tmp_path) as r:
        before = r.gate.state.limits
        async with (
            aiohttp.ClientSession() as s,
            s.patch(
                f"{r.url}/admin/limits", data=body, headers={"Content-Type": "application/json"}
            ) as resp,
        ):
            reply = await resp.json()
        assert resp.status == 400, reply
        assert len(reply["error"]["message"]) <= 300
        assert r.gate.state.limits == before


async def test_etag_and_if_match(tmp_path: Path) -> None:
    """Regression: no ETag on GET; If-Match: * (any current version) was a 409."""
    async with rig(tmp_path) as r, aiohttp.ClientSession() as s:
        async with s.get(f"{r.url}/admin/limits") as resp:
            assert resp.headers["ETag"] == '"1"'
        for if_match, expected in [("*", 200), ('"2"', 200), ('W/"3"', 409), ('"1", "3"', 200),
                                   ("4", 200), ('"9"', 409)]:  # fmt: skip
            async with s.patch(
                f"{r.url}/admin/limits", json={"paused": False}, headers={"If-Match": if_match}
            ) as resp:
                assert resp.status == expected, if_match
                if expected == 200:
                    version = (await resp.json())["version"]
                    assert resp.headers["ETag"] == f'"{version}"'


async def test_audit_is_an_append_only_log_and_the_state_file_stays_small(tmp_path: Path) -> None:
    """Regression: every change rewrote (and fsynced) the whole trail inside the state file."""
    path = tmp_path / "state.json"
    _, served = await start_gate(UP, CONFIG, state_file=path)
    sizes = []
    try:
        async with aiohttp.ClientSession() as s:
            for n in range(40):
                async with s.patch(
                    f"{served.url}/admin/limits",
                    json={"lanes": {"chat": {"max_queue": 10 + n}}},
                    headers={"X-Gpuwatch-Actor": f"op{n}"},
                ) as resp:
                    assert resp.status == 200
                sizes.append(path.stat().st_size)
            async with s.get(f"{served.url}/admin/audit?limit=3") as resp:
                newest = (await resp.json())["entries"]
    finally:
        await served.close()
    assert max(sizes) - min(sizes) <= 2  # the limits file does not grow with the trail
    assert "audit" not in json.loads(path.read_text())
    lines = (tmp_path / "state.json.audit.jsonl").read_text().splitlines()
    assert [json.loads(line)["actor"] for line in lines] == [f"op{n}" for n in range(40)]
    assert [e["actor"] for e in newest] == ["op39", "op38", "op37"]
    gate, served = await start_gate(UP, CONFIG, state_file=path)  # read back after a restart
    await served.close()
    assert gate.state.audit[0].actor == "op39" and len(gate.state.audit) == 40


async def test_a_torn_audit_line_is_cut_off_and_the_gate_comes_up_after_a_patch(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression: start-up skipped a torn last line (a kill -9 mid-append) but left it in the
    file; the next PATCH appended right after it, and the start after that refused the file
    ("invalid JSON; fix or remove it"): the gate stayed down until someone edited it by hand."""
    path = tmp_path / "state.json"
    audit = tmp_path / "state.json.audit.jsonl"

    async def start_and_patch(paused: bool, actor: str, before: bytes | None = None) -> None:
        _, served = await start_gate(UP, CONFIG, state_file=path)
        try:
            if before is not None:
                assert audit.read_bytes() == before  # cut off at start-up, durably
            headers = {"X-Gpuwatch-Actor": actor}
            async with (
                aiohttp.ClientSession() as s,
                s.patch(
                    f"{served.url}/admin/limits", json={"paused": paused}, headers=headers
                ) as r,
            ):
                assert r.status == 200
        finally:
            await served.close()

    await start_and_patch(True, "a")
    whole = audit.read_bytes()
    audit.write_bytes(whole + b'{"time": 17000, "actor": "b", "ver')  # the crash, mid-write
    await start_and_patch(False, "c", before=whole)
    dropped = [r.getMessage() for r in caplog.records if "incomplete last line" in r.getMessage()]
    assert dropped == [
        f"audit log {audit}: dropped an incomplete last line (34 bytes) a crash left"
    ]
    gate, served = await start_gate(UP, CONFIG, state_file=path)  # the start that used to fail
    await served.close()
    assert [e.actor for e in gate.state.audit] == ["c", "a"]
    assert gate.state.limits.paused is False


async def test_a_schema_1_state_file_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    limits = {"version": 3, "paused": False, "lanes": {"chat": {"max_inflight": 5}}}
    entries = [{"time": 2.0, "actor": "b", "version": 3, "change": {}},
               {"time": 1.0, "actor": "a", "version": 2, "change": {}}]  # fmt: skip
    path.write_text(json.dumps({"schema": 1, "limits": limits, "audit": entries}))
    gate, served = await start_gate(UP, CONFIG, state_file=path)
    await served.close()
    assert gate.state.limits.version == 3 and gate.state.limits.lanes["chat"].max_inflight == 5
    assert [e.actor for e in gate.state.audit] == ["b", "a"]
    assert json.loads(path.read_text())["schema"] == 2


@pytest.mark.parametrize(
    ("limits", "key"),
    [
        ({"version": 2, "lanes": ["chat"]}, "limits.lanes"),
        ({"version": 2, "lanes": None}, "limits.lanes"),
        ({"version": 2, "lanes": {"chat": None}}, "lanes.chat"),
        ({"version": 2, "lanes": {"chat": {"max_queue": 10**40}}}, "lanes.chat.max_queue"),
        ({"version": 2, "paused": "no"}, "paused"),
        ({"version": 10**30}, "limits.version"),
        ({"version": "2"}, "limits.version"),
    ],
)
async def test_corrupt_limits_refuse_to_start_naming_file_and_key(
    tmp_path: Path, limits: dict, key: str
) -> None:
    """Regression: "lanes" as a list or null escaped as a traceback."""
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"schema": 1, "limits": limits}))  # read by old and new gates
    with pytest.raises(StateError) as info:
        await start_gate(UP, CONFIG, state_file=path)
    assert str(path) in str(info.value) and f"key '{key}'" in str(info.value)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (
            '{"schema": 1, "limits": {"version": 1}, "audit": {"a": 1}}',
            "key 'audit' must be a list",
        ),
        ('{"schema": 1, "limits": {"version": 1}, "audit": [1]}', "key 'audit[0]'"),
        ('{"schema": 1, "limits": {"version": 1}, "audit": [{"actor": 5}]}', "key 'audit[0]'"),
        ('{"schema": 2, "limits": {"version": 1' + "0" * 5000 + "}}", "more than 64 digits"),
        ('{"schema": 2, "x": ' + "[" * 5000 + "]" * 5000 + "}", "nesting deeper"),
    ],
)
async def test_corrupt_state_file_is_refused_with_a_reason(
    tmp_path: Path, text: str, reason: str
) -> None:
    path = tmp_path / "state.json"
    path.write_text(text)
    with pytest.raises(StateError) as info:
        await start_gate(UP, CONFIG, state_file=path)
    assert str(path) in str(info.value) and reason in str(info.value)
    assert path.read_text() == text  # never reset


async def test_a_persisted_lane_missing_from_the_config_is_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"schema": 2, "limits": {"version": 4, "lanes": {"batch": {}}}}))
    gate, served = await start_gate(UP, CONFIG, state_file=path)
    await served.close()
    assert gate.state.limits.version == 4
    assert any(
        "lane 'batch' is not in the config" in r.getMessage() and r.levelno == logging.WARNING
        for r in caplog.records
    )
