"""The engine panel: per endpoint and model, the numbers that say whether it is in its boring
zone: running / waiting, KV cache (and the sessions it still fits), prefix hits, preemptions,
token rates, TTFT and ITL."""

from __future__ import annotations

from typing import Any

from gpuwatch.fmt import NA, accuracy, duration, num, pct, seconds
from gpuwatch.monitor.figures import EngineFigures, engine_figures
from gpuwatch.monitor.state import Endpoint, UsersView, short_url
from gpuwatch.tui.markup import escape
from gpuwatch.tui.widgets.bars import gauge, level_color
from gpuwatch.tui.widgets.panel import Panel, flow, usable_width, wrapped

STATE_COLOR = {"UP": "$ok", "DOWN": "$bad", "STALE": "$warn", "WAITING": "$foreground"}


def kv_text(f: EngineFigures) -> str:
    tokens = ""
    if f.kv_tokens_total:
        tokens = f" {num(f.kv_tokens_used)}/{num(f.kv_tokens_total)} tok"
    usage = f.kv_cache_usage
    return f"KV {gauge(usage, 8, '$kv')} [{level_color(usage)}]{pct(usage)}[/]{tokens}"


def headroom_text(f: EngineFigures) -> str | None:
    """``fits ~N more sessions of the current mix``; ``fits N/A more ...`` while nothing runs on
    an engine that reports its KV tokens (the line stays, so the lines below do not move each
    time the engine goes idle: on a slow link a shift rewrites the whole column); None when
    it reports no KV tokens."""
    n = f.headroom_sessions
    if n is None:
        return f"fits {NA} more sessions of the current mix" if f.kv_tokens_total else None
    # none left, or fewer than a tenth of what runs now: the next burst queues
    color = "$bad" if n == 0 else "$warn" if n < (f.running or 0) / 10 else "$foreground"
    return f"fits [{color}]~{num(n)}[/] more sessions of the current mix"


def _p99_color(p99: float | None, slo: float | None) -> str:
    return level_color(p99 / slo if p99 is not None and slo else None, 0.8, 1.0)


def tails_label(f: EngineFigures) -> str:
    """Whose tails these are: the gate's for a lane (exact, or ``±0.5%`` where it kept log
    buckets), or its histogram's."""
    if f.exact_lane is not None:
        return f"({escape(f.exact_lane)}, {accuracy(f.tails_rel_error)})"
    return "(histogram)"


def gate_segments(f: EngineFigures, ttft_slo: float | None) -> list[str]:
    """The gate's own view: what users feel, queue wait included."""
    return [
        f"in-flight [b]{num(f.running)}[/]",
        f"queued [$queue][b]{num(f.waiting)}[/][/]",
        f"user TTFT [dim]{f.window} {tails_label(f)}[/] p50 {seconds(f.ttft_p50)} "
        f"p99 [{_p99_color(f.ttft_p99, ttft_slo)}][b]{seconds(f.ttft_p99)}[/][/]",
        f"queue wait p99 {seconds(f.queue_p99)} [dim]{f.window}[/]",
    ]


def engine_segments(f: EngineFigures, ttft_slo: float | None) -> list[str]:
    if f.dialect == "gate":
        return gate_segments(f, ttft_slo)
    waiting_color = "$queue" if (f.waiting or 0) > 0 else "$foreground"
    preempt = f.preemptions_per_min
    preempt_color = "$bad" if preempt else "$foreground"
    shown_preempt = num(preempt, 1) if preempt is not None else NA
    headroom = headroom_text(f)
    return [
        f"run [b]{num(f.running)}[/]",
        f"wait [{waiting_color}][b]{num(f.waiting)}[/][/]",
        kv_text(f),
        *([headroom] if headroom else []),
        f"prefix {pct(f.prefix_hit_rate)} [dim]{f.window}[/]",
        f"preempt [{preempt_color}]{shown_preempt}/min[/] [dim]{f.window}[/]",
        f"tok/s [dim]{f.rate_window}[/] prompt {num(f.prompt_tps)} gen [b]{num(f.gen_tps)}[/]",
        f"TTFT [dim]{f.window}[/] p50 {seconds(f.ttft_p50)} "
        f"p99 [{_p99_color(f.ttft_p99, ttft_slo)}][b]{seconds(f.ttft_p99)}[/][/]",
        f"ITL p99 {seconds(f.itl_p99)} [dim]{f.window}[/]",
    ]


