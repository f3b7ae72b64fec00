"""Random JSON thrown at PATCH /admin/limits: only 200 / 400 / 409, and the state file stays valid."""

from __future__ import annotations

import asyncio
import json
import tempfile
from dataclasses import replace
from pathlib import Path

import aiohttp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuwatch.gate.config import GateConfig
from gpuwatch.gate.limits import DEFAULT_LANES, LANE_KEYS
from gpuwatch.gate.server import start_gate
from gpuwatch.gate.state import load as load_state

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 300), st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["clamp", "reject", "", "x"]),
)  # fmt: skip
lane_patch = st.dictionaries(st.sampled_from([*LANE_KEYS, "bogus"]), scalars, max_size=4)
patches = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "paused": scalars,
            "version": scalars,
            "lanes": st.dictionaries(
                st.sampled_from(["chat", "embed", "image", "default", "nope"]),
                st.one_of(lane_patch, scalars),
                max_size=3,
            ),
        },
    ),
    st.recursive(
        scalars,
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
        max_leaves=6,
    ),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batch=st.lists(
        st.tuples(patches, st.one_of(st.none(), st.integers(0, 6))), min_size=1, max_size=8
    )
)
def test_random_patches_only_get_200_400_409_and_state_stays_valid(batch) -> None:  # type: ignore[no-untyped-def]
    asyncio.run(_run(batch))


async def _run(batch) -> None:  # type: ignore[no-untyped-def]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "state.json"
        config = GateConfig(DEFAULT_LANES)
        gate, served = await start_gate("http://127.0.0.1:9", config, state_file=path)
        try:
            async with aiohttp.ClientSession() as s:
                for body, if_match in batch:
                    headers = {"If-Match": str(if_match)} if if_match is not None else {}
                    async with s.patch(
                        f"{served.url}/admin/limits", data=json.dumps(body), headers=headers
                    ) as r:
                        assert r.status in (200, 400, 409), (body, r.status, await r.text())
                        data = await r.json()
                    if r.status == 200:
                        effective = data.pop("effective")
                        assert data == gate.state.limits.to_json()
                        assert effective == {
                            name: e.to_json() for name, e in gate.adaptive.effective().items()
                        }
                    reloaded = load_state(path, {lane.name: lane.limits for lane in DEFAULT_LANES})
                    assert reloaded.limits == gate.state.limits
                    for name, lane in gate.lanes.items():
                        configured = gate.state.limits.lanes[name]
                        if configured.policy == "adaptive":
                            # The effective limit, within the bounds; all else as configured.
                            low, high = (
                                min(configured.min_inflight, configured.max_inflight),
                                (configured.max_inflight),
                            )
                            assert low <= lane.limits.max_inflight <= high
                            lane_limits = replace(
                                lane.limits,
                                max_inflight=configured.max_inflight,
                                max_inflight_tokens=configured.max_inflight_tokens,
                            )
                            assert lane_limits == configured
                        else:
                            assert lane.limits == configured
        finally:
            await served.close()
