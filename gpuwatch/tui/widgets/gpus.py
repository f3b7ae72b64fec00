"""The GPU panel: per GPU a VRAM bar (the serving processes' share apart), utilization,
power / limit and temperature. One line per GPU when there are more than 4 or little room."""

from __future__ import annotations

from typing import Any

from gpuwatch.fmt import NA, gib, pct, unit
from gpuwatch.model import GpuReading, GpuSample
from gpuwatch.tui.markup import escape
from gpuwatch.tui.widgets.bars import gauge, level_color, stacked
from gpuwatch.tui.widgets.panel import Panel, flow, wrapped

# One colour per container in the split of the serving share; $warn stays the rest of VRAM.
_SHARE_COLORS = ("$kv", "$ttft", "$queue", "$primary", "$secondary", "$accent")
_LABEL = 20


def shares(g: GpuSample) -> list[tuple[str, int]]:
    """The VRAM the GPU's processes hold, by container (its label), the largest first; those
    in no container together, those not visible from here as "not visible"."""
    held: dict[str, int] = {}
    for p in g.processes:
        if p.used_memory_bytes:
            key = (
                p.container.label if p.container else "no container" if p.visible else "not visible"
            )
            held[key] = held.get(key, 0) + p.used_memory_bytes
    return sorted(held.items(), key=lambda kv: -kv[1])


def _split(g: GpuSample) -> list[tuple[str, int]] | None:
    """The serving share by container, when more than one holds memory and one is a container."""
    split = shares(g)
    if len(split) > 1 and any(p.container for p in g.processes if p.used_memory_bytes):
        return split
    return None


def _vram(g: GpuSample, width: int) -> str:
    total = g.memory_total_bytes
    if not total or g.memory_used_bytes is None:
        return f"[$panel-lighten-2]{'·' * width}[/]"
    proc = sum(p.used_memory_bytes or 0 for p in g.processes)
    held = min(proc, g.memory_used_bytes)
    other = g.memory_used_bytes - held
    split = _split(g)
    if split is None:
        return stacked([(held / total, "$kv"), (other / total, "$warn")], width)
    scale = held / proc  # NVML's per-process figures may add up to more than "used"
    parts = [
        (b * scale / total, _SHARE_COLORS[i % len(_SHARE_COLORS)]) for i, (_, b) in enumerate(split)
    ]
    return stacked([*parts, (other / total, "$warn")], width)


def _serving(g: GpuSample, proc: int) -> list[str]:
    split = _split(g)
    if split is None:
        return [f"[$kv]serving {gib(proc)}[/]"]
    return [f"serving {gib(proc)}:"] + [
        f"[{_SHARE_COLORS[i % len(_SHARE_COLORS)]}]{escape(label[:_LABEL])} {gib(b)}[/]"
        for i, (label, b) in enumerate(split)
    ]


def _mig(g: GpuSample) -> list[str]:
    return [
        f"MIG {escape((m.profile or NA)[:_LABEL])} {gib(m.memory_used_bytes)}/"
        f"{gib(m.memory_total_bytes)}"
        + (f" {pct(m.utilization_gpu)}" if m.utilization_gpu is not None else "")
        for m in g.mig
    ]


