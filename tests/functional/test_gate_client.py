"""GateClient: where the gate's contract is read (409 shape, tokens it can send)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwatch.control.gate import GateClient, GateConflict, GateError
from gpuwatch.control.guard import Guard
from tests.functional.gatekit import rig


async def test_conflict_is_typed_for_clients(tmp_path: Path) -> None:
    async with rig(tmp_path) as r:
        async with GateClient(r.url, None, Guard(), actor="alice@box") as alice:
            await alice.patch({"lanes": {"chat": {"max_inflight": 6}}})
        async with GateClient(r.url, None, Guard(), actor="bob@box") as bob:
            with pytest.raises(GateConflict) as info:
                await bob.patch({"lanes": {"chat": {"max_inflight": 7}}}, if_match=1)
        conflict = info.value
        assert (conflict.status, conflict.actor, conflict.version) == (409, "alice@box", 2)
        assert conflict.limits["lanes"]["chat"]["max_inflight"] == 6


def test_a_token_that_cannot_be_sent_is_a_clear_error() -> None:
    """Regression: httpx failed with LocalProtocolError, reported as "unreachable"."""
    with pytest.raises(GateError, match="admin token cannot be sent: it contains U\\+00E9"):
        GateClient("http://127.0.0.1:9", "caf\u00e9", Guard())
