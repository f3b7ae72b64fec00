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


def knob_lines(sources: list[KnobSource], selected: KnobRef | None, compact: bool) -> list[str]:
    """One row per target of each stack, its knobs side by side (the selected one reversed);
    a stack that did not answer its last read is one ``N/A`` row saying why. The rows' names
    (stack and target) make one column."""
    rows: list[tuple[str, str, bool]] = []  # (name, the rest as markup, in the column)
    width = 14 if compact else 24
    for source in sources:
        where = clip(short_url(source.url), width)
        if source.error is not None:
            reason = escape(clip(source.error, 28 if compact else 48))
            rows.append((f"{source.stack} {where}", f"[$bad]N/A[/] [dim]{reason}[/]", False))
            continue
        if not source.read and not source.guessed:  # a guess shows only what it finds
            rows.append((f"{source.stack} {where}", "[dim]reading…[/]", False))
            continue
        targets: dict[str, list[str]] = {}
        for knob in source.knobs:
            name = SHORT_NAMES.get(knob.name, knob.name)
            cell = f"{escape(clip(name, 24))} {escape(show_value(knob.value))}"
            if KnobRef.of(source, knob) == selected:
                cell = f"[reverse]{cell}[/reverse]"
            targets.setdefault(knob.target, []).append(cell)
        for target, cells in targets.items():
            rows.append((f"{source.stack} {clip(target, width)}", "  ".join(cells), True))
    # A stack's own row (N/A, reading) does not widen the column of the knobs' names.
    column = max((len(name) for name, _, aligned in rows if aligned), default=0)
    return [
        f" {escape(name.ljust(column) if aligned else name)}  {rest}"
        for name, rest, aligned in rows
    ]
