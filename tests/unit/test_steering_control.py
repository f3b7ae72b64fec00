"""The ``Steering`` class's own logic, driven through its ``SteeringView`` with the gate's own
limits arithmetic behind a stand-in client: the tenant keys, the ``A`` toggle, ``apply_lane``,
each refusal's message. (tests/functional/test_steering.py runs the keys against a real gate.)"""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuwatch.adminapi import ConflictBody, LaneLimits, Limits, LimitsPatch
from gpuwatch.control.gate import GateClient, GateConflict, GateError
from gpuwatch.control.guard import Guard, ReadOnlyError
from gpuwatch.control.steering import Keys, Steering
from gpuwatch.fmt import clip
from gpuwatch.gate.limits import apply_patch
from tests.helpers import eventually
from tests.steeringfake import RecordingView

LIMITS = Limits(
    3,
    False,
    {"chat": LaneLimits(max_inflight=16, max_queue=64), "embed": LaneLimits(max_inflight=32)},
)


class Gate(GateClient):
    """The gate's limits in memory, changed by the gate's own ``apply_patch`` (If-Match as
    the gate checks it); ``fail`` is raised by the next PATCH instead."""

    def __init__(self, limits: Limits) -> None:
        super().__init__("http://127.0.0.1:9", None, Guard())
        self.limits_now = limits
        self.sent: list[tuple[LimitsPatch, int | None]] = []
        self.fail: Exception | None = None

    async def patch(self, changes: LimitsPatch, if_match: int | None = None) -> Limits:
        self.sent.append((changes, if_match))
        if self.fail is not None:
            fail, self.fail = self.fail, None
            raise fail
        if if_match is not None and if_match != self.limits_now.version:
            body = ConflictBody("old", "bob", self.limits_now.version, self.limits_now)
            raise GateConflict("old", body)
        self.limits_now = apply_patch(self.limits_now, changes.to_json())
        return self.limits_now


@pytest.fixture
async def rig() -> tuple[Steering, RecordingView, Gate]:
    view = RecordingView(current=LIMITS)
    steering = Steering(Guard(), view, "http://gate", coalesce_s=60.0)
    gate = Gate(LIMITS)
    steering.client = gate
    return steering, view, gate


async def test_tenant_selection_walks_the_busiest_then_none(
    rig: tuple[Steering, RecordingView, Gate],
) -> None:
    s, view, _ = rig
    s.next_tenant()
    assert s.selected_tenant is None
    assert view.notes == [("information", "no tenant has work in lane chat")]
    view.busy["chat"] = ["alice", "bob"]
    picks: list[str | None] = []
    for _ in range(4):
        s.next_tenant()
        picks.append(s.selected_tenant)
    assert picks == ["alice", "bob", None, "alice"]
    s.selected_tenant = "gone"  # left the lane: the busiest next
    s.next_tenant()
    assert s.selected_tenant == "alice" and len(view.notes) == 1 and view.changes == 6


async def test_a_tenant_key_sends_the_tenant_s_whole_limits(
    rig: tuple[Steering, RecordingView, Gate],
) -> None:
    s, view, gate = rig
    s.tenant_pause()
    assert view.notes == [("warning", "select a tenant first (n)")] and s.idle
    s.selected_tenant = "alice"
    s.tenant_pause()
    await s.settle()
    assert gate.sent == [
        (LimitsPatch(tenants={"alice": {"paused": True, "max_inflight": None}}), 3)
    ]
    assert view.events[-1] == ("info", "limits v4: tenant alice no limits -> paused")
    s.tenant_cap(True)  # no cap -> the top step
    await s.settle()
    assert gate.limits_now.tenants["alice"].max_inflight == 32
    assert gate.limits_now.tenants["alice"].paused  # kept
    s.tenant_cap(True)
    s.tenant_cap(False)
    await s.settle()
    assert gate.limits_now.tenants["alice"].max_inflight == 32
    s.tenant_pause()
    await s.settle()
    assert gate.limits_now.tenants["alice"].paused is False
    assert [v for _, v in gate.sent] == [3, 4, 5, 6, 7] and not view.asked
    s.undo()
    await s.settle()
    assert gate.limits_now.tenants["alice"].paused is True
    s.guard.read_only = True
    s.tenant_pause()
    assert view.notes[-1] == (
        "warning",
        "change of tenant alice refused: read-only mode (--read-only)",
    )


