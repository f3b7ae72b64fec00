"""The audit log on disk: appended line by line, rotated by size, read back newest first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuwatch.adminapi import AuditEntry
from gpuwatch.gate.audit import AuditError, AuditLog


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
