"""The pure parts of steering: output-cap steps, patches from keys, descriptions, reverts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from gpuwatch.adminapi import LaneLimits, Limits, LimitsPatch, TenantLimits
from gpuwatch.control.gate import GateClient
from gpuwatch.control.guard import Guard
from gpuwatch.control.steering import (
    BUDGET_STEPS,
    Steering,
    describe,
    patch_from,
    revert_of,
    show_value,
    step_output,
)
from tests.steeringfake import RecordingView

LIMITS = Limits.from_json(
    {
        "version": 3,
        "paused": False,
        "lanes": {
            "chat": {"max_inflight": 16, "max_queue": 64, "max_output_tokens": None},
            "embed": {"max_inflight": 32, "max_queue": 256, "max_output_tokens": None},
        },
    }
)


@pytest.mark.parametrize(
    ("current", "down", "expected"),
    [
        (None, True, 4096),
        (None, False, None),
        (4096, True, 2048),
        (4096, False, None),
        (128, True, 128),  # nothing below the last step: stays
        (128, False, 256),
        # Caps set elsewhere (the CLI, the form) step by value in the direction asked.
        (700, False, 1024),
        (700, True, 512),
        (3000, False, 4096),
        (3000, True, 2048),
        (100, True, 100),  # "lower" never raises
        (100, False, 128),
        (9000, False, None),
        (9000, True, 4096),
    ],
)
def test_step_output_moves_by_value_in_the_direction_asked(
    current: int | None, down: bool, expected: int | None
) -> None:
    assert step_output(current, down) == expected


def test_step_output_never_moves_against_the_direction() -> None:
    for current in [None, *range(1, 10000, 37)]:
        lower, higher = step_output(current, True), step_output(current, False)
        if current is not None:
            assert lower is not None and lower <= current
            assert higher is None or higher >= current


def test_keys_fold_into_one_patch_with_only_what_changed() -> None:
    ops = [
        ("chat", "max_inflight", lambda v: v + 1),
        ("chat", "max_inflight", lambda v: v + 1),
        ("chat", "max_queue", lambda v: v - 8),
        ("chat", "max_queue", lambda v: v + 8),  # back where it was: not in the patch
        ("", "paused", lambda v: not v),
    ]
    assert patch_from(LIMITS, ops).to_json() == {
        "paused": True,
        "lanes": {"chat": {"max_inflight": 18}},
    }


def test_describe_and_revert() -> None:
    patch = LimitsPatch(True, {"chat": {"max_inflight": 8, "max_output_tokens": 512}})
    assert describe(LIMITS, patch) == [
        "paused false -> true",
        "chat.max_inflight 16 -> 8",
        "chat.max_output_tokens none -> 512",
    ]
    assert revert_of(LIMITS, patch).to_json() == {
        "paused": False,
        "lanes": {"chat": {"max_inflight": 16, "max_output_tokens": None}},
    }


def test_the_budget_keys_step_over_their_own_steps() -> None:
    assert step_output(None, True, BUDGET_STEPS) == 512_000
    assert step_output(512_000, True, BUDGET_STEPS) == 256_000
    assert step_output(100_000, False, BUDGET_STEPS) == 128_000
    assert step_output(512_000, False, BUDGET_STEPS) is None
    assert step_output(8_000, True, BUDGET_STEPS) == 8_000


def test_a_patch_for_a_key_an_older_gate_lacks() -> None:
    base = Limits.from_json({"version": 1, "lanes": {"chat": {"max_inflight": 4}}})
    ops = [("chat", "max_inflight_tokens", lambda v: step_output(v, True, BUDGET_STEPS))]
    patch = patch_from(base, ops)
    assert patch.to_json() == {"lanes": {"chat": {"max_inflight_tokens": 512_000}}}
    assert describe(base, patch) == ["chat.max_inflight_tokens none -> 512000"]
    assert revert_of(base, patch).to_json() == {"lanes": {"chat": {"max_inflight_tokens": None}}}


def test_on_an_adaptive_lane_the_floor_follows_the_ceiling_down() -> None:
    adaptive = LaneLimits(max_inflight=6, min_inflight=4, policy="adaptive")
    base = Limits(1, False, {"chat": adaptive})
    down = [("chat", "max_inflight", lambda v: v - 3)]
    assert patch_from(base, down).lanes == {"chat": {"max_inflight": 3, "min_inflight": 3}}
    up = [("chat", "max_inflight", lambda v: v + 3)]
    assert patch_from(base, up).lanes == {"chat": {"max_inflight": 9}}  # floor stays
    static = Limits(1, False, {"chat": LaneLimits(max_inflight=6, min_inflight=4)})
    assert patch_from(static, down).lanes == {"chat": {"max_inflight": 3}}  # not judged


def test_a_tenant_change_and_its_revert_describe_the_tenant_s_limits() -> None:
    before = replace(LIMITS, tenants={"alice": TenantLimits(paused=True, max_inflight=4)})
    patch = LimitsPatch(
        tenants={
            "alice": {"paused": False, "max_inflight": None},
            "bob": {"paused": False, "max_inflight": 2},
        }
    )
    assert describe(before, patch) == [
        "tenant alice paused, max_inflight 4 -> no limits",
        "tenant bob no limits -> max_inflight 2",
    ]
    assert revert_of(before, patch) == LimitsPatch(
        tenants={"alice": {"paused": True, "max_inflight": 4}, "bob": None}
    )
    assert describe(LIMITS, LimitsPatch(tenants={"carol": {"paused": True}})) == [
        "tenant carol no limits -> paused"
    ]
    assert revert_of(LIMITS, LimitsPatch(paused=True)) == LimitsPatch(paused=False)  # nothing else


@pytest.mark.parametrize(
    ("value", "shown"), [(None, "none"), (0.25, "0.25"), (2.0, "2"), (16, "16"), (True, "True")]
)
def test_values_are_shown_short(value: object, shown: str) -> None:
    assert show_value(value) == shown


async def test_each_key_s_change_before_it_is_sent() -> None:
    """What the keys amount to (the pending lines), without a gate: nothing is sent until the
    window closes, and close() drops it."""
    view = RecordingView(current=LIMITS)
    client = GateClient("http://127.0.0.1:9", "t", Guard())
    s = Steering(Guard(), view, "http://127.0.0.1:9", coalesce_s=60.0)
    s.client = client

    def after(*keys: Callable[[], None]) -> list[str]:
        for key in keys:
            key()
        lines = s.pending_lines()
        s.close()
        return lines

    try:
        assert s.pending_lines() == []
        assert after(lambda: s.scale_inflight(0.5)) == ["chat.max_inflight 16 -> 8"]
        assert after(lambda: s.scale_inflight(0.01)) == ["chat.max_inflight 16 -> 0"]
        assert after(lambda: s.inflight(-20)) == ["chat.max_inflight 16 -> 0"]
        assert after(lambda: s.queue(-100)) == ["chat.max_queue 64 -> 0"]
        assert after(lambda: s.queue(8)) == ["chat.max_queue 64 -> 72"]
        assert after(s.pause) == ["paused false -> true"]
        assert after(lambda: s.budget(True)) == ["chat.max_inflight_tokens none -> 512000"]
        chat = replace(LIMITS.lanes["chat"], max_inflight=0)
        view.current = replace(LIMITS, lanes={**LIMITS.lanes, "chat": chat})
        assert after(lambda: s.scale_inflight(2.0)) == ["chat.max_inflight 0 -> 1"]  # from 0
        assert after(lambda: s.scale_inflight(0.5)) == []  # 0 halved stays 0
        assert after(lambda: s.scale_inflight(1.0)) == []
        s.select_lane(1)
        assert s.selected_lane == "embed" and after(lambda: s.inflight(1)) == [
            "embed.max_inflight 32 -> 33"
        ]
        s.select_lane(2)  # no third lane
        assert s.selected_lane == "embed"
        s.next_lane()
        assert s.selected_lane == "chat"
        s.selected_lane = "gone"  # a lane the gate no longer has: the first one next
        s.next_lane()
        assert s.selected_lane == "chat"
        s.selected_tenant = "alice"
        s.next_lane()
        assert s.selected_tenant is None  # a tenant is chosen within its lane
        s.selected_tenant = "alice"
        s.select_lane(0)
        assert s.selected_tenant is None
        assert s.idle
    finally:
        s.close()
        await client.close()
    view.current = None
    assert s.lanes() == [] and not s.can_steer