async def test_the_a_key_turns_adaptive_on_with_the_slo_and_off_again(
    rig: tuple[Steering, RecordingView, Gate],
) -> None:
    s, view, gate = rig
    s.toggle_adaptive(2.5)
    await s.settle()
    assert gate.sent[-1][0] == LimitsPatch(
        lanes={"chat": {"policy": "adaptive", "target_ttft_p99_s": 2.5}}
    )
    assert view.asked[-1][1] == "why    the gate will move chat's in-flight limit between 1 and 16"
    assert view.asked[-1][0] == "gate   http://gate"
    assert view.events[-1][1].startswith("limits v4: chat.policy static -> adaptive")
    s.toggle_adaptive(9.0)
    await s.settle()
    assert gate.sent[-1][0] == LimitsPatch(lanes={"chat": {"policy": "static"}})
    assert view.asked[-1][1] == "why    chat goes back to its configured limits"
    s.toggle_adaptive(9.0)  # a target already set is kept
    await s.settle()
    assert gate.sent[-1][0] == LimitsPatch(lanes={"chat": {"policy": "adaptive"}})
    view.confirm_answer = False
    s.toggle_adaptive(9.0)
    await s.settle()
    assert len(gate.sent) == 3
    assert view.events[-1] == ("info", "change cancelled: chat.policy adaptive -> static")
    s.selected_lane = "gone"
    s.toggle_adaptive(9.0)
    await s.settle()
    assert view.notes[-1] == ("warning", "the gate has no lane gone") and len(gate.sent) == 3
    s.guard.read_only = True
    s.toggle_adaptive(9.0)
    assert view.notes[-1][1].startswith("adaptive admission on gone refused")


async def test_a_plan_s_limits_are_one_confirmed_change_of_only_what_differs(
    rig: tuple[Steering, RecordingView, Gate],
) -> None:
    s, view, gate = rig
    s.apply_lane("chat", {"max_inflight": 16, "max_queue": 48}, "plan run1")
    await s.settle()
    assert gate.sent == [(LimitsPatch(lanes={"chat": {"max_queue": 48}}), 3)]
    assert view.asked[-1][1] == "why    limits from plan run1"
    assert view.events[-1] == ("info", "limits v4: from plan run1: chat.max_queue 64 -> 48")
    s.apply_lane("chat", {"max_inflight": 4}, "plan run2")  # a cut: both reasons
    await s.settle()
    assert view.asked[-1][1] == (
        "why    limits from plan run2; lane chat: max_inflight 16 -> 4 cuts it by more than half"
    )
    s.apply_lane("chat", {"max_inflight": 4, "max_queue": 48}, "plan run2")
    await s.settle()
    assert view.notes[-1] == ("information", "the gate already has the limits of plan run2")
    assert len(gate.sent) == 2 and len(s.history) == 2
    s.undo()  # a plan's change is undoable like a key's
    await s.settle()
    assert gate.limits_now.lanes["chat"].max_inflight == 16
    s.apply_lane("gone", {"max_inflight": 4}, "plan run3")
    await s.settle()
    assert view.notes[-1] == ("warning", "the gate has no lane gone")
    s.client = None
    s.apply_lane("chat", {"max_inflight": 4}, "plan run3")
    assert view.notes[-1] == (
        "warning",
        "no gate to steer: start gpuwatch with --admin URL",
    )
    view.reason = "connection refused"
    s.client = gate
    view.current = None
    s.apply_lane("chat", {"max_inflight": 4}, "plan run3")
    assert view.notes[-1] == ("warning", "no gate to steer: connection refused")
    assert not s.can_steer and s.lanes() == []


async def test_each_refusal_of_a_change_says_why_and_keeps_nothing(
    rig: tuple[Steering, RecordingView, Gate],
) -> None:
    s, view, gate = rig
    gate.fail = GateError(400, "max_queue must be >= 0")
    s.queue(8)
    await s.settle()
    assert view.notes[-1] == ("error", "change refused: max_queue must be >= 0")
    assert view.events[-1] == ("bad", "change refused: max_queue must be >= 0")
    assert s.history == [] and view.current == LIMITS
    gate.fail = ReadOnlyError("change refused: read-only")
    s.queue(8)
    await s.settle()
    assert view.notes[-1] == ("warning", "change refused: read-only") and s.history == []
    gate.fail = GateConflict("old", ConflictBody("old", None, None, None))
    s.queue(8)
    await s.settle()
    assert view.notes[-1] == (
        "warning",
        "limits changed by someone else: refreshed, nothing overwritten",
    )
    assert view.events[-1] == ("warn", "change refused: limits changed by someone else (v3 is old)")
    assert view.current == LIMITS  # no limits in the 409: nothing shown
    gate.limits_now = replace(gate.limits_now, version=7)  # someone else's change
    s.queue(8)
    await s.settle()
    assert view.events[-1] == ("warn", "change refused: limits changed by bob (v3 is old)")
    assert view.current is not None and view.current.version == 7  # the 409's limits
    s.queue(8)
    await s.settle()
    assert view.events[-1] == ("info", "limits v8: chat.max_queue 64 -> 72")
    assert view.notes[-1][0] == "warning" and len(s.history) == 1


