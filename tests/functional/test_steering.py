"""Every transition of the control state machine, against a real gate (no terminal)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuwatch.adminapi import LimitsPatch
from gpuwatch.control.gate import GateClient
from gpuwatch.control.guard import Guard, ReadOnlyError
from gpuwatch.control.steering import Steering
from gpuwatch.gate.config import GateConfig
from gpuwatch.gate.limits import DEFAULT_LANES
from gpuwatch.gate.server import start_gate
from tests.helpers import eventually
from tests.steeringfake import RecordingView

TOKEN = "s3cret"


@dataclass
class Rig:
    steering: Steering
    view: RecordingView
    ours: GateClient
    other: GateClient  # another operator on the same gate


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    _, served = await start_gate(
        "http://127.0.0.1:9", GateConfig(DEFAULT_LANES), token=TOKEN, state_file=tmp_path / "s.json"
    )
    guard = Guard()
    ours = GateClient(served.url, TOKEN, guard, actor="me@here")
    other = GateClient(served.url, TOKEN, Guard(), actor="alice@box")
    view = RecordingView(current=await ours.limits())
    steering = Steering(guard, view, served.url, coalesce_s=0.05)
    steering.client = ours
    yield Rig(steering, view, ours, other)
    steering.close()
    await ours.close()
    await other.close()
    await served.close()


async def test_keys_within_the_window_are_one_patch(rig: Rig) -> None:
    s = rig.steering
    for _ in range(5):
        s.inflight(1)
    assert s.pending_lines() == ["chat.max_inflight 16 -> 21"]
    await eventually(lambda: s.idle, 30)  # the coalescing timer fired and the change landed
    limits = await rig.other.limits()
    assert limits.version == 2 and limits.lanes["chat"].max_inflight == 21
    assert rig.view.current == limits
    audit = await rig.other.audit(5)
    assert len(audit) == 1 and audit[0].actor == "me@here"


async def test_keys_during_our_own_change_build_on_it(rig: Rig) -> None:
    s = rig.steering
    s.inflight(1)
    s.flush()  # in flight now; the screen still shows version 1
    s.queue(8)
    await s.settle()
    limits = await rig.other.limits()
    assert limits.version == 3
    assert limits.lanes["chat"].max_inflight == 17
    assert limits.lanes["chat"].max_queue == 72
    assert not [n for n in rig.view.notes if n[0] != "information"]


async def test_someone_elses_change_is_never_overwritten(rig: Rig) -> None:
    await rig.other.patch(
        LimitsPatch.from_json({"lanes": {"chat": {"max_inflight": 5}}}), if_match=1
    )
    rig.steering.inflight(1)  # made on version 1, which is now old
    await rig.steering.settle()
    limits = await rig.other.limits()
    assert limits.version == 2 and limits.lanes["chat"].max_inflight == 5
    assert ("warning", "limits changed by alice@box: refreshed, nothing overwritten") in (
        rig.view.notes
    )
    assert rig.view.current is not None and rig.view.current.version == 2  # refreshed


async def test_a_cut_by_more_than_half_waits_for_the_operator(rig: Rig) -> None:
    s = rig.steering
    rig.view.confirm_answer = False
    s.scale_inflight(0.5)
    s.scale_inflight(0.5)  # 16 -> 4
    await s.settle()
    assert rig.view.asked and "chat.max_inflight 16 -> 4" in rig.view.asked[0]
    assert (await rig.other.limits()).version == 1
    assert rig.view.events[-1] == ("info", "change cancelled: chat.max_inflight 16 -> 4")
    rig.view.confirm_answer = True
    s.pause()
    await s.settle()
    limits = await rig.other.limits()
    assert limits.paused is True and len(rig.view.asked) == 2


async def test_undo_puts_back_what_the_last_change_changed(rig: Rig) -> None:
    s = rig.steering
    s.output(True)
    s.output(True)
    await s.settle()
    assert (await rig.other.limits()).lanes["chat"].max_output_tokens == 2048
    s.undo()
    await s.settle()
    limits = await rig.other.limits()
    assert limits.lanes["chat"].max_output_tokens is None and limits.version == 3
    assert rig.view.events[-1][1].startswith("undone v3")
    s.undo()
    assert ("information", "nothing to undo from this screen") in rig.view.notes


async def test_the_form_sends_one_change(rig: Rig) -> None:
    rig.view.form_answer = {"max_inflight": 12, "max_queue": 40}
    rig.steering.edit()
    await rig.steering.settle()
    limits = await rig.other.limits()
    assert limits.version == 2
    assert limits.lanes["chat"].max_inflight == 12
    assert limits.lanes["chat"].max_queue == 40


async def test_lane_selection_picks_what_the_keys_change(rig: Rig) -> None:
    s = rig.steering
    s.next_lane()
    assert s.selected_lane == "embed"
    s.select_lane(0)
    assert s.selected_lane == "chat"
    s.select_lane(99)  # no such lane: no change
    assert s.selected_lane == "chat"


async def test_read_only_refuses_in_the_guard_and_nothing_is_sent(rig: Rig) -> None:
    s = rig.steering
    s.guard.read_only = True
    assert not s.can_steer
    s.inflight(1)
    s.pause()
    s.undo()
    await s.settle()
    assert (await rig.other.limits()).version == 1
    assert all(sev == "warning" and "refused: read-only" in text for sev, text in rig.view.notes)
    # The path behind the keys holds the same guard: it refuses too.
    with pytest.raises(ReadOnlyError):
        await rig.ours.patch(LimitsPatch.from_json({"paused": True}), if_match=1)
    assert (await rig.other.limits()).version == 1


async def test_without_a_gate_the_keys_say_why() -> None:
    view = RecordingView(current=None)
    steering = Steering(Guard(), view, "")
    steering.inflight(1)
    assert steering.idle
    assert view.notes == [("warning", "no gate to steer: start gpuwatch with --admin URL")]


async def test_undo_right_after_a_key_undoes_that_key(rig: Rig) -> None:
    """Regression: undo did not send the pending key first, so it reverted the change before
    it and then sent the key on top."""
    s = rig.steering
    s.output(True)
    await s.settle()  # v2: output cap none -> 4096
    s.inflight(1)  # pending
    s.undo()
    await s.settle()
    limits = await rig.other.limits()
    chat = limits.lanes["chat"]
    assert limits.version == 4  # the key (v3), then its undo (v4)
    assert (chat.max_inflight, chat.max_output_tokens) == (16, 4096)


async def test_an_undo_that_did_not_go_through_stays_undoable(rig: Rig) -> None:
    """Regression: the change was taken off the history before its undo was sent; a 409 lost it."""
    s = rig.steering
    s.inflight(1)
    await s.settle()  # v2, ours
    await rig.other.patch(
        LimitsPatch.from_json({"lanes": {"embed": {"max_queue": 100}}}), if_match=2
    )  # v3, not ours
    s.undo()  # made on v2 (the screen has not seen v3): 409
    await s.settle()
    assert (await rig.other.limits()).version == 3
    assert len(s.history) == 1
    s.undo()  # now on the refreshed v3
    await s.settle()
    limits = await rig.other.limits()
    assert limits.version == 4 and limits.lanes["chat"].max_inflight == 16


async def test_the_form_after_a_key_builds_on_it(rig: Rig) -> None:
    """Regression: the form took the limits before the pending key was sent and got a 409 from
    the operator's own change."""
    s = rig.steering
    rig.view.form_answer = {"max_queue": 40}
    s.inflight(1)
    s.edit()
    await s.settle()
    limits = await rig.other.limits()
    assert limits.version == 3
    assert limits.lanes["chat"].max_inflight == 17
    assert limits.lanes["chat"].max_queue == 40
    assert not [n for n in rig.view.notes if n[0] != "information"]


async def test_each_key_restarts_the_coalescing_window(rig: Rig) -> None:
    """Keys 0.3 s apart over 0.6 s, with a 0.4 s window, are one PATCH: every key restarts the
    window. A timer started by the first key alone would fire between the second and third
    (two PATCHes). The keys are put on the loop's own schedule, ahead of any timer the earlier
    keys start, so however late the loop runs them, they keep their order against it."""
    s = rig.steering
    s.coalesce_s = 0.4
    loop = asyncio.get_running_loop()
    pressed = asyncio.Event()
    s.inflight(1)
    loop.call_later(0.3, s.inflight, 1)

    def last_key() -> None:
        s.inflight(1)
        pressed.set()

    loop.call_later(0.6, last_key)
    await pressed.wait()
    await eventually(lambda: s.idle, 30)  # the window closed and the change landed
    limits = await rig.other.limits()
    assert limits.lanes["chat"].max_inflight == 19
    assert limits.version == 2  # one change
    assert len(await rig.other.audit(5)) == 1
