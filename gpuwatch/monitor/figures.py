"""The numbers an engine shows, each with the window it was computed over.

One place computes them for every reader (the dashboard's engine panel, ``gpuwatch watch``),
so a number means the same wherever it appears, and its window travels with it: on screen as
a suffix (``p99 TTFT 2.4s 1m``), in JSON in the field's name (``ttft_p99_1m``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuwatch.monitor.state import Endpoint, EngineView, SourceState
from gpuwatch.series import RECENT_RATE_WINDOW_S, window_label


@dataclass(frozen=True)
class EngineFigures:
    source: str
    dialect: str
    model: str | None
    state: SourceState
    running: float | None
    waiting: float | None
    kv_cache_usage: float | None
    kv_tokens_used: float | None
    kv_tokens_total: float | None
    # Over the history's window (``window``): PromQL's histogram_quantile(rate(...[w])).
    ttft_p50: float | None
    ttft_p99: float | None
    itl_p99: float | None
    queue_p99: float | None
    prefix_hit_rate: float | None
    preemptions_per_min: float | None
    # Over the short token-rate window (``rate_window``): rate(...[10s]).
    prompt_tps: float | None
    gen_tps: float | None
    window_s: float
    rate_window_s: float

    @property
    def window(self) -> str:
        return window_label(self.window_s)

    @property
    def rate_window(self) -> str:
        return window_label(self.rate_window_s)

    def to_json(self) -> dict[str, Any]:
        """Plain values; each windowed one named with its window (``ttft_p99_1m``)."""
        w, r = self.window, self.rate_window
        return {
            "source": self.source,
            "dialect": self.dialect,
            "model": self.model,
            "state": self.state,
            "running": self.running,
            "waiting": self.waiting,
            "kv_cache_usage": self.kv_cache_usage,
            "kv_tokens_used": self.kv_tokens_used,
            "kv_tokens_total": self.kv_tokens_total,
            f"ttft_p50_{w}": self.ttft_p50,
            f"ttft_p99_{w}": self.ttft_p99,
            f"itl_p99_{w}": self.itl_p99,
            f"queue_p99_{w}": self.queue_p99,
            f"prefix_hit_rate_{w}": self.prefix_hit_rate,
            f"preemptions_per_min_{w}": self.preemptions_per_min,
            f"prompt_tps_{r}": self.prompt_tps,
            f"gen_tps_{r}": self.gen_tps,
        }


def engine_figures(endpoint: Endpoint, view: EngineView) -> EngineFigures:
    s, h = view.snap, view.history
    hit = h.prefix_hit_rate()
    return EngineFigures(
        source=endpoint.url,
        dialect=s.dialect,
        model=s.model,
        state=endpoint.status.state,
        running=s.running,
        waiting=s.waiting,
        kv_cache_usage=s.kv_cache_usage,
        kv_tokens_used=s.kv_tokens_used,
        kv_tokens_total=s.kv_tokens_total,
        ttft_p50=h.quantile("ttft", 0.5),
        ttft_p99=h.quantile("ttft", 0.99),
        itl_p99=h.quantile("itl", 0.99),
        queue_p99=h.quantile("queue", 0.99),
        prefix_hit_rate=hit if hit is not None else s.prefix_cache_hit_rate,
        preemptions_per_min=h.per_minute("preemptions_total"),
        prompt_tps=h.rate("prompt_tokens_total"),
        gen_tps=h.rate("generation_tokens_total"),
        window_s=h.window_s,
        rate_window_s=RECENT_RATE_WINDOW_S,
    )
