"""The admission panel's knob rows: each stack's own admission knobs, one row per target,
beside the gate's lanes (``dynamo llama-8b  decode blocks 0.85  prefill tokens 8192``)."""

from __future__ import annotations

from gpuwatch.control.knobs.base import show_value
from gpuwatch.control.knobs.steer import KnobRef, KnobSource
from gpuwatch.fmt import clip
from gpuwatch.monitor.state import short_url
from gpuwatch.tui.markup import escape

# The stacks' long names, as a row has room for them.
SHORT_NAMES = {
    "max_ongoing_requests": "max_ongoing",
    "max_queued_requests": "max_queued",
    "num_replicas": "replicas",
    "active_decode_blocks_threshold": "decode blocks",
    "active_prefill_tokens_threshold": "prefill tokens",
    "active_prefill_tokens_threshold_frac": "prefill frac",
    "max_parallel_requests": "max_parallel",
}


def knob_lines(
    sources: list[KnobSource], selected: KnobRef | None, compact: bool, width: int = 0
) -> list[str]:
    """One row per target of each stack, its knobs side by side (the selected one reversed),
    going on under them where ``width`` (the panel's, 0: unknown) ends; a stack that did not
    answer its last read is one ``N/A`` row saying why. The rows' names make one column."""
    return knob_block(sources, selected, compact, width)[0]


def knob_block(
    sources: list[KnobSource], selected: KnobRef | None, compact: bool, width: int = 0
) -> tuple[list[str], int | None]:
    """``knob_lines``, and which of them holds the selected knob (None: none does), the line
    the dashboard keeps in view."""
    # (name, its cells: markup, length, selected); a stack's own row (N/A, reading) is a line
    # of markup, not in the column.
    rows: list[tuple[str, list[Cell]] | str] = []
    room = 14 if compact else 24
    for source in sources:
        where = escape(clip(short_url(source.url), room))
        if source.error is not None:
            reason = escape(clip(source.error, 28 if compact else 48))
            rows.append(f" {source.stack} {where}  [$bad]N/A[/] [dim]{reason}[/]")
            continue
        if not source.read and not source.guessed:  # a guess shows only what it finds
            rows.append(f" {source.stack} {where}  [dim]reading…[/]")
            continue
        targets: dict[str, list[Cell]] = {}
        for knob in source.knobs:
            shown = f"{clip(SHORT_NAMES.get(knob.name, knob.name), 24)} {show_value(knob.value)}"
            cell = escape(shown)
            chosen = KnobRef.of(source, knob) == selected
            if chosen:
                cell = f"[reverse]{cell}[/reverse]"
            targets.setdefault(knob.target, []).append((cell, len(shown), chosen))
        for target, cells in targets.items():
            rows.append((f"{source.stack} {clip(target, room)}", cells))
    column = max((len(row[0]) for row in rows if isinstance(row, tuple)), default=0)
    lines: list[str] = []
    at: int | None = None
    for row in rows:
        if isinstance(row, str):
            lines.append(row)
            continue
        wrapped, held = _wrapped(*row, column, width)
        if held is not None:
            at = len(lines) + held
        lines += wrapped
    return lines, at


# A knob's cell: its markup, how many columns it shows, and whether it is the selected knob.
Cell = tuple[str, int, bool]


def _wrapped(name: str, cells: list[Cell], column: int, width: int) -> tuple[list[str], int | None]:
    """The row's lines, and which of them holds the selected knob (None: none)."""
    indent = 1 + column + 2
    lines: list[str] = []
    at: int | None = None
    line, used = f" {escape(name.ljust(column))}  ", indent
    for n, (cell, length, chosen) in enumerate(cells):
        if n and width and used + 2 + length > width:
            lines.append(line)
            line, used = " " * indent, indent
        elif n:
            line, used = line + "  ", used + 2
        line, used = line + cell, used + length
        if chosen:
            at = len(lines)
    return [*lines, line], at
