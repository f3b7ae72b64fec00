"""The queue-wait budget where operators read and set it: the admission panel's column and the
``e`` form's field (empty: derived); ``gpuwatch limits``' table is checked beside the token
budget's column (``test_gate_token_budget_display``)."""

from __future__ import annotations

from gpuwatch.adminapi import LaneStatus
from gpuwatch.tui.screens.edit import FIELDS, VALIDATORS, parse_field
from gpuwatch.tui.widgets.admission import SHORT, _wait


def test_the_panel_shows_the_oldest_wait_over_the_budget() -> None:
    live = {"oldest_queued_s": 0.42, "queue_wait": {"budget_s": 1.5, "source": "slo"}}
    assert _wait(LaneStatus.from_json(live, "lane")) == "0.4/1.5s"
    assert _wait(LaneStatus.from_json({"queue_wait": {"budget_s": None}}, "lane")) == "-"
    assert _wait(LaneStatus.from_json({}, "lane")) == "-"  # an older gate's has no queue_wait
    assert SHORT["queue_deadline"] == "deadline"


def test_the_form_has_the_field_and_empty_means_derived() -> None:
    assert "max_queue_wait_s" in [key for key, _, _ in FIELDS]
    assert parse_field("max_queue_wait_s", "") is None
    assert parse_field("max_queue_wait_s", " 1.5 ") == 1.5
    assert parse_field("max_queue_wait_s", "0") == 0.0
    check = VALIDATORS["max_queue_wait_s"][0]
    assert check.validate("").is_valid and check.validate("0").is_valid
    assert not check.validate("-1").is_valid and not check.validate("soon").is_valid
