"""The GPU panel: per GPU a VRAM bar (the serving processes' share apart), utilization,
power / limit and temperature. One line per GPU when there are more than 4 or little room."""

from __future__ import annotations

from gpuwatch.fmt import NA, gib, pct, unit
from gpuwatch.model import GpuReading, GpuSample
from gpuwatch.tui.markup import escape
from gpuwatch.tui.widgets.bars import gauge, level_color, stacked
from gpuwatch.tui.widgets.panel import Panel, flow


def _vram(g: GpuSample, width: int) -> str:
    total = g.memory_total_bytes
    if not total or g.memory_used_bytes is None:
        return f"[$panel-lighten-2]{'·' * width}[/]"
    proc = sum(p.used_memory_bytes or 0 for p in g.processes)
    proc = min(proc, g.memory_used_bytes)
    other = g.memory_used_bytes - proc
    return stacked([(proc / total, "$kv"), (other / total, "$warn")], width)


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
        [
            f"[b]{g.index}[/] {name(16)} VRAM {_vram(g, bar)} {mem:>11}",
            f"[$kv]serving {gib(proc)}[/]",
        ],
        width,
        indent="",
    )
    return "\n".join([*head, *flow(segments, width)])


class GpuPanel(Panel):
    DEFAULT_CSS = "GpuPanel { height: auto; }"

    def render_gpus(self, reading: GpuReading | None, compact: bool) -> None:
        if reading is None:
            self.show("[dim]GPUs: reading…[/]")
            return
        if reading.error:
            self.show(f"GPUs: [$warn]{escape(reading.error)}[/]")
            return
        if not reading.gpus:
            self.show("GPUs: [dim]none found[/]")
            return
        compact = compact or len(reading.gpus) > 4
        width = self.content_region.width or 80
        bar = max(8, min(40, width - (52 if compact else 56)))
        self.show("\n".join(gpu_line(g, bar, compact, width) for g in reading.gpus))
