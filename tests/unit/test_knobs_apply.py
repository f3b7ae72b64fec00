from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuwatch.adminapi import AuditEntry
from gpuwatch.control.guard import Guard, ReadOnlyError
from gpuwatch.control.knobs.apply import (
    apply_changes,
    default_audit_path,
    find,
    knob_confirmation_reason,
    open_audit,
)
from gpuwatch.control.knobs.base import Knob, KnobChange, KnobConflict, KnobError
from gpuwatch.gate.audit import AuditError, AuditLog
from tests.unit.memoryknobs import MemoryKnobs, knob


def stack() -> MemoryKnobs:
    return MemoryKnobs(
        [
            knob("max_ongoing_requests", 8, minimum=1),
            knob("max_queued_requests", -1, minimum=-1),
            knob("num_replicas", 2, minimum=0),
        ]
    )


def shown(s: MemoryKnobs, name: str) -> Knob:
    return next(k for k in s.knobs.values() if k.name == name)


@pytest.fixture
def audit(tmp_path: Path) -> AuditLog:
    return AuditLog(tmp_path / "state" / "knobs-audit.jsonl")


async def test_a_change_is_written_read_back_and_audited(audit: AuditLog) -> None:
    s = stack()
    change = KnobChange(shown(s, "max_ongoing_requests"), 4)
    after = await apply_changes(s, [change], Guard(), audit, "ops@host")
    assert [len(w) for w in s.writes] == [1]
    assert s.reads == 2  # once right before (the conflict check), once after (read back)
    back = find(after, change.knob)
    assert back is not None and back.value == 4
    # One line in the gate's own format: the gate's reader and AuditEntry read it back.
    lines = audit.path.read_text().splitlines()
    assert len(lines) == 1
    entry = AuditEntry.from_json(json.loads(lines[0]))
    assert entry.actor == "ops@host" and entry.version == 0
    assert entry.change.to_json() == {"lanes": {"ray app1/LLM": {"max_ongoing_requests": 4}}}
    assert entry.before == {"ray app1/LLM": {"max_ongoing_requests": 8}}
    assert entry.after == {"ray app1/LLM": {"max_ongoing_requests": 4}}
    assert entry.reason == "ray admin API http://127.0.0.1:1"
    again = AuditLog(audit.path)
    again.load()
    assert list(again.recent) == [entry]


async def test_read_only_refuses_before_anything_is_sent(audit: AuditLog) -> None:
    s = stack()
    with pytest.raises(ReadOnlyError, match="max_ongoing_requests 8 -> 4 refused: read-only"):
        await apply_changes(
            s, [KnobChange(shown(s, "max_ongoing_requests"), 4)], Guard(True), audit, "a"
        )
    assert (s.reads, s.writes) == (0, [])
    assert not audit.path.exists()


@pytest.mark.parametrize(
    ("value", "message"),
    [(0, "must be at least 1, got 0"), (2.5, "must be an integer"), (None, "cannot be none")],
)
async def test_out_of_bounds_is_refused_before_anything_is_sent(
    audit: AuditLog, value: int | float | None, message: str
) -> None:
    s = stack()
    with pytest.raises(KnobError, match=f"ray app1/LLM max_ongoing_requests {message}"):
        await apply_changes(
            s, [KnobChange(shown(s, "max_ongoing_requests"), value)], Guard(), audit, "a"
        )
    assert (s.reads, s.writes) == (0, [])


async def test_a_value_changed_since_shown_is_a_conflict_and_nothing_is_written(
    audit: AuditLog,
) -> None:
    s = stack()
    change = KnobChange(shown(s, "max_ongoing_requests"), 4)
    s.on_read = lambda st: st.set("max_ongoing_requests", 6)  # someone else, meanwhile
    with pytest.raises(KnobConflict) as caught:
        await apply_changes(s, [change], Guard(), audit, "a")
    assert (caught.value.shown, caught.value.now) == (8, 6)
    assert s.writes == []
    assert not audit.path.exists()


async def test_a_conflict_on_one_knob_writes_none_of_them(audit: AuditLog) -> None:
    s = stack()
    changes = [
        KnobChange(shown(s, "max_ongoing_requests"), 4),
        KnobChange(shown(s, "num_replicas"), 3),
    ]
    s.on_read = lambda st: st.set("num_replicas", 5)
    with pytest.raises(KnobConflict, match="num_replicas changed since it was shown"):
        await apply_changes(s, changes, Guard(), audit, "a")
    assert s.writes == []
    assert shown(s, "max_ongoing_requests").value == 8


