"""A collector's outage in the log: a line when export starts failing, one when it works
again, nothing per batch; the span and metric exporters report apart, so a failure of an
export begun before one that worked (it was retrying while the collector came back) is not a
new outage."""

from __future__ import annotations

import logging

import pytest

from gpuwatch.otlp import _Outage

URL = "http://collector:4318"


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What each of the log's lines says: "failed" or "works again"."""
    said = [r.getMessage() for r in caplog.records if r.name == "gpuwatch.otlp"]
    assert all(m.startswith(f"OTLP export to {URL} ") for m in said), said
    return ["works again" if m.endswith(" works again") else "failed" for m in said]


def test_an_outage_is_said_once_and_its_end_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    outage = _Outage(URL)
    for began in (1.0, 2.0, 3.0):
        outage.saw(False, 10, began)
    assert outage.down and (outage.failures, outage.dropped) == (3, 30)
    outage.saw(True, 5, 4.0)
    outage.saw(True, 5, 5.0)
    assert not outage.down
    assert lines(caplog) == ["failed", "works again"]


def test_a_failure_begun_before_a_success_is_old_news(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    outage = _Outage(URL)
    outage.saw(False, 4, 1.0)  # down
    outage.saw(True, 0, 3.0)  # the metrics got through: it is back
    outage.saw(False, 4, 2.0)  # spans retried since 2.0, before it came back: counted, not said
    assert not outage.down and (outage.failures, outage.dropped) == (2, 8)
    outage.saw(False, 4, 4.0)  # begun after the success: down again
    assert outage.down
    assert lines(caplog) == ["failed", "works again", "failed"]