async def test_undo_with_nothing_to_undo_and_a_form_cancelled(
    rig: tuple[Steering, RecordingView, Gate],
) -> None:
    s, view, gate = rig
    s.undo()
    assert view.notes == [("information", "nothing to undo from this screen")]
    s.edit()  # the form cancelled: nothing sent
    await s.settle()
    view.form_answer = {}
    s.edit()
    await s.settle()
    assert gate.sent == []
    view.form_answer = {"max_queue": 40}
    s.edit()
    await s.settle()
    assert gate.sent == [(LimitsPatch(lanes={"chat": {"max_queue": 40}}), 3)]
    s.guard.read_only = True
    s.edit()
    s.undo()
    assert [text.split(" refused")[0] for _, text in view.notes[-2:]] == ["edit", "undo"]


async def test_a_change_that_fails_unexpectedly_is_one_event(
    rig: tuple[Steering, RecordingView, Gate],
) -> None:
    s, view, gate = rig
    gate.fail = RuntimeError("boom")
    s.pause()
    await s.settle()
    assert view.events[-1] == ("bad", "control: RuntimeError: boom")
    assert s.idle


async def test_keys_after_our_own_change_build_on_it_not_on_the_old_limits(
    rig: tuple[Steering, RecordingView, Gate],
) -> None:
    s, view, gate = rig
    base = view.current
    assert base is not None
    s.inflight(1)
    await s.settle()
    assert view.current is not None and view.current.version == 4
    # A key's change made from limits shown before our own change landed.
    s._outbox.pending = Keys(base, [("chat", "max_inflight", lambda v: v + 1)])
    s.flush()
    await s.settle()
    assert gate.sent[-1] == (LimitsPatch(lanes={"chat": {"max_inflight": 18}}), 4)
    gate.limits_now = replace(LIMITS, version=1)  # the gate restarted: versions start over
    view.current = gate.limits_now
    s.inflight(1)
    await s.settle()
    assert [v for _, v in gate.sent][-1] == 1 and view.current.version == 2


async def test_a_confirmed_change_asks_with_every_line_and_a_cancel_keeps_it_undoable(
    rig: tuple[Steering, RecordingView, Gate],
) -> None:
    s, view, gate = rig
    s.apply_lane("chat", {"max_inflight": 4, "max_queue": 16}, "plan r")
    await s.settle()
    assert view.titles == ["Apply this change?"]
    assert view.asked[-1] == [
        "gate   http://gate",
        "why    limits from plan r; lane chat: max_inflight 16 -> 4 cuts it by more than half",
        "",
        "chat.max_inflight 16 -> 4",
        "chat.max_queue 64 -> 16",
    ]
    assert view.events[-1] == (
        "info",
        "limits v4: from plan r: chat.max_inflight 16 -> 4; chat.max_queue 64 -> 16",
    )
    view.confirm_answer = False  # the pause is asked and cancelled; the undo below raises
    # capacity back: not asked
    s.output(True)
    s.pause()
    await s.settle()
    assert view.events[-1] == (
        "info",
        "change cancelled: paused false -> true; chat.max_output_tokens none -> 4096",
    )
    assert len(s.history) == 1
    s.undo()
    await s.settle()
    assert view.events[-1] == (
        "info",
        "undone v5: chat.max_inflight 4 -> 16; chat.max_queue 16 -> 64",
    )
    assert s.history == [] and gate.limits_now.lanes["chat"].max_inflight == 16
    s.guard.read_only = True
    s.apply_lane("chat", {"max_inflight": 4}, "plan r")
    assert view.notes[-1][1] == "applying plan r refused: read-only mode (--read-only)"