async def test_a_knob_gone_since_shown_is_refused(audit: AuditLog) -> None:
    s = stack()
    gone = knob("max_ongoing_requests", 8, minimum=1)
    s.knobs.pop(gone.key)
    with pytest.raises(KnobError, match="no longer there; nothing written"):
        await apply_changes(s, [KnobChange(gone, 4)], Guard(), audit, "a")
    assert s.writes == []


async def test_a_value_the_stack_did_not_take_is_an_error_and_still_audited(
    audit: AuditLog,
) -> None:
    s = stack()
    s.keep = {"max_ongoing_requests"}
    with pytest.raises(KnobError, match="asked for 4, the stack kept 8"):
        await apply_changes(
            s, [KnobChange(shown(s, "max_ongoing_requests"), 4)], Guard(), audit, "a"
        )
    (line,) = audit.path.read_text().splitlines()
    assert json.loads(line)["after"] == {"ray app1/LLM": {"max_ongoing_requests": 8}}


async def test_a_write_failing_part_way_audits_what_did_change(audit: AuditLog) -> None:
    s = stack()
    s.refuse = "litellm refused the second update: 400"
    changes = [
        KnobChange(shown(s, "max_ongoing_requests"), 4),
        KnobChange(shown(s, "num_replicas"), 3),
    ]
    with pytest.raises(KnobError, match="refused the second update"):
        await apply_changes(s, changes, Guard(), audit, "a")
    (line,) = audit.path.read_text().splitlines()
    assert json.loads(line)["after"] == {
        "ray app1/LLM": {"max_ongoing_requests": 4, "num_replicas": 2}
    }


async def test_a_write_failing_with_nothing_changed_is_not_audited(audit: AuditLog) -> None:
    s = stack()
    s.refuse = "refused"
    s.keep = {"max_ongoing_requests"}
    changes = [
        KnobChange(shown(s, "max_ongoing_requests"), 4),
        KnobChange(shown(s, "num_replicas"), 3),
    ]
    with pytest.raises(KnobError, match="refused"):
        await apply_changes(s, changes, Guard(), audit, "a")
    assert not audit.path.exists()


async def test_a_knob_of_another_stack_or_twice_is_refused(audit: AuditLog) -> None:
    s = stack()
    other = Knob("dynamo", "llama", "active_decode_blocks_threshold", 0.5, "float")
    with pytest.raises(KnobError, match="not a knob of the ray adapter"):
        await apply_changes(s, [KnobChange(other, 0.4)], Guard(), audit, "a")
    k = shown(s, "num_replicas")
    with pytest.raises(KnobError, match="changed twice in one go"):
        await apply_changes(s, [KnobChange(k, 3), KnobChange(k, 4)], Guard(), audit, "a")
    assert (s.reads, s.writes) == (0, [])


async def test_no_changes_only_reads(audit: AuditLog) -> None:
    s = stack()
    assert len(await apply_changes(s, [], Guard(True), audit, "a")) == 3
    assert s.writes == [] and not audit.path.exists()


@pytest.mark.parametrize(
    ("before", "after", "needs"),
    [
        (8, 3, True),
        (8, 4, False),  # exactly half is not more than half
        (8, 16, False),
        (None, 100, True),  # a limit where there was none
        (8, None, False),  # removing a limit
        (0, 0, False),
        (0.8, 0.3, True),
    ],
)
def test_confirmation_for_a_cut_by_more_than_half(
    before: int | float | None, after: int | float | None, needs: bool
) -> None:
    k = Knob("ray", "app1/LLM", "max_ongoing_requests", before, "int", nullable=True)
    reason = knob_confirmation_reason([KnobChange(k, after)])
    assert (reason is not None) == needs
    if needs:
        assert reason is not None and "cuts it by more than half" in reason


def test_confirmation_for_a_pause_and_not_a_resume() -> None:
    paused = Knob("vllm", "server", "paused", False, "bool")
    reason = knob_confirmation_reason([KnobChange(paused, True)])
    assert reason is not None and reason.startswith("vllm server: pause admission")
    resumed = Knob("vllm", "server", "paused", True, "bool")
    assert knob_confirmation_reason([KnobChange(resumed, False)]) is None


def test_default_audit_path_follows_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "st"))
    assert default_audit_path() == tmp_path / "st" / "gpuwatch" / "knobs-audit.jsonl"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_audit_path() == tmp_path / ".local" / "state" / "gpuwatch" / "knobs-audit.jsonl"


async def test_open_audit_reads_entries_back_and_names_a_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    s = stack()
    await apply_changes(
        s, [KnobChange(shown(s, "num_replicas"), 3)], Guard(), open_audit(path), "me"
    )
    assert [e.actor for e in open_audit(path).recent] == ["me"]
    path.write_text(path.read_text() + "not json\n")
    with pytest.raises(AuditError, match=r"a\.jsonl line 2"):
        open_audit(path)
