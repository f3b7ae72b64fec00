"""``gpuwatch limits`` with a stack's URL: what it refuses before talking to anyone, and the
local audit it shows (no network; against a real Ray: tests/realstack/test_ray_knobs.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwatch.cli.common import parse_assignment
from gpuwatch.cli.limits_knobs import print_knobs
from gpuwatch.cli.main import main
from gpuwatch.control.knobs.apply import audit_entry
from gpuwatch.control.knobs.base import Knob, KnobChange, KnobEndpoint
from gpuwatch.gate.audit import AuditLog


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path / "state" / "gpuwatch" / "knobs-audit.jsonl"


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["get"], 2, "give --admin URL (a gate) or a stack's URL"),
        (["get", "--ray", "http://a", "--admin", "http://b"], 2, "give one of --admin, --ray"),
        (["get", "--ray", "http://a", "--vllm", "http://b"], 2, "give one of --admin, --ray"),
        (["status", "--ray", "http://a"], 2, "status and --if-match are the gate's"),
        (["set", "nodot=4", "--ray", "http://a"], 2, "expected TARGET.NAME=VALUE, got 'nodot=4'"),
        (["set", "--ray", "http://a"], 2, "set takes TARGET.NAME=VALUE"),
        (["get", "a/b.n=1", "--ray", "http://a"], 2, "set takes TARGET.NAME=VALUE"),
        (
            ["get", "--litellm", "http://a", "--credential-file", "/nonexistent/key"],
            1,
            "cannot read litellm credential file /nonexistent/key",
        ),
    ],
)
def test_refused_before_anything_is_sent(
    args: list[str], code: int, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["limits", *args]) == code
    err = capsys.readouterr().err
    assert err.startswith("gpuwatch limits: ") and message in err


def test_the_name_is_after_the_last_dot() -> None:
    assert parse_assignment("m.v1.rpm=600", "T.N=V", last_dot=True) == ("m.v1", "rpm", 600)
    assert parse_assignment("chat.max_inflight=none") == ("chat", "max_inflight", None)


def test_audit_shows_this_endpoints_entries(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = AuditLog(state)
    k = Knob("ray", "llm/Forward", "max_ongoing_requests", 8, "int")
    kept = Knob("ray", "llm/Forward", "max_ongoing_requests", 8, "int")
    mine, other = KnobEndpoint("ray", "http://h:8265"), KnobEndpoint("ray", "http://other:8265")
    log.append(audit_entry(mine, [KnobChange(k, 4)], [Knob(**{**k.__dict__, "value": 4})], "a"))
    log.append(audit_entry(other, [KnobChange(k, 2)], [], "b"))
    log.append(audit_entry(mine, [KnobChange(k, 1)], [kept], "c"))
    assert main(["limits", "audit", "--ray", "http://h:8265/"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # Newest first: when (date, time), who, what; the other endpoint's entry is not shown.
    assert [line.split(" ", 2)[2] for line in lines] == [
        "c ray llm/Forward max_ongoing_requests 8 -> 1 (the stack kept 8)",
        "a ray llm/Forward max_ongoing_requests 8 -> 4",
    ]


def test_get_prints_a_table_of_the_knobs(capsys: pytest.CaptureFixture[str]) -> None:
    print_knobs(
        [
            Knob("ray", "llm/Forward", "max_ongoing_requests", 5, "int", minimum=1),
            Knob("litellm", "model:a", "rpm", None, "int", minimum=0, nullable=True),
            Knob("dynamo", "m\x1b[31m", "active_decode_blocks_threshold", 0.85, "float"),
        ]
    )
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["target", "knob", "value", "bounds"]
    assert lines[1].split() == ["llm/Forward", "max_ongoing_requests", "5", "1.."]
    assert lines[2].split() == ["model:a", "rpm", "none", "0..", "(none:", "no", "limit)"]
    assert "\x1b" not in lines[3] and lines[3].split()[-1] == "0.85"
