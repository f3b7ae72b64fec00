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
    "num_replicas": "replicas",
    "active_decode_blocks_threshold": "decode blocks",
    "active_prefill_tokens_threshold": "prefill tokens",
    "active_prefill_tokens_threshold_frac": "prefill frac",
    "max_parallel_requests": "max_parallel",
}


def knob_lines(sources: list[KnobSource], selected: KnobRef | None, compact: bool) -> list[str]:
    """One row per target of each stack, its knobs side by side (the selected one reversed);
    a stack that did not answer its last read is one ``N/A`` row saying why."""
    out: list[str] = []
    width = 14 if compact else 24
    for source in sources:
        where = escape(clip(short_url(source.url), width))
        if source.error is not None:
            reason = escape(clip(source.error, 40 if compact else 80))
            out.append(f" {source.stack} {where} [$bad]N/A[/] [dim]{reason}[/]")
            continue
        if not source.read and not source.guessed:  # a guess shows only what it finds
            out.append(f" {source.stack} {where} [dim]reading…[/]")
            continue
        targets: dict[str, list[str]] = {}
        for knob in source.knobs:
            name = SHORT_NAMES.get(knob.name, knob.name)
            cell = f"{escape(clip(name, 24))} {escape(show_value(knob.value))}"
            if KnobRef.of(source, knob) == selected:
                cell = f"[reverse]{cell}[/reverse]"
            targets.setdefault(knob.target, []).append(cell)
        for target, cells in targets.items():
            out.append(f" {source.stack} {escape(clip(target, width))}  " + "  ".join(cells))
    return out
