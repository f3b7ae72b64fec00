"""What users feel: their TTFT taken apart ("is it queueing or prefill?"), and which part grew.

It fills the left column under the admission panel; at 80x24 it is the one line that matters.
"""

from __future__ import annotations

from gpuwatch.fmt import seconds
from gpuwatch.monitor.figures import TtftBreakdown
from gpuwatch.tui.widgets.bars import level_color
from gpuwatch.tui.widgets.panel import Panel, flow


class UsersPanel(Panel):
    DEFAULT_CSS = "UsersPanel { height: auto; }"

    def render_users(self, breakdown: TtftBreakdown | None, ttft_slo: float | None) -> None:
        if breakdown is None:
            self.display = False
            return
        self.display = True
        b = breakdown
        ratio = b.ttft_p99 / ttft_slo if b.ttft_p99 is not None and ttft_slo else None
        color = level_color(ratio, 0.8, 1.0)
        head = (
            f"[b]TTFT p99[/] [dim]{b.window}[/] [{color}][b]{seconds(b.ttft_p99)}[/][/]"
            f" [dim]at the {b.measured_at}[/]"
        )
        parts = [f"{p.name} {seconds(p.p99)}" for p in b.parts]
        segments = [head + (":" if parts else "")]
        if parts:
            segments.append(" + ".join(parts) + " [dim](each a p99)[/]")
        if b.decode_p99 is not None:
            segments.append(f"decode p99 {seconds(b.decode_p99)}")
        grew = b.grew()
        if grew is not None:
            segments.append(f"[$warn]▲ {grew.name} +{seconds(grew.grew_s)} in {b.window}[/]")
        width = max(40, self.content_region.width or 80)
        self.show("\n".join(flow(segments, width, indent="")))
