"""The admission panel's classes and tenants lines (tui/widgets/tenants.py), from a lane's
/admin/status in the gate's shape."""

from __future__ import annotations

from typing import Any

from textual.content import Content

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


def plain(line: str) -> str:
    return Content.from_markup(line).plain


REFUSING: dict[str, Any] = {
    "classes": {
        "critical": {
            "inflight": 8,
            "queued": 15,
            "rejected_total": {"evicted": 69, "queue_full": 175},
        },
        "sheddable": {
            "inflight": 0,
            "queued": 0,
            "rejected_total": {"evicted": 26, "queue_full": 63},
        },
    },
}


def test_refusals_wider_than_the_panel_go_on_under_their_first_class() -> None:
    """160x48's panel (76 columns): the refusals' window heads the line, the class that does
    not fit goes on under the first, no line wider than the panel."""
    lines = [
        plain(x) for x in tenant_lines(LaneStatus.from_json(REFUSING, "lane"), None, False, 76)
    ]
    assert lines[1:] == [
        "   refused total critical: evicted 69 full 175",
        "                 sheddable: evicted 26 full 63",
    ]
    # Where they fit, one line.
    wide = tenant_lines(LaneStatus.from_json(REFUSING, "lane"), None, False, 120)
    assert plain(wide[1]).endswith("critical: evicted 69 full 175; sheddable: evicted 26 full 63")


def test_compact_refusals_keep_to_one_line_and_count_the_classes_left_off() -> None:
    lines = [plain(x) for x in tenant_lines(LaneStatus.from_json(REFUSING, "lane"), None, True, 60)]
    assert lines[1] == "   refused total critical: evicted 69 full 175  +1"


def _tenants(names: list[str], count: int) -> LaneStatus:
    lane = {
        "tenants": [{"tenant": n, "id": n, "inflight": 3, "queued": 2} for n in names],
        "tenant_count": count,
    }
    return LaneStatus.from_json(lane, "lane")


def test_long_tenant_names_fit_the_width_and_the_rest_are_counted() -> None:
    names = [f"team-{k}-with-a-long-name" for k in range(5)]  # each clipped to 18
    (line,) = tenant_lines(_tenants(names, 9), None, width=76)
    shown = plain(line)
    assert len(shown) <= 76
    kept = shown.count("team-")
    assert 0 < kept < 5 and shown.endswith(f"+{9 - kept}")  # 9 tenants, the others counted
    assert "team-0-with-a-l... 3·2q" in shown  # a name clipped says so


def test_the_selected_tenant_is_shown_even_where_it_would_be_cut() -> None:
    names = [f"team-{k}-with-a-long-name" for k in range(5)]
    (line,) = tenant_lines(_tenants(names, 9), "team-4-with-a-long-name", width=76)
    assert "[reverse]team-4-with-a-l... 3·2q[/reverse]" in line
    assert len(plain(line)) <= 76 and plain(line).endswith("+7")
    # At 80x24 three tenants are listed: a fourth selected with `n` takes the third's place.
    (compact,) = tenant_lines(_tenants(["a", "b", "c", "d"], 4), "d", compact=True)
    assert plain(compact) == "   tenants a 3·2q  b 3·2q  d 3·2q  +1"
