"""The engine panel: per endpoint and model, the numbers that say whether it is in its boring
zone: running / waiting, KV cache, prefix hits, preemptions, token rates, TTFT and ITL."""

from __future__ import annotations

from rich.markup import escape

from gpuwatch.fmt import NA, num, pct, seconds
from gpuwatch.monitor.state import Endpoint, EngineView
from gpuwatch.tui.widgets.bars import gauge, level_color
from gpuwatch.tui.widgets.panel import Panel, flow

STATE_COLOR = {"UP": "$ok", "DOWN": "$bad", "STALE": "$warn", "WAITING": "$foreground"}


def short_url(url: str) -> str:
    return url.split("://", 1)[-1].removesuffix("/metrics")


def kv_text(view: EngineView) -> str:
    s = view.snap
    tokens = ""
    if s.kv_tokens_total:
        tokens = f" {num(s.kv_tokens_used)}/{num(s.kv_tokens_total)} tok"
    elif s.kv_blocks_total:
        tokens = f" {num(s.kv_blocks_used)}/{num(s.kv_blocks_total)} blk"
    usage = s.kv_cache_usage
    return f"KV {gauge(usage, 8, '$kv')} [{level_color(usage)}]{pct(usage)}[/]{tokens}"


def gate_segments(view: EngineView, ttft_slo: float | None) -> list[str]:
    """The gate's own view: what users feel, queue wait included."""
    s, h = view.snap, view.history
    p50, p99 = h.quantile("ttft", 0.5), h.quantile("ttft", 0.99)
    p99_color = level_color(p99 / ttft_slo if p99 is not None and ttft_slo else None, 0.8, 1.0)
    return [
        f"in-flight [b]{num(s.running)}[/]",
        f"queued [$queue][b]{num(s.waiting)}[/][/]",
        f"user TTFT p50 {seconds(p50)} p99 [{p99_color}][b]{seconds(p99)}[/][/]",
        f"queue wait p99 {seconds(h.quantile('queue', 0.99))}",
    ]


def engine_segments(view: EngineView, ttft_slo: float | None) -> list[str]:
    s, h = view.snap, view.history
    if s.dialect == "gate":
        return gate_segments(view, ttft_slo)
    p50, p99 = h.quantile("ttft", 0.5), h.quantile("ttft", 0.99)
    itl = h.quantile("itl", 0.99)
    p99_color = level_color(p99 / ttft_slo if p99 is not None and ttft_slo else None, 0.8, 1.0)
    preempt = h.per_minute("preemptions_total")
    hit = h.prefix_hit_rate()
    if hit is None:
        hit = s.prefix_cache_hit_rate
    waiting_color = "$queue" if (s.waiting or 0) > 0 else "$foreground"
    preempt_color = "$bad" if preempt else "$foreground"
    return [
        f"run [b]{num(s.running)}[/]",
        f"wait [{waiting_color}][b]{num(s.waiting)}[/][/]",
        kv_text(view),
        f"prefix {pct(hit)}",
        f"preempt [{preempt_color}]{num(preempt, 1) if preempt is not None else NA}/min[/]",
        f"prompt {num(h.rate('prompt_tokens_total'))} tok/s",
        f"gen [b]{num(h.rate('generation_tokens_total'))}[/] tok/s",
        f"TTFT p50 {seconds(p50)} p99 [{p99_color}][b]{seconds(p99)}[/][/]",
        f"ITL p99 {seconds(itl)}",
    ]


class EnginePanel(Panel):
    DEFAULT_CSS = "EnginePanel { height: auto; }"

    def render_engines(
        self, endpoints: list[Endpoint], ttft_slo: float | None, hint: str | None
    ) -> None:
        if not endpoints:
            self.show(f"[$warn]{escape(hint or 'no endpoints')}[/]")
            return
        out: list[str] = []
        width = max(40, (self.content_region.width or 80))
        for ep in endpoints:
            color = STATE_COLOR.get(ep.status.state, "$foreground")
            reason = f" [dim]{escape(ep.status.reason)}[/]" if ep.status.reason else ""
            if not ep.engines:
                out.append(
                    f"[{color}]●[/] {escape(short_url(ep.url))} "
                    f"[{color}]{ep.status.state}[/]{reason}"
                )
                continue
            for view in ep.engines.values():
                model = escape((view.snap.model or "").rsplit("/", 1)[-1])
                out.append(
                    f"[{color}]●[/] [b]{view.snap.dialect}[/] {model} "
                    f"[dim]@ {escape(short_url(ep.url))}[/]"
                    f" [{color}]{ep.status.state}[/]{reason}"
                )
                out.extend(flow(engine_segments(view, ttft_slo), width))
        self.show("\n".join(out))
