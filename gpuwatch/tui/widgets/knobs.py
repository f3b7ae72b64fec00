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
    # (name, its cells: markup and length); a stack's own row (N/A, reading) is a line of
    # markup, not in the column.
    rows: list[tuple[str, list[tuple[str, int]]] | str] = []
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
        targets: dict[str, list[tuple[str, int]]] = {}
        for knob in source.knobs:
            shown = f"{clip(SHORT_NAMES.get(knob.name, knob.name), 24)} {show_value(knob.value)}"
            cell = escape(shown)
            if KnobRef.of(source, knob) == selected:
                cell = f"[reverse]{cell}[/reverse]"
            targets.setdefault(knob.target, []).append((cell, len(shown)))
        for target, cells in targets.items():
            rows.append((f"{source.stack} {clip(target, room)}", cells))
    column = max((len(row[0]) for row in rows if isinstance(row, tuple)), default=0)
    return [
        line
        for row in rows
        for line in (_wrapped(*row, column, width) if isinstance(row, tuple) else [row])
    ]


def _wrapped(name: str, cells: list[tuple[str, int]], column: int, width: int) -> list[str]:
    indent = 1 + column + 2
    lines: list[str] = []
    line, used = f" {escape(name.ljust(column))}  ", indent
    for n, (cell, length) in enumerate(cells):
        if n and width and used + 2 + length > width:
            lines.append(line)
            line, used = " " * indent, indent
        elif n:
            line, used = line + "  ", used + 2
        line, used = line + cell, used + length
    return [*lines, line]
