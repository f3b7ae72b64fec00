"""The admission panel's lines about classes and tenants in one lane, from the gate's status.

Shown only where they say something: a classes line when more than one class is busy or
refused (or tenants are shown), a tenants line when a request came with a tenant. Tenants are
what the gate calls them (a configured name, a plain id, or a hash), never a raw key; each is
``in-flight·queued``. Refusals by class are totals since the gate started.
"""

from __future__ import annotations

from gpuwatch.adminapi import LaneStatus
from gpuwatch.gate.classes import ANONYMOUS
from gpuwatch.tui.markup import escape

SHORT_REASON = {
    "queue_full": "full",
    "queue_timeout": "timeout",
    "queue_deadline": "deadline",
    "evicted": "evicted",
}


def _count(inflight: int, queued: int) -> str:
    return f"{inflight}·{queued}q" if queued else f"{inflight}"


def tenant_lines(live: LaneStatus, selected: str | None, compact: bool = False) -> list[str]:
    """Markup lines for one lane's ``classes`` and ``tenants`` (the gate's /admin/status).

    ``compact`` (a small terminal): three tenants, on the classes line, so the lanes below
    stay on screen (at 80x24 the panel has room for four lane rows and one more line)."""
    named = [t for t in live.tenants if t.id != ANONYMOUS]
    busy = []
    refused = []
    for name, data in live.classes.items():
        if data.inflight or data.queued:
            busy.append(f"{escape(name)} {_count(data.inflight, data.queued)}")
        shown = " ".join(
            f"{SHORT_REASON.get(r, r)} {n}" for r, n in sorted(data.rejected_total.items()) if n
        )
        if shown:
            refused.append(f"{escape(name)}: {escape(shown)}")
    out = []
    classes_line = ""
    if len(busy) + len(refused) > 1 or (named and (busy or refused)):
        classes_line = "   [dim]classes[/] " + ("  ".join(busy) or "[dim]idle[/]")
        out.append(classes_line)
        if refused:
            # Totals since the gate started: the refusal rates per reason are on the lane row.
            out.append("   [dim]refused[/] [$bad]" + "; ".join(refused) + "[/] [dim]total[/]")
    if named:
        cells = []
        for t in named[: 3 if compact else 5]:
            label = escape(t.tenant)[:18]
            marks = ""
            if t.limits is not None and t.limits.paused:
                marks += " [$bad]paused[/]"
            if t.limits is not None and t.limits.max_inflight is not None:
                marks += f" [dim]≤{t.limits.max_inflight}[/]"
            text = f"{label} {_count(t.inflight, t.queued)}"
            cells.append(f"[reverse]{text}[/reverse]{marks}" if t.id == selected else text + marks)
        anonymous = len(live.tenants) - len(named)
        more = live.tenant_count - len(cells) - anonymous
        tail = f"  [dim]+{more}[/]" if more > 0 else ""
        tenants_line = "[dim]tenants[/] " + "  ".join(cells) + tail
        if compact and classes_line:
            out[0] = f"{classes_line}  {tenants_line}"
        else:
            out.append("   " + tenants_line)
    return out
