"""The upstream timeouts where operators read and set them: the ``e`` form's fields (empty: no
limit), ``gpuwatch limits``' table, and the gate's TOML config."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwatch.adminapi import Limits
from gpuwatch.cli.limits import print_limits
from gpuwatch.gate.config import load_gate_config
from gpuwatch.gate.limits import UPSTREAM_TIMEOUTS, LaneLimits
from gpuwatch.tui.screens.edit import FIELDS, VALIDATORS, parse_field


def test_defaults_bound_a_silent_upstream() -> None:
    limits = LaneLimits()
    assert limits.upstream_first_byte_timeout_s == 300.0
    assert limits.upstream_idle_timeout_s == 60.0


@pytest.mark.parametrize("key", UPSTREAM_TIMEOUTS)
def test_the_form_has_the_fields_and_empty_means_no_limit(key: str) -> None:
    assert key in [k for k, _, _ in FIELDS]
    assert parse_field(key, "") is None
    assert parse_field(key, " 90 ") == 90.0
    check = VALIDATORS[key][0]
    assert check.validate("").is_valid and check.validate("0.5").is_valid
    assert not check.validate("0").is_valid and not check.validate("soon").is_valid


def test_the_cli_table_has_the_columns(capsys: pytest.CaptureFixture[str]) -> None:
    lane = {
        "max_inflight": 8, "max_queue": 4, "queue_timeout_s": 30.0, "max_prompt_tokens": None,
        "max_output_tokens": 1024, "output_tokens_policy": "clamp",
    }  # fmt: skip
    timeouts = {"upstream_first_byte_timeout_s": 300.0, "upstream_idle_timeout_s": None}
    print_limits(
        Limits.from_json({"version": 2, "paused": False, "lanes": {"chat": {**lane, **timeouts}}})
    )
    out = capsys.readouterr().out.splitlines()
    assert out[1].split()[5:7] == ["ttfb", "idle"]
    assert out[2].split()[5:7] == ["300", "-"]


def test_the_config_sets_them(tmp_path: Path) -> None:
    path = tmp_path / "gate.toml"
    path.write_text("[lanes.image]\nupstream_first_byte_timeout_s = 900\n"
                    "upstream_idle_timeout_s = 120.5\n")  # fmt: skip
    lanes = {lane.name: lane.limits for lane in load_gate_config(path).lanes}
    assert lanes["image"].upstream_first_byte_timeout_s == 900.0
    assert lanes["image"].upstream_idle_timeout_s == 120.5
    assert lanes["chat"].upstream_idle_timeout_s == 60.0
