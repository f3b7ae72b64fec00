"""The admission panel's lines about classes and tenants in one lane, from the gate's status.

Shown only where they say something: a classes line when more than one class is busy or
refused (or tenants are shown), a tenants line when a request came with a tenant. Tenants are
what the gate calls them (a configured name, a plain id, or a hash), never a raw key; each is
``in-flight·queued``. Refusals by class are totals since the gate started.

Each line keeps to the panel's width: a line Textual wraps starts its rest at the panel's
edge, out of the lanes' column, and pushes the lanes below off a small screen. What does not
fit is counted (``+2``); the refusals, where there is room for more lines, go on under their
first class.
"""

from __future__ import annotations

from gpuwatch.adminapi import LaneStatus, TenantStatus
from gpuwatch.fmt import clip
from gpuwatch.gate.classes import ANONYMOUS
from gpuwatch.tui.markup import escape

SHORT_REASON = {
    "queue_full": "full",
    "queue_timeout": "timeout",
    "queue_deadline": "deadline",
    "evicted": "evicted",
}
# Names as a cell has room for them (a class's comes from the gate's config, a tenant's from
# its requests).
CLASS_NAME = 16
TENANT_NAME = 18
INDENT = "   "
# The refusals' label says their window first, so it is never what a narrow panel cuts.
REFUSED = "refused total "

# A piece of a line: its markup, and how many columns it shows.
Cell = tuple[str, int]


def _count(inflight: int, queued: int) -> str:
    return f"{inflight}·{queued}q" if queued else f"{inflight}"


def _plain(text: str) -> Cell:
    return escape(text), len(text)


def _more(n: int, after: bool) -> Cell:
    """``+N`` (after other cells: two spaces before it), or nothing when N is 0."""
    gap = "  " if after else ""
    return (f"{gap}[dim]+{n}[/]", len(f"{gap}+{n}")) if n else ("", 0)


def _joined(cells: list[Cell], sep: str = "  ") -> Cell:
    """The cells side by side, ``sep`` between them."""
    gaps = len(sep) * max(0, len(cells) - 1)
    return sep.join(c for c, _ in cells), sum(n for _, n in cells) + gaps


def _shown(cells: list[Cell], keep: int, more: int, sep: str) -> Cell:
    """The first ``keep`` cells, then ``+N`` counting the rest and ``more``."""
    text, length = _joined(cells[:keep], sep)
    tail, extra = _more(more + len(cells) - keep, keep > 0)
    return text + tail, length + extra


def _keep(cells: list[Cell], room: int, more: int, sep: str) -> int:
    """How many of ``cells`` fit in ``room`` columns (0: no limit) with their ``+N``."""
    return next(
        keep
        for keep in range(len(cells), -1, -1)
        if not room or keep == 0 or _shown(cells, keep, more, sep)[1] <= room
    )


def _fitted(cells: list[Cell], room: int, more: int = 0, sep: str = "  ") -> Cell:
    """The first of ``cells`` that fit in ``room`` columns (0: all of them), ``sep`` between
    them, then ``+N`` counting those left off and ``more`` others not among ``cells``."""
    return _shown(cells, _keep(cells, room, more, sep), more, sep)


def tenant_lines(
    live: LaneStatus, selected: str | None, compact: bool = False, width: int = 0
) -> list[str]:
    """Markup lines for one lane's ``classes`` and ``tenants`` (the gate's /admin/status),
    each within ``width`` columns (the panel's; 0: unknown, nothing cut).

    ``compact`` (a small terminal): three tenants, on the classes line, so the lanes below
    stay on screen (at 80x24 the panel has room for four lane rows and one more line), and the
    refusals on one line, the classes that do not fit there counted."""
    named = [t for t in live.tenants if t.id != ANONYMOUS]
    busy: list[Cell] = []
    refused: list[Cell] = []
    for name, data in live.classes.items():
        label = clip(name, CLASS_NAME)
        if data.inflight or data.queued:
            busy.append(_plain(f"{label} {_count(data.inflight, data.queued)}"))
        shown = " ".join(
            f"{SHORT_REASON.get(r, r)} {n}" for r, n in sorted(data.rejected_total.items()) if n
        )
        if shown:
            refused.append(_plain(f"{label}: {shown}"))
    out: list[str] = []
    head = f"{INDENT}[dim]classes[/] "
    used = len(INDENT) + len("classes ")
    classes_line: Cell | None = None
    if len(busy) + len(refused) > 1 or (named and (busy or refused)):
        text, length = _fitted(busy, _room(width, used)) if busy else ("[dim]idle[/]", 4)
        classes_line = head + text, used + length
        out.append(classes_line[0])
        if refused:
            out.extend(_refused_lines(refused, compact, width))
    if named:
        listed = named[: 3 if compact else 5]
        chosen = next((t for t in named if t.id == selected), None)
        if chosen is not None and chosen not in listed:
            listed = [*listed[:-1], chosen]  # the tenant the keys act on is always shown
        anonymous = len(live.tenants) - len(named)
        more = max(0, live.tenant_count - len(listed) - anonymous)
        merged = compact and classes_line is not None
        start = classes_line[1] + 2 if merged and classes_line else len(INDENT)
        room = _room(width, start + len("tenants "))
        cells = [_tenant_cell(t, selected) for t in listed]
        keep = _keep(cells, room, more, "  ")
        at = listed.index(chosen) if chosen in listed else -1
        while at >= keep > 0:  # cut for room: it takes the last place shown instead
            cells.insert(keep - 1, cells.pop(at))
            at, keep = keep - 1, _keep(cells, room, more, "  ")
        tenants_line = f"[dim]tenants[/] {_shown(cells, keep, more, '  ')[0]}"
        if merged and classes_line is not None:
            out[0] = f"{classes_line[0]}  {tenants_line}"
        else:
            out.append(INDENT + tenants_line)
    return out


def _room(width: int, used: int) -> int:
    """Columns left of ``width`` after ``used`` (0 where the width is unknown: no limit)."""
    return max(1, width - used) if width else 0


def _tenant_cell(tenant: TenantStatus, selected: str | None) -> Cell:
    label = clip(tenant.tenant, TENANT_NAME)
    text = f"{label} {_count(tenant.inflight, tenant.queued)}"
    cell = f"[reverse]{escape(text)}[/reverse]" if tenant.id == selected else escape(text)
    length = len(text)
    limits = tenant.limits
    if limits is not None and limits.paused:
        cell, length = cell + " [$bad]paused[/]", length + len(" paused")
    if limits is not None and limits.max_inflight is not None:
        cap = f" ≤{limits.max_inflight}"
        cell, length = cell + f" [dim]{cap.strip()}[/]", length + len(cap)
    return cell, length


def _refused_lines(refused: list[Cell], compact: bool, width: int) -> list[str]:
    """``refused total`` and each class's refusals since the gate started: on one line where
    they fit; else, with room for more lines, the rest on lines of their own under the first
    class, and on a small screen (``compact``) those that fit, the rest counted."""
    head = f"{INDENT}[dim]{REFUSED}[/]"
    indent = len(INDENT) + len(REFUSED)
    room = _room(width, indent)
    if compact or not room:
        return [f"{head}[$bad]{_fitted(refused, room, sep='; ')[0]}[/]"]
    lines: list[list[Cell]] = [[]]
    for cell in refused:
        if lines[-1] and _joined([*lines[-1], cell], "; ")[1] > room:
            lines.append([])
        lines[-1].append(cell)
    return [
        (head if n == 0 else " " * indent) + f"[$bad]{_joined(line, '; ')[0]}[/]"
        for n, line in enumerate(lines)
    ]