async def test_an_undo_refused_or_cancelled_stays_undoable(
    rig: tuple[Steering, RecordingView, Gate],
) -> None:
    s, view, gate = rig
    s.queue(136)  # 64 -> 200: its undo cuts the queue by more than half, so it is asked
    await s.settle()
    gate.fail = GateError(400, "no")
    s.undo()
    await s.settle()
    assert len(s.history) == 1 and view.events[-1] == ("bad", "change refused: no")
    view.confirm_answer = False
    s.undo()
    await s.settle()
    assert len(s.history) == 1 and gate.limits_now.lanes["chat"].max_queue == 200
    assert view.events[-1] == ("info", "change cancelled: chat.max_queue 200 -> 64")
    view.confirm_answer = True
    s.undo()
    await s.settle()
    assert s.history == [] and gate.limits_now.lanes["chat"].max_queue == 64
    s.queue(136)
    await s.settle()
    for fail in (
        ReadOnlyError("read-only"),
        GateConflict("old", ConflictBody("old", None, 0, None)),
    ):
        gate.fail = fail
        s.undo()
        await s.settle()
        assert len(s.history) == 1
    # The gate went away between the key and its turn: nothing to change, said so.
    s.apply_lane("chat", {"max_queue": 8}, "plan r")
    view.current = None
    await s.settle()
    assert view.notes[-1] == ("warning", "the gate has no lane chat")


async def test_an_undo_behind_a_key_that_fails_has_nothing_to_undo(
    rig: tuple[Steering, RecordingView, Gate],
) -> None:
    s, view, gate = rig
    s.queue(8)
    gate.fail = GateError(400, "no")
    s.undo()  # sends the key first; it is refused, so there is nothing left to undo
    await s.settle()
    assert view.notes[-1] == ("information", "nothing to undo from this screen")


async def test_a_key_made_on_limits_someone_else_changed_is_refused_not_rebased(
    rig: tuple[Steering, RecordingView, Gate],
) -> None:
    s, view, gate = rig
    s.inflight(1)  # made on v3
    theirs = apply_patch(LIMITS, {"lanes": {"chat": {"max_queue": 8}}})
    gate.limits_now = view.current = theirs  # v4, not ours, lands before the window closes
    await s.settle()
    assert gate.sent == [(LimitsPatch(lanes={"chat": {"max_inflight": 17}}), 3)]
    assert view.events[-1] == ("warn", "change refused: limits changed by bob (v3 is old)")
    long = "x" * 100
    gate.fail = GateConflict("old", ConflictBody("old", long, None, None))
    s.inflight(1)
    await s.settle()
    assert view.notes[-1][1] == (
        f"limits changed by {clip(long, 80)}: refreshed, nothing overwritten"
    )
    assert clip(long, 80) != clip(long, 81)


async def test_the_form_waits_for_earlier_changes_even_failed_ones(
    rig: tuple[Steering, RecordingView, Gate],
) -> None:
    s, view, gate = rig
    gate.fail = RuntimeError("boom")
    view.form_answer = {"max_queue": 40}
    s.selected_lane = "embed"
    s.pause()
    s.edit()
    await s.settle()
    assert view.forms == [("embed", 3)]
    assert gate.sent[-1] == (LimitsPatch(lanes={"embed": {"max_queue": 40}}), 3)
    assert ("bad", "control: RuntimeError: boom") in view.events


async def test_keys_refused_read_only_name_what_they_would_change_and_queue_nothing(
    rig: tuple[Steering, RecordingView, Gate],
) -> None:
    s, view, _ = rig
    s.guard.read_only = True
    s.queue(8)
    s.pause()
    assert [text for _, text in view.notes] == [
        "change of chat.max_queue refused: read-only mode (--read-only)",
        "change of paused refused: read-only mode (--read-only)",
    ]
    assert s.idle and s.pending_lines() == []


async def test_the_output_and_budget_keys_step_from_the_lane_s_value(
    rig: tuple[Steering, RecordingView, Gate],
) -> None:
    s, view, _ = rig
    chat = replace(LIMITS.lanes["chat"], max_output_tokens=512, max_inflight_tokens=16_000)
    view.current = replace(LIMITS, lanes={**LIMITS.lanes, "chat": chat})
    s.output(True)
    s.budget(True)
    assert s.pending_lines() == [
        "chat.max_output_tokens 512 -> 256",
        "chat.max_inflight_tokens 16000 -> 8000",
    ]
    s.close()


async def test_the_window_closes_on_its_own_and_lanes_cycle_in_order(
    rig: tuple[Steering, RecordingView, Gate],
) -> None:
    s, view, gate = rig
    s.coalesce_s = 0.01
    s.queue(8)
    await eventually(lambda: bool(gate.sent) and s.idle)
    assert gate.sent == [(LimitsPatch(lanes={"chat": {"max_queue": 72}}), 3)]
    view.current = replace(LIMITS, lanes={**LIMITS.lanes, "batch": LaneLimits()})
    seen = []
    for _ in range(3):
        s.next_lane()
        seen.append(s.selected_lane)
    assert seen == ["embed", "batch", "chat"]
    s.selected_lane = "gone"
    s.next_lane()
    assert s.selected_lane == "chat"
