"""The dashboard's KV headroom: ``fits ~N more sessions of the current mix`` =
floor((kv_tokens_total - kv_tokens_used) / (kv_tokens_used / running)), live."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuwatch.monitor.figures import EngineFigures, headroom_sessions
from gpuwatch.tui.widgets.engines import engine_segments, headroom_text


def figures(**kw: object) -> EngineFigures:
    base = EngineFigures(
        source="http://x/metrics",
        dialect="vllm",
        model="m",
        state="UP",
        running=None,
        waiting=0,
        kv_cache_usage=None,
        kv_tokens_used=None,
        kv_tokens_total=None,
        ttft_p50=None,
        ttft_p99=None,
        itl_p99=None,
        queue_p99=None,
        prefix_hit_rate=None,
        preemptions_per_min=None,
        prompt_tps=None,
        gen_tps=None,
        window_s=60,
        rate_window_s=10,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def test_headroom_arithmetic() -> None:
    # 12 sessions hold 30,000 tokens: 2,500 each; 125,264 - 30,000 = 95,264 free
    # -> floor(95,264 / 2,500) = floor(38.1) = 38 more
    assert headroom_sessions(30_000, 125_264, 12) == 38
    # vLLM's used is usage x total: 0.3 x 125,264 = 37,579.2 used by 10 -> 3,757.92 each;
    # free 87,684.8 / 3,757.92 = 23.3 -> 23
    assert headroom_sessions(0.3 * 125_264, 125_264, 10) == 23
    assert headroom_sessions(125_264, 125_264, 40) == 0  # full
    assert headroom_sessions(130_000, 125_264, 40) == 0  # over-reported: never negative


@pytest.mark.parametrize(
    ("used", "total", "running"),
    [(None, 100, 1), (10, None, 1), (10, 100, None), (10, 100, 0), (0, 100, 3), (10, 0, 1)],
)
def test_headroom_unknown(used: int | None, total: int | None, running: int | None) -> None:
    assert headroom_sessions(used, total, running) is None


def test_headroom_in_figures_json_and_the_engine_panel() -> None:
    f = figures(running=12, kv_tokens_used=30_000, kv_tokens_total=125_264, kv_cache_usage=0.24)
    assert f.headroom_sessions == 38
    assert f.to_json()["headroom_sessions"] == 38
    text = headroom_text(f)
    assert text is not None and "~38[/] more sessions of the current mix" in text
    assert text in engine_segments(f, None)
    # Idle: no mix to measure, but the line stays (as N/A), so the engine panel keeps its
    # lines and nothing below it moves as the engine goes idle and busy (a slow link's bytes).
    idle = figures(running=0, kv_tokens_used=0, kv_tokens_total=125_264)
    assert idle.to_json()["headroom_sessions"] is None
    assert headroom_text(idle) == "fits N/A more sessions of the current mix"
    assert len(engine_segments(idle, None)) == len(engine_segments(f, None))
    # An engine that reports no KV tokens never has the line.
    blind = figures(running=3, kv_cache_usage=0.5)
    assert headroom_text(blind) is None
    assert not any("more sessions" in s for s in engine_segments(blind, None))
    full = figures(running=40, kv_tokens_used=125_264, kv_tokens_total=125_264)
    assert headroom_text(full) == "fits [$bad]~0[/] more sessions of the current mix"
    tight = figures(running=40, kv_tokens_used=120_000, kv_tokens_total=125_264)
    assert headroom_text(tight) == "fits [$warn]~1[/] more sessions of the current mix"
