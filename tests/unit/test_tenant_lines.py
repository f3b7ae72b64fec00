"""The admission panel's classes and tenants lines (tui/widgets/tenants.py), from a lane's
/admin/status in the gate's shape."""

from __future__ import annotations

from typing import Any

from gpuwatch.adminapi import LaneStatus
from gpuwatch.tui.widgets.tenants import tenant_lines

LANE: dict[str, Any] = {
    "classes": {
        "critical": {"inflight": 8, "queued": 15, "rejected_total": {"queue_full": 113}},
        "standard": {"inflight": 0, "queued": 0, "rejected_total": {}},
        "sheddable": {"inflight": 0, "queued": 0, "rejected_total": {"evicted": 14}},
    },
    "tenants": [
        {"tenant": name, "id": name, "inflight": n, "queued": q}
        for name, n, q in [("noisy", 5, 13), ("t02", 1, 1), ("t01", 1, 0), ("t05", 1, 0)]
    ],
    "tenant_count": 6,
}
STATUS = LaneStatus.from_json(LANE, "lane")  # as the client reads it


def test_full_size_gives_classes_refusals_and_tenants_a_line_each() -> None:
    classes, refused, tenants = tenant_lines(STATUS, None)
    assert "classes[/] critical 8·15q" in classes and "tenants" not in classes
    assert "critical: full 113; sheddable: evicted 14" in refused
    assert "noisy 5·13q  t02 1·1q  t01 1  t05 1" in tenants and "+2" in tenants


def test_compact_puts_tenants_on_the_classes_line_so_lanes_below_stay_on_screen() -> None:
    lines = tenant_lines(STATUS, "t02", compact=True)
    assert len(lines) == 2  # one line fewer than at full size
    assert "critical 8·15q" in lines[0] and "tenants[/] noisy 5·13q" in lines[0]
    assert "[reverse]t02 1·1q[/reverse]" in lines[0]  # the selected tenant stays marked
    assert "t05" not in lines[0] and "+3" in lines[0]  # three tenants, the rest counted
    assert "evicted 14" in lines[1]


def test_compact_without_a_classes_line_keeps_the_tenants_line() -> None:
    lane = {"tenants": [{"tenant": "acme", "id": "acme", "inflight": 2, "queued": 0}]}
    assert tenant_lines(LaneStatus.from_json(lane, "lane"), None, compact=True) == [
        "   [dim]tenants[/] acme 2"
    ]
