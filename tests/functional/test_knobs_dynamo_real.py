"""The Dynamo knob adapter against the real thing: NVIDIA Dynamo's frontend (ai-dynamo 1.6.1
from PyPI) with its mocker engine on CPU (tests/functional/dynamokit.py), and the fake the
other tests use held to the same answers. Skipped where the Dynamo venv is not made
(scripts/dynamo-venv.sh): ai-dynamo cannot go in the dev extras (see that script)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpuwatch.control.guard import Guard
from gpuwatch.control.knobs.apply import apply_changes
from gpuwatch.control.knobs.base import KnobChange, KnobConflict, KnobEndpoint, KnobError
from gpuwatch.control.knobs.dynamo import DynamoKnobs
from gpuwatch.gate.audit import AuditLog
from tests.functional.dynamokit import MODEL, running_dynamo
from tests.functional.stackfakes.dynamo import DynamoFake

START = ["--active-decode-blocks-threshold", "0.85"]


@pytest.fixture(scope="module")
def frontend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_dynamo(tmp_path_factory.mktemp("dynamo"), *START) as url:
        yield url


async def test_the_real_frontends_thresholds_are_read_set_and_refused(
    frontend: str, tmp_path: Path
) -> None:
    audit = AuditLog(tmp_path / "audit.jsonl")
    adapter = DynamoKnobs(KnobEndpoint("dynamo", frontend))
    try:
        knobs = {k.name: k for k in await adapter.read() if k.target == MODEL}
        decode = knobs["active_decode_blocks_threshold"]
        prefill = knobs["active_prefill_tokens_threshold"]
        assert (decode.value, prefill.value) == (0.85, None)  # as started; prefill never set
        changes = [KnobChange(decode, 0.6), KnobChange(prefill, 4096)]
        after = await apply_changes(adapter, changes, Guard(), audit, "t")
        now = {k.name: k.value for k in after if k.target == MODEL}
        assert now["active_decode_blocks_threshold"] == 0.6
        assert now["active_prefill_tokens_threshold"] == 4096
        assert now["active_prefill_tokens_threshold_frac"] is None  # not named: left alone

        # Changed behind our back (another operator's curl): refused, and the frontend keeps it.
        shown = next(k for k in after if k.key == decode.key)
        async with httpx.AsyncClient() as client:
            await client.post(f"{frontend}/busy_threshold", json={"model": MODEL, decode.name: 0.7})
        with pytest.raises(KnobConflict):
            await apply_changes(adapter, [KnobChange(shown, 0.3)], Guard(), audit, "t")
        current = {k.name: k.value for k in await adapter.read() if k.target == MODEL}
        assert current["active_decode_blocks_threshold"] == 0.7

        # The frontend's own refusal, in its words (the write as apply makes it).
        with pytest.raises(KnobError, match="HTTP 400: active_decode_blocks_threshold must be"):
            await adapter.write([KnobChange(shown, 1.5)])
    finally:
        await adapter.close()


# The same requests, in order, to the real frontend and to the fake.
EXCHANGES: list[dict[str, Any]] = [
    {"model": MODEL},
    {"model": MODEL, "active_decode_blocks_threshold": 0.5},
    {"model": MODEL, "active_prefill_tokens_threshold": 8192},
    {"model": MODEL, "active_decode_blocks_threshold": 1.5},
    {"model": MODEL, "active_prefill_tokens_threshold_frac": -0.1},
    {"model": MODEL, "active_prefill_tokens_threshold": -1},
    {"model": MODEL, "active_prefill_tokens_threshold": 1.5},
    {"model": "nope", "active_decode_blocks_threshold": 0.5},
    {"model": "nope"},
]


def _seen(client: httpx.Client, url: str) -> list[tuple[int, object]]:
    seen: list[tuple[int, object]] = []
    for body in EXCHANGES:
        answer = client.post(f"{url}/busy_threshold", json=body)
        parsed = answer.json()
        if answer.status_code == 422:
            # serde's wording of a type error differs between 1.6.1 and the source the fake
            # follows; what it says is wrong does not.
            parsed = "expected u64" in parsed["error"]
        seen.append((answer.status_code, parsed))
    listed = client.get(f"{url}/busy_threshold")
    seen.append((listed.status_code, listed.json()))
    return seen


async def test_the_fake_answers_as_the_real_frontend(frontend: str) -> None:
    with httpx.Client(timeout=5) as client:
        # The fake starts where the real frontend is now.
        fake = DynamoFake()
        for row in client.get(f"{frontend}/busy_threshold").json()["thresholds"]:
            fake.add(row.pop("model"), **{k: v for k, v in row.items() if v is not None})
        fake_url = await fake.start()
        try:
            real = _seen(client, frontend)
            # The fake serves from this event loop: its blocking client runs in a thread.
            faked = await asyncio.to_thread(_seen, client, fake_url)
        finally:
            await fake.stop()
    assert faked == real
