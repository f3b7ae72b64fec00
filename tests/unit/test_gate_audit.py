"""The audit log on disk: appended line by line, rotated by size, read back newest first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuwatch.adminapi import AuditEntry, Json
from gpuwatch.gate.audit import RECENT_BYTES, AuditError, AuditLog


def entry(n: int) -> AuditEntry:
    return AuditEntry(float(n), f"op{n}", n + 1)


def test_rotates_by_size_and_reads_back_newest_first(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "a.jsonl", max_bytes=400)
    for n in range(20):
        log.append(entry(n))
    assert log.rotated.exists()
    assert log.path.stat().st_size <= 400 and log.rotated.stat().st_size <= 400
    again = AuditLog(tmp_path / "a.jsonl", max_bytes=400)
    again.load()
    actors = [e.actor for e in again.recent]
    assert actors[0] == "op19" and actors == sorted(actors, key=lambda a: -int(a[2:]))
    assert actors == [e.actor for e in log.recent][: len(actors)]


def test_a_torn_last_line_is_skipped_and_a_bad_line_elsewhere_refused(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_text(
        json.dumps(entry(1).to_json()) + "\n" + '{"time": 2, "act'
    )  # a crash mid-append
    log = AuditLog(path)
    log.load()
    assert [e.actor for e in log.recent] == ["op1"]
    assert (
        path.read_text() == json.dumps(entry(1).to_json()) + "\n"
    )  # cut off: the next append is whole
    path.write_text('{"time": 1}\n' + json.dumps(entry(2).to_json()) + "\n")
    with pytest.raises(AuditError, match=rf"audit log {path} line 1: 'actor' must be a string"):
        AuditLog(path).load()


def test_memory_holds_at_most_recent_bytes_of_lines_however_large_the_entries(
    tmp_path: Path,
) -> None:
    # Entries the size of a limits document with ~1000 tenants' limits before and after: KEEP
    # of them held as objects was hundreds of MiB. Held now: RECENT_BYTES of lines at most.
    big: Json = {"tenants": {f"tenant-{i:04d}": {"max_inflight": 2} for i in range(3000)}}
    log = AuditLog(tmp_path / "a.jsonl")
    for n in range(10, 90):  # two digits each: every line the same length
        log.append(AuditEntry(float(n), f"op{n}", n + 1, before=big, after=big))
    line = len(json.dumps(log.recent[0].to_json(), separators=(",", ":"))) + 1
    assert 80 * line > 2 * RECENT_BYTES  # the old bound (KEEP entries) held all 80
    assert len(log.recent) == RECENT_BYTES // line
    assert log.held_bytes == len(log.recent) * line <= RECENT_BYTES
    assert [e.actor for e in log.recent][:2] == ["op89", "op88"]  # the newest, newest first
    again = AuditLog(tmp_path / "a.jsonl")
    again.load()  # read back (rotated file and current): the same bound
    assert [e.actor for e in again.recent] == [e.actor for e in log.recent]
    assert again.held_bytes == log.held_bytes


def test_a_line_over_recent_bytes_is_still_held_alone(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "a.jsonl")
    log.append(entry(1))
    huge: Json = {"x": "y" * (RECENT_BYTES + 1)}
    log.append(AuditEntry(2.0, "big", 3, before=huge))
    assert [e.actor for e in log.recent] == ["big"]  # the newest change is always shown
