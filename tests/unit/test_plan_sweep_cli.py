"""``gpuwatch plan sweep``'s command line, in-process (the simulator runs in simulated time:
no sockets): usage errors, --traffic replay, --json, the state file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuwatch.cli import main

QUICK = ["--max-probes", "4", "--min-duration", "60", "--max-duration", "120", "--no-chart"]


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # no user config file
    return tmp_path / "state"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--url", "http://127.0.0.1:1", "--profile", "rtx4090-llama3-8b-awq"], "not both"),
        (["--budget", "10"], "go with --url"),
        (["--slo", "ttft_p99_s=0"], "ttft_p99_s must be above 0"),
        (["--slo", "goodput_min=1"], "goodput_min must be between 0 and 1"),
        (["--slo", "nope=1"], "expected one of"),
        (["--profile", "nope"], "unknown profile"),
        (["--output-tokens", "0"], "--output-tokens"),
        (["--min-duration", "100", "--max-duration", "50"], "--max-duration"),
        (["--headroom", "1.5"], "fraction of the knee"),
        (["--min-sequences", "6", "--max-sequences", "5"], "--max-sequences must be at least"),
        (["--min-sequences", "1", "--max-sequences", "5"], "at least 2 to judge across"),
        (["--max-sequences", "501"], "--max-sequences is at most 500"),
    ],
)
def test_usage_errors_exit_2_with_the_reason(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", "sweep", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpuwatch plan sweep: ") and message in err


def test_json_on_stdout_and_the_plan_saved_for_the_dashboard(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["plan", "sweep", *QUICK, "--json", "--slo", "ttft_p99_s=2,goodput_min=0.95",
                 "--gate", "http://127.0.0.1:9000"])  # fmt: skip
    out, err = capsys.readouterr()
    plan = json.loads(out)  # nothing else on stdout
    assert code == 0 and plan["knee_rps"] > 0
    assert plan["slo"] == {"ttft_p99_s": 2.0, "itl_p99_s": None, "goodput_min": 0.95}
    assert len(plan["probes"]) <= 4 and plan["probes"][0]["rate"] == 1.0
    # Judged across arrival sequences: 4 to 8 a rate, +-2.5 points by default at 95%.
    assert plan["sequences"]["min"] == 4 and plan["sequences"]["max"] == 8
    assert plan["sequences"]["goodput_precision"] == pytest.approx(0.025)
    assert plan["knee_spread"]["sequences"] == 8 and plan["knee_spread"]["low"] >= 0.95
    assert [c["probe"]["sequences"] for c in plan["checks"]] == [8, 8]
    saved = state / "gpuwatch" / "plans" / "127.0.0.1-9000.json"
    assert json.loads(saved.read_text())["knee_rps"] == plan["knee_rps"]
    assert str(saved) in err


def test_traffic_replays_a_load_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A recorded run: bursts of 5 requests every 10 s, long prompts.
    starts = [10.0 * b + 0.1 * i for b in range(20) for i in range(5)]
    report = {"start_times": starts, "input_lens": [1500] * 100, "output_lens": [200] * 100,
              "errors": [""] * 100, "lanes": ["chat"] * 100}  # fmt: skip
    (tmp_path / "run.json").write_text(json.dumps(report))
    assert main(["plan", "sweep", *QUICK, "--traffic", str(tmp_path / "run.json"), "--json",
                 "--no-save"]) in (0, 1)  # fmt: skip
    plan = json.loads(capsys.readouterr().out)
    assert plan["traffic"].startswith(f"replay of {tmp_path / 'run.json'}: 100 requests")
    # Every sequence replays the recording at its probe's rate: about rate x duration requests.
    for p in plan["probes"]:
        expected = p["rate"] * p["duration_s"] * p["sequences"]
        assert abs(p["arrived"] - expected) <= 5 * p["sequences"] + 0.05 * p["arrived"]
