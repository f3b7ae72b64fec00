"""The token budget where operators see and change it: the admission panel's
``tokens 41k/96k``, the edit form's field, and the CLI's limits table."""

from __future__ import annotations

import pytest

from gpuwatch.adminapi import LaneLimits, LaneStatus, Limits
from gpuwatch.cli.limits import print_limits
from gpuwatch.tui.screens.edit import FIELDS, VALIDATORS, parse_field
from gpuwatch.tui.widgets.admission import REASONS, SHORT, _budget, _tokens


@pytest.mark.parametrize(
    ("value", "shown"),
    [(0, "0"), (512, "512"), (1000, "1k"), (1500, "1.5k"), (41_000, "41k"), (96_000, "96k"),
     (2_500_000, "2.5M")],
)  # fmt: skip
def test_tokens_at_a_glance(value: int, shown: str) -> None:
    assert _tokens(value) == shown


def test_the_panel_shows_used_over_budget() -> None:
    def budget(limits: dict[str, object], live: dict[str, object]) -> str:
        return _budget(LaneLimits.from_json(limits), LaneStatus.from_json(live, "lane"))

    assert budget({"max_inflight_tokens": 96_000}, {"inflight_tokens": 41_000}) == "41k/96k"
    assert budget({"max_inflight_tokens": None}, {"inflight_tokens": 0}) == "-"
    assert budget({"max_inflight_tokens": 4000}, {}) == "0/4k"  # an older gate's status


def test_every_refusal_reason_has_a_short_name() -> None:
    assert set(REASONS) <= set(SHORT)


def test_the_form_has_the_budget_and_empty_means_none() -> None:
    assert "max_inflight_tokens" in [key for key, _, _ in FIELDS]
    assert parse_field("max_inflight_tokens", "") is None
    assert parse_field("max_inflight_tokens", " 96000 ") == 96_000
    check = VALIDATORS["max_inflight_tokens"][0]
    assert check.validate("").is_valid and check.validate("96000").is_valid
    assert not check.validate("0").is_valid and not check.validate("x").is_valid


def test_the_cli_table_has_the_column(capsys: pytest.CaptureFixture[str]) -> None:
    lane = {
        "max_inflight": 8, "max_queue": 4, "queue_timeout_s": 30.0, "max_prompt_tokens": None,
        "max_output_tokens": 1024, "output_tokens_policy": "clamp",
    }  # fmt: skip
    print_limits(Limits.from_json(
        {"version": 2, "paused": False,
         "lanes": {"chat": {**lane, "max_inflight_tokens": 96000, "max_queue_wait_s": 1.5},
                   "old": lane}}
    ))  # fmt: skip
    out = capsys.readouterr().out.splitlines()
    assert "tokens" in out[1]
    assert "96000" in out[2] and out[3].split()[-2] == "-"
    # The queue-wait budget: as set, or ``auto`` when derived (an older gate's too).
    assert out[1].split()[4] == "wait"
    assert out[2].split()[4] == "1.5" and out[3].split()[4] == "auto"
