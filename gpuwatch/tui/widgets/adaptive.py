"""The adaptive lanes: per lane whose admission the gate's controller steers, the effective
in-flight limit against its bounds, the target, the last decision and why, and a sparkline of
the effective limit (one bar a second, from the gate's own history, so it is there from the
first poll). Hidden while no lane is adaptive."""

from __future__ import annotations

import time
from typing import Any

from gpuwatch.adminapi import AdaptiveStatus
from gpuwatch.fmt import clip
from gpuwatch.monitor.state import GateView
from gpuwatch.tui.markup import escape
from gpuwatch.tui.widgets.panel import Panel, flow, usable_width

BARS = "▁▂▃▄▅▆▇█"
SPARK_WIDTH = 20  # the last 20 s


def sparkline(values: list[int], low: int, high: int, width: int = SPARK_WIDTH) -> str:
    """One bar a value, scaled from the lower bound (▁) to the upper (█)."""
    shown = values[-width:]
    span = max(1, high - low)
    out = []
    for v in shown:
        level = (min(max(v, low), high) - low) / span
        out.append(BARS[round(level * (len(BARS) - 1))])
    return "".join(out)


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.0f}ms" if value < 1 else f"{value:.1f}s"


def _ago(when: float | None, now: float) -> str:
    if when is None:
        return ""
    s = max(0.0, now - when)
    return f"{s:.0f}s ago" if s < 120 else f"{s / 60:.0f}m ago"


def lane_lines(
    name: str, a: AdaptiveStatus, selected: bool, now: float, width: int = 72
) -> list[str]:
    eff, low, high = a.effective_max_inflight, a.min_inflight, a.max_inflight
    label = f"[reverse]{name:<8}[/reverse]" if selected else f"{name:<8}"
    color = "$warn" if eff <= low else "$foreground"
    tokens = ""
    if a.effective_max_inflight_tokens is not None:
        top = "?" if a.max_inflight_tokens is None else f"{a.max_inflight_tokens:,}"
        tokens = f"  tokens {a.effective_max_inflight_tokens:,}/{top}"
    spark = sparkline([n for _, n in a.history], low, high)
    head = [
        f" {label} [{color}]{eff:>4}[/] in {escape(f'[{low}..{high}]')}{tokens}",
        f"target p99 TTFT {_seconds(a.target_ttft_p99_s)}",
        f"[$queue]{spark}[/]",
    ]
    last = a.last_decision
    if last:
        tone = "$bad" if last.direction == "down" else "$ok"
        why = [
            f"[{tone}]{escape(clip(last.reason, 90))}[/]",
            f"[dim]{last.from_}->{last.to} {_ago(last.time, now)}[/]",
        ]
    else:
        why = ["[dim]no change yet[/]"]
    if a.note:
        why.append(f"[dim]({escape(clip(a.note, 60))})[/]")
    return flow(head, width, indent="") + flow(why, width, indent="    ")


class AdaptivePanel(Panel):
    DEFAULT_CSS = "AdaptivePanel { height: auto; }"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.display = False  # until a lane is adaptive

    def render_gate(
        self, gate: GateView | None, selected: str | None = None, now: float | None = None
    ) -> None:
        """``now``: wall-clock time (the monitor's), for how long ago the last decision was."""
        lanes = {
            name: live.adaptive
            for name, live in (gate.lanes.items() if gate is not None else ())
            if live.adaptive is not None
        }
        if not lanes:
            self.display = False
            return
        self.display = True
        now = time.time() if now is None else now
        head = r"effective in-flight limit in \[bounds], last 20 s"
        out = [f"[b]adaptive admission[/] [dim]{head}[/]"]
        for name, a in lanes.items():
            out += lane_lines(name, a, name == selected, now, usable_width(self))
        self.show("\n".join(out))
