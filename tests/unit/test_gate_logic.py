"""The gate's pure parts: limits validation, admission queueing, the guard's policy."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

from gpuwatch.adminapi import LimitsPatch
from gpuwatch.config import ConfigError
from gpuwatch.control.guard import Guard, ReadOnlyError, confirmation_reason
from gpuwatch.gate.admission import AdmissionLane, Refused
from gpuwatch.gate.config import load_gate_config
from gpuwatch.gate.limits import (
    DEFAULT_LANES,
    LaneLimits,
    Limits,
    LimitsError,
    apply_patch,
    changed,
)

BASE = Limits(1, False, {lane.name: lane.limits for lane in DEFAULT_LANES})


def test_patch_is_applied_whole_with_version_plus_one() -> None:
    after = apply_patch(
        BASE, {"paused": True, "lanes": {"chat": {"max_inflight": 4, "max_output_tokens": None}}}
    )
    assert after.version == 2 and after.paused
    assert after.lanes["chat"] == LaneLimits(max_inflight=4)
    assert changed(BASE, after).to_json() == {
        "paused": True,
        "lanes": {"chat": {"max_inflight": 4}},
    }


def test_patch_with_one_bad_field_changes_nothing() -> None:
    with pytest.raises(LimitsError) as info:
        apply_patch(BASE, {"lanes": {"chat": {"max_inflight": 4}, "embed": {"max_queue": -1}}})
    assert info.value.field == "lanes.embed.max_queue"
    assert BASE.lanes["chat"].max_inflight == 16


@pytest.mark.parametrize("value", [True, 1.5, "3", None])
def test_counts_must_be_plain_integers(value: object) -> None:
    with pytest.raises(LimitsError, match=r"lanes\.chat\.max_inflight: must be an integer"):
        apply_patch(BASE, {"lanes": {"chat": {"max_inflight": value}}})


async def test_admission_fifo_and_handover() -> None:
    lane = AdmissionLane("chat", LaneLimits(max_inflight=1, max_queue=2))
    first = await lane.admit()
    waiters = [asyncio.create_task(lane.admit()) for _ in range(2)]
    await asyncio.sleep(0)
    assert len(lane.queue) == 2
    with pytest.raises(Refused) as info:
        await lane.admit()
    assert info.value.reason == "queue_full"
    first.release()
    first.release()  # a second release of the same ticket is a no-op
    second = await waiters[0]
    assert lane.inflight == 1 and not waiters[1].done()
    second.release()
    third = await waiters[1]
    third.release()
    assert lane.inflight == 0 and lane.admitted_total == 3


async def test_cancel_while_queued_never_leaks_a_slot() -> None:
    lane = AdmissionLane("chat", LaneLimits(max_inflight=1, max_queue=5))
    held = await lane.admit()
    waiter = asyncio.create_task(lane.admit())
    await asyncio.sleep(0)
    # The slot is handed over and the client leaves in the same tick.
    held.release()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert lane.inflight == 0 and not lane.queue


async def test_zero_inflight_admits_nothing_until_raised() -> None:
    lane = AdmissionLane("chat", LaneLimits(max_inflight=0, max_queue=5, queue_timeout_s=5))
    waiter = asyncio.create_task(lane.admit())
    await asyncio.sleep(0)
    assert lane.inflight == 0 and len(lane.queue) == 1
    lane.set_limits(LaneLimits(max_inflight=1), paused=False)
    ticket = await waiter
    assert lane.inflight == 1
    ticket.release()


def test_guard_read_only_and_confirmation_policy() -> None:
    with pytest.raises(ReadOnlyError, match="refused: read-only"):
        Guard(read_only=True).check("set chat.max_inflight")
    Guard().check("anything")
    before = BASE
    assert confirmation_reason(before, LimitsPatch(True)).startswith("pause admission")
    assert confirmation_reason(before, LimitsPatch(lanes={"chat": {"max_inflight": 7}})) is not None
    assert (
        confirmation_reason(before, LimitsPatch(lanes={"chat": {"max_inflight": 8}})) is None
    )  # exactly half
    assert confirmation_reason(before, LimitsPatch(lanes={"chat": {"max_inflight": 20}})) is None
    assert confirmation_reason(replace(before, paused=True), LimitsPatch(True)) is None


def test_gate_config_merges_over_defaults(tmp_path: Path) -> None:
    cfg = tmp_path / "gate.toml"
    cfg.write_text('extra_paths = ["/tokenize"]\n[lanes.chat]\nmax_inflight = 6\ntokenize = true\n'
                   '[lanes.batch]\nprefixes = ["/v1/batches"]\nmax_queue = 3\n')  # fmt: skip
    config = load_gate_config(cfg)
    lanes = {lane.name: lane for lane in config.lanes}
    assert lanes["chat"].limits.max_inflight == 6 and lanes["chat"].tokenize
    assert lanes["chat"].prefixes == DEFAULT_LANES[0].prefixes
    assert lanes["batch"].prefixes == ("/v1/batches",) and lanes["batch"].limits.max_queue == 3
    assert config.extra_paths == ("/tokenize",)
    cfg.write_text("[lanes.chat]\nmax_inflght = 6\n")
    with pytest.raises(ConfigError, match=r"unknown key 'lanes\.chat\.max_inflght'"):
        load_gate_config(cfg)
