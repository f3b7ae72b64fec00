"""The admission panel's lines about classes and tenants in one lane, from the gate's status.

Shown only where they say something: a classes line when more than one class is busy or
refused (or tenants are shown), a tenants line when a request came with a tenant. Tenants are
what the gate calls them (a configured name, a plain id, or a hash), never a raw key; each is
``in-flight·queued``. Refusals by class are totals since the gate started.
"""

from __future__ import annotations

from typing import Any

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


def _int(data: dict[str, Any], key: str) -> int:
    value = data.get(key, 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def tenant_lines(live: dict[str, Any], selected: str | None, compact: bool = False) -> list[str]:
    """Markup lines for one lane's ``classes`` and ``tenants`` (the gate's /admin/status).

    ``compact`` (a small terminal): three tenants, on the classes line, so the lanes below
    stay on screen (at 80x24 the panel has room for four lane rows and one more line)."""
    classes = live.get("classes")
    tenants = live.get("tenants")
    classes = classes if isinstance(classes, dict) else {}
    tenants = [t for t in tenants if isinstance(t, dict)] if isinstance(tenants, list) else []
    named = [t for t in tenants if t.get("id") != ANONYMOUS]
    busy = []
    refused = []
    for name, data in classes.items():
        if not isinstance(data, dict):
            continue
        inflight, queued = _int(data, "inflight"), _int(data, "queued")
        rejected = data.get("rejected_total")
        rejected = rejected if isinstance(rejected, dict) else {}
        if inflight or queued:
            busy.append(f"{escape(str(name))} {_count(inflight, queued)}")
        shown = " ".join(
            f"{SHORT_REASON.get(str(r), str(r))} {n}"
            for r, n in sorted(rejected.items())
            if isinstance(n, int) and n
        )
        if shown:
            refused.append(f"{escape(str(name))}: {escape(shown)}")
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
            label = escape(str(t.get("tenant", "?")))[:18]
            limits = t.get("limits") if isinstance(t.get("limits"), dict) else {}
            marks = ""
            if limits.get("paused"):
                marks += " [$bad]paused[/]"
            if limits.get("max_inflight") is not None:
                marks += f" [dim]≤{limits['max_inflight']}[/]"
            text = f"{label} {_count(_int(t, 'inflight'), _int(t, 'queued'))}"
            cells.append(
                f"[reverse]{text}[/reverse]{marks}" if t.get("id") == selected else text + marks
            )
        anonymous = len(tenants) - len(named)
        more = _int(live, "tenant_count") - len(cells) - anonymous
        tail = f"  [dim]+{more}[/]" if more > 0 else ""
        tenants_line = "[dim]tenants[/] " + "  ".join(cells) + tail
        if compact and classes_line:
            out[0] = f"{classes_line}  {tenants_line}"
        else:
            out.append("   " + tenants_line)
    return out
