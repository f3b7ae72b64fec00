"""One line: host, the main endpoint and its dialect / model, the health badge and why, the
RO / RW badge, and the clock."""

from __future__ import annotations

import time

from textual.content import Content

from gpuwatch.monitor.health import Verdict, badge_text
from gpuwatch.tui.markup import escape
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
        why = f"[{color}]{escape(verdict.reason)}[/]{waiting}"
        when = f"{mode}{freeze} {clock} [dim]{window}[/]"
        head = f"[b]gpuwatch[/] {escape(host)} {badge} {why}  {when}"
        if self.size.width and Content.from_markup(head).cell_length > self.size.width:
            # Too narrow for the clock after the reason (80 columns and a long reason): the
            # read-only badge and the clock (is this screen live?) go before the reason, whose
            # end the edge cuts. The endpoint, last, is the first thing cut either way.
            head = f"[b]gpuwatch[/] {escape(host)} {badge} {when}  {why}"
        self.show(f"{head}  {escape(endpoint)}")
