"""The events panel: DOWN / UP / STALE, restarts, SLO breaches and recoveries, NVML errors,
limit changes; newest last."""

from __future__ import annotations

import time
from collections.abc import Iterable

from gpuwatch.monitor.state import Event
from gpuwatch.tui.markup import escape
from gpuwatch.tui.widgets.panel import Panel

COLORS = {"info": "$foreground", "ok": "$ok", "warn": "$warn", "bad": "$bad"}


class EventsPanel(Panel):
    def render_events(self, events: Iterable[Event]) -> None:
        rows = max(1, (self.content_size.height or 5))
        recent = list(events)[-rows:]
        if not recent:
            self.show("[dim]no events yet[/]")
            return
        lines = [
            f"[dim]{time.strftime('%H:%M:%S', time.localtime(e.time))}[/] "
            f"[{COLORS.get(e.level, '$foreground')}]{escape(e.text)}[/]"
            for e in recent
        ]
        self.show("\n".join(lines))
