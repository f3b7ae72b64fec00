"""The knob steering's rules and transitions, over a stack held in memory (no terminal, no HTTP):
how each key steps each kind of knob, coalescing, confirmation, undo, conflicts, read-only."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpuwatch.control.guard import Guard
from gpuwatch.control.knobs.base import Knob, KnobValue
from gpuwatch.control.knobs.steer import (
    KnobRef,
    KnobSource,
    KnobSteering,
    NoStep,
    Step,
    step_value,
)
from gpuwatch.gate.audit import AuditLog
from tests.operatorview import RecordingOperator
from tests.unit.memoryknobs import MemoryKnobs, knob


def fraction(value: float | None, nullable: bool = False) -> Knob:
    return Knob("dynamo", "llama", "active_decode_blocks_threshold", value, "float", 0.0, 1.0,
                nullable)  # fmt: skip


@pytest.mark.parametrize(
    ("shown", "value", "step", "expected"),
    [
        (knob("max_ongoing_requests", 8, minimum=1), 8, "up", 9),
        (knob("max_ongoing_requests", 8, minimum=1), 8, "down", 7),
        (knob("max_ongoing_requests", 8, minimum=1), 8, "double", 16),
        (knob("max_ongoing_requests", 8, minimum=1), 8, "halve", 4),
        (knob("max_ongoing_requests", 5, minimum=1), 5, "halve", 2),  # as the gate's `/`
        (knob("max_ongoing_requests", 0, minimum=0), 0, "double", 1),
        # The pending value is stepped, not the shown one: keys add up.
        (knob("max_ongoing_requests", 8, minimum=1), 10, "up", 11),
        # Bounds clamp; a nullable knob past its top has no limit, and comes back to its top.
        (knob("max_ongoing_requests", 60, minimum=1, maximum=100), 60, "double", 100),
        (knob("rpm", 60, minimum=1, maximum=100, nullable=True), 60, "double", None),
        (knob("rpm", None, minimum=1, maximum=100, nullable=True), None, "down", 100),
        (knob("rpm", None, minimum=1, maximum=100, nullable=True), None, "halve", 100),
        (knob("max_ongoing_requests", 2, minimum=1), 2, "halve", 1),
        # Fractions move by 0.05, without float noise.
        (fraction(0.85), 0.85, "up", 0.9),
        (fraction(0.85), 0.85, "down", 0.8),
        (fraction(0.98), 0.98, "up", 1.0),
        (fraction(0.85), 0.85, "halve", 0.425),
        (fraction(0.6, nullable=True), 0.6, "double", None),
        # Switches: + on, - off.
        (knob("paused", False), False, "up", True),
        (knob("paused", True), True, "down", False),
    ],
)
def test_step_value(shown: Knob, value: KnobValue, step: Step, expected: KnobValue) -> None:
    got = step_value(shown, value, step)
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize(
    ("shown", "step", "why"),
    [
        (knob("max_ongoing_requests", 1, minimum=1), "down", "at its minimum 1"),
        (knob("max_ongoing_requests", 1, minimum=1), "halve", "at its minimum 1"),
        (knob("max_ongoing_requests", 100, maximum=100), "up", "at its maximum 100"),
        (knob("rpm", None, nullable=True), "up", "has no limit already"),
        (knob("rpm", None, nullable=True), "down", "e sets one"),
        (knob("paused", True), "up", "already true"),
        (knob("paused", False), "double", "a switch"),
    ],
)
def test_a_key_that_cannot_move_the_knob_says_why(shown: Knob, step: Step, why: str) -> None:
    with pytest.raises(NoStep, match=why):
        step_value(shown, shown.value, step)


@dataclass(kw_only=True)
class View(RecordingOperator):
    """A KnobView that remembers what it was told and answers as set."""

    source: KnobSource
    form_answer: dict[str, KnobValue] | None = None
    forms: list[list[Knob]] = field(default_factory=list)

    def sources(self) -> list[KnobSource]:
        return [self.source]

    async def edit_knobs(self, title: str, knobs: list[Knob]) -> dict[str, KnobValue] | None:
        self.forms.append(knobs)
        return self.form_answer


@dataclass
class Rig:
    stack: MemoryKnobs
    view: View
    steering: KnobSteering
    audit: AuditLog

    def value(self, name: str) -> KnobValue:
        return next(k.value for k in self.stack.knobs.values() if k.name == name)

    def select(self, name: str) -> None:
        self.steering.select(next(r for r in self.steering.rows() if r.key[2] == name))


def make_rig(tmp_path: Path, read_only: bool = False) -> Rig:
    stack = MemoryKnobs(
        [
            knob("max_ongoing_requests", 8, minimum=1),
            knob("num_replicas", 2, minimum=0),
            knob("paused", False),
        ]
    )
    source = KnobSource(stack)
    source.shown(list(stack.knobs.values()))
    view = View(source=source)
    audit = AuditLog(tmp_path / "knobs-audit.jsonl")
    steering = KnobSteering(Guard(read_only=read_only), view, audit, "me@here", coalesce_s=60)
    return Rig(stack, view, steering, audit)


async def test_keys_coalesce_into_one_write_and_are_audited(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    rig.select("max_ongoing_requests")
    rig.steering.step("up")
    rig.steering.step("up")
    rig.steering.step("double")
    assert rig.steering.pending_lines() == ["ray app1/LLM max_ongoing_requests 8 -> 20"]
    await rig.steering.settle()
    assert (
        rig.stack.writes and len(rig.stack.writes) == 1 and rig.value("max_ongoing_requests") == 20
    )
    [entry] = list(rig.audit.recent)
    assert entry.actor == "me@here"
    assert entry.change.to_json() == {"lanes": {"ray app1/LLM": {"max_ongoing_requests": 20}}}
    # The row shows what the stack read back, at once.
    assert rig.steering.current() is not None and rig.steering.current()[1].value == 20  # type: ignore[index]
    assert rig.view.asked == []  # a raise asks nothing


async def test_keys_back_to_the_shown_value_send_nothing(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    rig.select("max_ongoing_requests")
    rig.steering.step("up")
    rig.steering.step("down")
    assert rig.steering.pending_lines() == []
    await rig.steering.settle()
    assert rig.stack.writes == []


async def test_a_cut_by_more_than_half_asks_and_cancel_sends_nothing(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    rig.select("max_ongoing_requests")
    rig.steering.step("halve")  # 8 -> 4: exactly half, no question
    await rig.steering.settle()
    assert rig.view.asked == [] and rig.value("max_ongoing_requests") == 4
    rig.view.confirm_answer = False
    rig.steering.step("halve")
    rig.steering.step("halve")  # 4 -> 1 in one change: asks
    await rig.steering.settle()
    [details] = rig.view.asked
    assert "ray app1/LLM max_ongoing_requests 4 -> 1" in details
    assert any("http://127.0.0.1:1" in line for line in details)
    assert rig.value("max_ongoing_requests") == 4 and len(rig.stack.writes) == 1
    assert rig.view.events[-1] == (
        "info",
        "change cancelled: ray app1/LLM max_ongoing_requests 4 -> 1",
    )


async def test_undo_is_the_inverse_change_and_is_audited(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    rig.select("max_ongoing_requests")
    rig.steering.step("double")
    await rig.steering.settle()
    assert rig.value("max_ongoing_requests") == 16
    rig.view.confirm_answer = True
    rig.steering.undo()
    await rig.steering.settle()
    assert rig.value("max_ongoing_requests") == 8
    # 16 -> 8 is exactly half: no question; the undo is a change of its own in the audit.
    assert len(rig.audit.recent) == 2 and rig.view.events[-1][1].startswith("undone: ")
    rig.steering.undo()
    await rig.steering.settle()
    assert rig.view.notes[-1] == ("information", "no knob change to undo from this screen")


async def test_undo_of_a_knob_moved_since_is_a_conflict_and_stays_undoable(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    rig.select("max_ongoing_requests")
    rig.steering.step("up")
    await rig.steering.settle()
    rig.stack.set("max_ongoing_requests", 30)  # someone else, since
    rig.steering.undo()
    await rig.steering.settle()
    assert rig.value("max_ongoing_requests") == 30  # not overwritten
    assert rig.view.notes[-1][0] == "warning" and "changed elsewhere" in rig.view.notes[-1][1]
    assert rig.view.events[-1][0] == "warn"
    assert len(rig.steering.history) == 1  # still there to undo
    # The row was read again: it shows the stack's 30.
    assert rig.steering.current()[1].value == 30  # type: ignore[index]


async def test_a_change_made_from_a_stale_row_is_refused(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    rig.select("max_ongoing_requests")
    rig.steering.step("up")  # made from 8, as shown
    rig.stack.set("max_ongoing_requests", 12)
    await rig.steering.settle()
    assert rig.value("max_ongoing_requests") == 12 and rig.stack.writes == []
    assert rig.steering.history == []


async def test_read_only_refuses_before_anything_is_read_or_sent(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, read_only=True)
    rig.select("max_ongoing_requests")
    reads = rig.stack.reads
    rig.steering.step("up")
    rig.steering.pause()
    rig.steering.edit()
    rig.steering.undo()
    await rig.steering.settle()
    assert rig.stack.reads == reads and rig.stack.writes == []
    assert len(rig.view.notes) == 4
    assert all(sev == "warning" and "read-only" in text for sev, text in rig.view.notes)
    assert list(rig.audit.recent) == []


async def test_pause_toggles_the_stacks_paused_knob_and_asks_first(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    rig.select("max_ongoing_requests")  # any knob of the stack: p pauses the stack
    rig.steering.pause()
    await rig.steering.settle()
    assert rig.value("paused") is True and len(rig.view.asked) == 1
    rig.steering.pause()  # resuming does not ask
    await rig.steering.settle()
    assert rig.value("paused") is False and len(rig.view.asked) == 1


async def test_pause_without_a_paused_knob_says_so(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    del rig.stack.knobs[("ray", "app1/LLM", "paused")]
    rig.view.source.shown(list(rig.stack.knobs.values()))
    rig.select("num_replicas")
    rig.steering.pause()
    await rig.steering.settle()
    assert rig.stack.writes == [] and "no pause knob" in rig.view.notes[-1][1]


async def test_the_form_sends_what_changed_as_one_change(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    rig.select("num_replicas")
    rig.view.form_answer = {"max_ongoing_requests": 8, "num_replicas": 3}
    rig.steering.edit()
    await rig.steering.settle()
    [form] = rig.view.forms
    assert [k.name for k in form] == ["max_ongoing_requests", "num_replicas", "paused"]
    assert [[(c.knob.name, c.value) for c in w] for w in rig.stack.writes] == [
        [("num_replicas", 3)]
    ]


async def test_keys_without_a_selected_knob_say_so(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    rig.steering.step("up")
    rig.steering.select(KnobRef("http://127.0.0.1:1", ("ray", "app1/LLM", "gone")))
    rig.steering.step("up")
    assert [n for _, n in rig.view.notes] == ["select a knob first (tab)"] * 2
    assert rig.steering.idle
