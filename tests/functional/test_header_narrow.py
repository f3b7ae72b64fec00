"""The header at 80 columns with a long health reason: the read-only badge and the clock stay
in view (is this screen live, can I act?), and the reason's end is what the edge cuts; where
everything fits, the reason comes first as before."""

from __future__ import annotations

import time

import pytest
from textual.app import App, ComposeResult

from gpuwatch.monitor.health import Verdict
from gpuwatch.tui.themes import SEMANTIC_DEFAULTS
from gpuwatch.tui.widgets.header import HeaderBar

REASON = "goodput 1m 30.7% < 99.0%: 69% slow, 31% refused, p99 TTFT 1m 4.91s > 2.00s"
WALL = time.mktime((2026, 12, 1, 3, 12, 40, 0, 0, -1))


class Bar(App[None]):
    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(SEMANTIC_DEFAULTS)  # $ok, $bad... as the dashboard defines them

    def compose(self) -> ComposeResult:
        yield HeaderBar()


@pytest.mark.parametrize("width", [80, 200])
async def test_the_clock_stays_in_view_and_the_reason_is_cut(width: int) -> None:
    app = Bar()
    async with app.run_test(size=(width, 3)) as pilot:
        bar = app.query_one(HeaderBar)
        await pilot.pause()
        verdict = Verdict("OVERLOADED", REASON)
        bar.render_header("gpu-node-1", "vllm/llama", verdict, None, True, False, "1m", WALL)
        await pilot.pause()
        line = "".join(s.text for s in bar.render_line(0)).rstrip()
        assert line.startswith("gpuwatch gpu-node-1  OVERLOADED ")
        assert " RO  03:12:40 1m" in line
        if width == 80:
            # The clock before the reason; the reason's start in view, its end cut.
            assert line.index("03:12:40") < line.index("goodput 1m 30.7%")
            assert REASON not in line and "vllm/llama" not in line
        else:
            assert line.index(REASON) < line.index("03:12:40") < line.index("vllm/llama")