def essential_segments(f: EngineFigures, ttft_slo: float | None) -> list[str]:
    """An engine's line when room is short: what it holds, what waits, its KV, its p99."""
    if f.dialect == "gate":
        return [
            f"in-flight [b]{num(f.running)}[/]",
            f"queued [$queue][b]{num(f.waiting)}[/][/]",
            f"user TTFT p99 [{_p99_color(f.ttft_p99, ttft_slo)}][b]{seconds(f.ttft_p99)}[/][/]"
            f" [dim]{f.window}[/]",
        ]
    waiting_color = "$queue" if (f.waiting or 0) > 0 else "$foreground"
    return [
        f"run [b]{num(f.running)}[/]",
        f"wait [{waiting_color}][b]{num(f.waiting)}[/][/]",
        kv_text(f),
        f"TTFT p99 [{_p99_color(f.ttft_p99, ttft_slo)}][b]{seconds(f.ttft_p99)}[/][/]"
        f" [dim]{f.window}[/]",
    ]


def stall_badge(f: EngineFigures) -> str:
    """`` STALLED 23s`` on a stalled engine's line (gpuwatch/stall.py), else nothing."""
    if f.stalled_s is None:
        return ""
    return f" [b reverse $bad] STALLED {duration(f.stalled_s)} [/]"


# How much of each engine is shown, most first. Room short (column.py: the admission lanes stay
# in view below), the gate's own line goes to one line first (its admission panel is right
# below), then each engine to its essentials under its name, then to one line with its name.
FULL, GATE_ONE_LINE, ESSENTIALS, ONE_LINE = range(4)


class EnginePanel(Panel):
    DEFAULT_CSS = "EnginePanel { height: auto; }"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.level = FULL  # how much it shows now (for tests)
        # render_engines' arguments, to draw again at another room
        self._shown_for: (
            tuple[list[Endpoint], float | None, str | None, UsersView | None, float | None] | None
        ) = None

    def redraw(self) -> None:
        if self._shown_for is not None:
            self.render_engines(*self._shown_for)

    def takes(self, lines: int | None) -> int:
        if self._shown_for is None or not self._shown_for[0]:
            return len(self._rows)
        return wrapped(self._fit(lines)[1], usable_width(self) + 2)

    def render_engines(
        self,
        endpoints: list[Endpoint],
        ttft_slo: float | None,
        hint: str | None,
        users: UsersView | None = None,
        now: float | None = None,
    ) -> None:
        """``users``: the gate's exact view, which the gate's own line shows when it has it;
        ``now``: the instant shown (the monitor's clock), up to which a stall is counted."""
        self._shown_for = (endpoints, ttft_slo, hint, users, now)
        if not endpoints:
            self.show(f"[$warn]{escape(hint or 'no endpoints')}[/]")
            return
        self.level, out = self._fit(self.room)
        if self.room is not None:
            out = out[: max(1, self.room)]  # one line an engine is still too many: the first
            self.wants(self.takes(None))
        self.show("\n".join(out))

    def _fit(self, room: int | None) -> tuple[int, list[str]]:
        """The most detailed level whose text fits ``room`` lines (else the fewest), and it."""
        assert self._shown_for is not None
        endpoints, ttft_slo, _, users, now = self._shown_for
        width = usable_width(self)
        for level in (FULL, GATE_ONE_LINE, ESSENTIALS, ONE_LINE):
            out = self._text_at(endpoints, ttft_slo, users, now, width, level)
            if room is None or wrapped(out, width + 2) <= room:
                break
        return level, out

    def _text_at(
        self,
        endpoints: list[Endpoint],
        ttft_slo: float | None,
        users: UsersView | None,
        now: float | None,
        width: int,
        level: int,
    ) -> list[str]:
        out: list[str] = []
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
                figures = engine_figures(ep, view, users, now)
                state = f" [{color}]{ep.status.state}[/]{reason}{stall_badge(figures)}"
                gate = view.snap.dialect == "gate"
                if level >= ONE_LINE or (gate and level >= GATE_ONE_LINE):
                    # No URL: the gate's is on the admission panel's first line, and an
                    # engine's model names it.
                    name = f"[{color}]●[/] [b]{view.snap.dialect}[/]" + (
                        f" {model}" if model else ""
                    )
                    segments = [name + state, *essential_segments(figures, ttft_slo)]
                    out.extend(flow(segments, width, indent=""))
                    continue
                head = (
                    f"[{color}]●[/] [b]{view.snap.dialect}[/] {model} "
                    f"[dim]@ {escape(short_url(ep.url))}[/]{state}"
                )
                segments = (
                    essential_segments(figures, ttft_slo)
                    if level >= ESSENTIALS
                    else engine_segments(figures, ttft_slo)
                )
                out.append(head)
                out.extend(flow(segments, width))
        return out
