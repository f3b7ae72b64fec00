"""One line: host, the main endpoint and its dialect / model, the health badge and why, the
RO / RW badge, and the clock."""

from __future__ import annotations

import time

from rich.markup import escape

from gpuwatch.monitor.health import Verdict, badge_text
from gpuwatch.tui.widgets.panel import Panel

BADGE = {"NO DATA": "$foreground", "OK": "$ok", "TIGHT": "$warn", "OVERLOADED": "$bad"}


class HeaderBar(Panel):
    # One line, cut at the edge (not wrapped: a wrapped word would vanish whole).
    DEFAULT_CSS = (
        "HeaderBar { height: 1; background: $panel; text-wrap: nowrap; text-overflow: clip; }"
    )

    def render_header(
        self,
        host: str,
        endpoint: str,
        verdict: Verdict,
        pending: tuple[str, float] | None,
        read_only: bool,
        frozen: bool,
        window: str,
        wall: float,
        clock_label: str = "",
    ) -> None:
        """``clock_label`` names a clock that is not now (``REPLAY``)."""
        color = BADGE[verdict.level]
        badge = f"[b reverse {color}] {badge_text(verdict)} [/]"
        waiting = f" [dim]({pending[0].lower()} in {pending[1]:.0f}s?)[/]" if pending else ""
        mode = "[b reverse $warn] RO [/]" if read_only else "[b reverse $primary] RW [/]"
        freeze = " [b reverse $warn] FROZEN [/]" if frozen else ""
        clock = time.strftime("%H:%M:%S", time.localtime(wall))
        if clock_label:
            clock = f"[b reverse $accent] {escape(clock_label)} {clock} [/]"
        self.show(
            f"[b]gpuwatch[/] {escape(host)} {badge} [{color}]{escape(verdict.reason)}[/]"
            f"{waiting}  {mode}{freeze} {clock} [dim]{window}[/]  {escape(endpoint)}"
        )
