"""What users feel: goodput, their TTFT taken apart ("is it queueing or prefill?") and which
part grew, and each lane's tails from the gate (exact, or ``±0.5%`` where it says so).

It fills the left column under the admission panel; at 80x24 the first lines are what show.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuwatch.adminapi import LatencyWindow
from gpuwatch.fmt import accuracy, pct, seconds
from gpuwatch.monitor.figures import TtftBreakdown
from gpuwatch.monitor.health import SIGNALS, badness
from gpuwatch.monitor.state import UsersView
from gpuwatch.tui.markup import escape
from gpuwatch.tui.widgets.bars import level_color
from gpuwatch.tui.widgets.panel import Panel, flow, usable_width

TAIL_HEADER = (
    f"[dim] {'lane':<8}{'reqs':>6} {'TTFT p50':>9}{'p99':>7}{'max':>7}"
    f"{'queue p99':>10}{'ITL p99':>8}{'E2E p99':>8}[/]"
)


def breakdown_segments(b: TtftBreakdown, ttft_slo: float | None) -> list[str]:
    ratio = b.ttft_p99 / ttft_slo if b.ttft_p99 is not None and ttft_slo else None
    color = level_color(ratio, 0.8, 1.0)
    parts = [f"{p.name} {seconds(p.p99)}" for p in b.parts]
    head = (
        f"[b]TTFT p99[/] [dim]{b.window}[/] [{color}][b]{seconds(b.ttft_p99)}[/][/]"
        f" [dim]at the {b.measured_at}"
        + (f" ({escape(b.exact_lane)}, {accuracy(b.tails_rel_error)})" if b.exact_lane else "")
        + "[/]"
        + (":" if parts else "")
    )
    segments = [head]
    if parts:
        segments.append(" + ".join(parts) + " [dim](each a p99)[/]")
    if b.decode_p99 is not None:
        segments.append(f"decode p99 {seconds(b.decode_p99)}")
    grew = b.grew()
    if grew is not None:
        segments.append(f"[$warn]▲ {grew.name} +{seconds(grew.grew_s)} in {b.window}[/]")
    return segments


def goodput_line(users: UsersView, target: float | None) -> str:
    value = users.goodput
    shade = "$foreground"
    if value is not None and target:
        shade = level_color(badness(SIGNALS["goodput_min"], value, target), 0.8, 1.0001)
    of = f" (of {pct(target)})" if target else ""
    misses = users.misses()
    ended = users.totals["ended"]
    return (
        f"[b]goodput[/] [dim]{users.window}[/] [{shade}][b]{pct(value)}[/][/]{of}"
        f" [dim]of {ended} ended[/]" + (f"  {misses}" if misses else "")
    )


def tails_note(tails: Mapping[str, LatencyWindow]) -> str:
    """How the lane table's tails are known: ``exact``, ``±0.5%`` (every lane's from the
    gate's log buckets), or ``exact, ~ ±0.5%`` (the rows marked ``~`` are)."""
    errors = [t.error for t in tails.values() if t.error is not None]
    if not errors:
        return "exact"
    sketched = accuracy(max(errors))
    return sketched if len(errors) == len(tails) else f"exact, ~ {sketched}"


def tail_row(lane: str, t: LatencyWindow, mark: bool = False) -> str:
    """``mark``: some lanes' tails are exact and some not: a ``~`` ends a row that is not."""
    return (
        f" {escape(lane):<8}{t.requests!s:>6} {seconds(t.ttft.p50):>9}"
        f"{seconds(t.ttft.p99):>7}{seconds(t.ttft.max):>7}{seconds(t.queue_wait.p99):>10}"
        f"{seconds(t.itl.p99):>8}{seconds(t.e2e.p99):>8}"
    ) + (" ~" if mark and not t.exact else "")


class UsersPanel(Panel):
    DEFAULT_CSS = "UsersPanel { height: auto; }"

    def render_users(
        self,
        breakdown: TtftBreakdown | None,
        users: UsersView | None,
        slo: dict[str, float | None],
        compact: bool = False,
        budget: list[str] | None = None,
    ) -> None:
        """``compact`` (a small terminal): goodput and the TTFT line only, no lane table.
        ``budget``: the SLO's error budget and burn rates (gpuwatch/alerts/node.py)."""
        if breakdown is None and users is None and not budget:
            self.display = False
            return
        self.display = True
        width = usable_width(self)
        lines: list[str] = []
        if users is not None:
            lines.append(goodput_line(users, slo.get("goodput_min")))
        if budget and not compact:
            segments = [f"[b]error budget[/] {escape(budget[0])}", *map(escape, budget[1:])]
            lines.extend(flow(segments, width, ""))
        if breakdown is not None:
            segments = breakdown_segments(breakdown, slo.get("ttft_p99_s"))
            lines.extend(flow(segments[:2] if compact else segments, width, ""))
        if users is not None and users.tails and not compact:
            note = tails_note(users.tails)
            # Above the columns, not after them: the header fills a 160-column dashboard's
            # panel, and a note wrapped under it read as a row (the same at every width, so
            # a replay draws what the live screen drew).
            lines.extend([f"[dim]tails {note}, {users.window}[/]", TAIL_HEADER])
            mixed = "~" in note
            lines.extend(tail_row(lane, t, mixed) for lane, t in users.tails.items())
        self.show("\n".join(lines))
