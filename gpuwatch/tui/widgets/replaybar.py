"""One line under a replayed dashboard, in the footer's place: playing or paused, the speed,
where the cursor is in the recording, and the next event to jump to."""

from __future__ import annotations

import time

from gpuwatch.tui.markup import escape
from gpuwatch.tui.widgets.panel import Panel


def _hms(wall: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(wall))


class ReplayBar(Panel):
    DEFAULT_CSS = "ReplayBar { height: 1; background: $panel; }"

    def render_bar(
        self,
        now: float,
        start: float,
        end: float,
        playing: bool,
        speed: int,
        next_mark: str | None,
        width: int,
    ) -> None:
        state = "[b $ok]>[/] playing" if playing else "[b $warn]||[/] paused"
        span = f"{_hms(start)} .. {_hms(end)}"
        # The cursor's place in the recording, as a bar as wide as the line allows.
        track = max(10, min(60, width - 110))
        at = 0 if end <= start else round((now - start) / (end - start) * (track - 1))
        bar = "-" * at + "[b]|[/]" + "-" * (track - 1 - at)
        upcoming = f"  next: {escape(next_mark)}" if next_mark else ""
        self.show(
            # RO here too: on a narrow terminal the header's end, where RO is, is cut off.
            f"[b reverse $accent] REPLAY [/][b reverse $warn] RO [/] {state} {speed}x  "
            f"{_hms(now)}  {span} [dim]{bar}[/]"
            f"{upcoming}  [dim]? keys[/]"
        )