def gpu_line(g: GpuSample, bar: int, compact: bool, width: int = 80) -> str:
    raw = (g.name or NA).replace("NVIDIA ", "").replace("GeForce ", "")

    def name(n: int) -> str:
        # Cut the name, then escape it: a cut through an escape would leave half of one.
        return escape(raw[:n]) + " " * max(0, n - len(raw))

    if g.error:
        return f"[b]{g.index}[/] {name(18)} [$bad]{escape(g.error)}[/]"
    used = g.memory_used_bytes
    total = g.memory_total_bytes
    proc = sum(p.used_memory_bytes or 0 for p in g.processes)
    util_color = level_color(g.utilization_gpu, 0.9, 2.0)
    temp_color = level_color(
        (g.temperature_c or 0) / 90 if g.temperature_c is not None else None, 0.85, 0.95
    )
    mem = f"{gib(used)}/{gib(total)}"
    power = f"{unit(g.power_w, 'W')}/{unit(g.power_limit_w, 'W')}"
    if compact:
        return (
            f"[b]{g.index}[/] {name(12)} {_vram(g, bar)} {mem:>11} "
            f"[{util_color}]{pct(g.utilization_gpu):>4}[/] {power:>9} "
            f"[{temp_color}]{unit(g.temperature_c, '°C'):>5}[/]"
        )
    throttle = [r for r in (g.throttle_reasons or []) if r != "idle"]
    segments = [
        f"util {gauge(g.utilization_gpu, 12, util_color)} {pct(g.utilization_gpu):>4}",
        f"power {power}",
        f"temp [{temp_color}]{unit(g.temperature_c, '°C')}[/]",
        f"SM {unit(g.clock_sm_mhz, ' MHz')}",
    ]
    if throttle:
        segments.append(f"[$warn]throttle {','.join(throttle)}[/]")
    head = flow(
        [f"[b]{g.index}[/] {name(16)} VRAM {_vram(g, bar)} {mem:>11}", *_serving(g, proc)],
        width,
        indent="",
    )
    return "\n".join([*head, *flow(segments, width), *flow(_mig(g), width)])


def summary_line(gpus: list[GpuSample]) -> str:
    """All the GPUs on one line, for a column short of room (column.py): how many, VRAM in use
    of all, the busiest's utilization, power of all, the hottest's temperature."""

    def total(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return sum(known) if known else None

    def most(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return max(known) if known else None

    used = total([g.memory_used_bytes for g in gpus])
    size = total([g.memory_total_bytes for g in gpus])
    util = most([g.utilization_gpu for g in gpus])
    temp = most([g.temperature_c for g in gpus])
    failed = sum(1 for g in gpus if g.error)
    power = f"{unit(total([g.power_w for g in gpus]), 'W')}/"
    power += unit(total([g.power_limit_w for g in gpus]), "W")
    return (
        f"[b]{len(gpus)} GPUs[/] VRAM {gib(used)}/{gib(size)}"
        f"  util max [{level_color(util, 0.9, 2.0)}]{pct(util)}[/]  power {power}"
        f"  temp max {unit(temp, '°C')}" + (f"  [$bad]{failed} failing[/]" if failed else "")
    )


class GpuPanel(Panel):
    DEFAULT_CSS = "GpuPanel { height: auto; }"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._shown_for: tuple[GpuReading | None, bool] | None = None  # render_gpus' arguments

    def redraw(self) -> None:
        if self._shown_for is not None:
            self.render_gpus(*self._shown_for)

    def takes(self, lines: int | None) -> int:
        reading = self._shown_for[0] if self._shown_for else None
        if self._shown_for is None or reading is None or reading.error or not reading.gpus:
            return len(self._rows)
        return self._screen_lines(self._fit(reading, self._shown_for[1], lines))

    def render_gpus(self, reading: GpuReading | None, compact: bool) -> None:
        self._shown_for = (reading, compact)
        if reading is None:
            self.show("[dim]GPUs: reading…[/]")
            return
        if reading.error:
            self.show(f"GPUs: [$warn]{escape(reading.error)}[/]")
            return
        if not reading.gpus:
            self.show("GPUs: [dim]none found[/]")
            return
        if self.room is not None:
            self.wants(self.takes(None))
        self.show(self._fit(reading, compact, self.room))

    def _fit(self, reading: GpuReading, compact: bool, room: int | None) -> str:
        """As asked if it fits ``room`` lines, else a line a GPU, else one line for all."""
        text = self._text(reading, compact)
        if room is not None and self._screen_lines(text) > room:
            text = self._text(reading, True)
            if self._screen_lines(text) > room:
                text = summary_line(reading.gpus)
        return text

    def _screen_lines(self, text: str) -> int:
        return wrapped(text.split("\n"), self.content_region.width or 80)

    def _text(self, reading: GpuReading, compact: bool) -> str:
        compact = compact or len(reading.gpus) > 4
        width = self.content_region.width or 80
        bar = max(8, min(40, width - (52 if compact else 56)))
        return "\n".join(gpu_line(g, bar, compact, width) for g in reading.gpus)
