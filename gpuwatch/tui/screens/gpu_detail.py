"""``g``: every GPU in detail, each MIG device of one in MIG mode a row of its own, with its
compute processes (pid, container or pod, GPU memory, user, name, CPU %, RSS, command), as
nvitop shows them."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from gpuwatch.fmt import NA, clip, gib, pct, unit
from gpuwatch.model import GpuReading, MigInstance, ProcessInfo


class GpuScreen(Screen[None]):
    BINDINGS = [Binding("escape,g,q", "app.pop_screen", "back")]
    DEFAULT_CSS = """
    GpuScreen #gpus { height: auto; max-height: 50%; }
    GpuScreen #procs { height: 1fr; }
    GpuScreen #title { height: 1; background: $panel; }
    """

    def __init__(self, reading: GpuReading | None) -> None:
        super().__init__()
        self.reading = reading

    def compose(self) -> ComposeResult:
        yield Static("[b]GPUs and their processes[/]  [dim](esc to go back)[/]", id="title")
        yield DataTable(id="gpus", zebra_stripes=True, cursor_type="row")
        yield DataTable(id="procs", zebra_stripes=True, cursor_type="row")
        yield Footer()

    def on_mount(self) -> None:
        gpus = self.query_one("#gpus", DataTable)
        gpus.add_columns(
            "GPU",
            "name",
            "memory used/total",
            "reserved",
            "util",
            "mem util",
            "temp",
            "power/limit",
            "SM",
            "mem clk",
            "fan",
            "throttle",
            "UUID",
        )
        procs = self.query_one("#procs", DataTable)
        procs.add_columns(
            "GPU", "PID", "container", "GPU mem", "user", "name", "CPU %", "RSS", "threads",
            "command",
        )  # fmt: skip
        self.show(self.reading)

    def show(self, reading: GpuReading | None) -> None:
        gpus = self.query_one("#gpus", DataTable)
        procs = self.query_one("#procs", DataTable)
        gpus.clear()
        procs.clear()
        if reading is None or reading.error:
            error = clip(reading.error or "") if reading else "reading…"
            gpus.add_row("-", Text(error), *[""] * 11)
            return
        for g in reading.gpus:
            if g.error:
                gpus.add_row(
                    str(g.index), _cell(g.name), Text(clip(g.error), style="red"), *[""] * 10
                )
                continue
            gpus.add_row(
                str(g.index),
                _cell(g.name),
                f"{gib(g.memory_used_bytes)} / {gib(g.memory_total_bytes)}",
                gib(g.memory_reserved_bytes),
                pct(g.utilization_gpu),
                pct(g.utilization_memory),
                unit(g.temperature_c, "°C"),
                f"{unit(g.power_w, 'W')} / {unit(g.power_limit_w, 'W')}",
                unit(g.clock_sm_mhz, " MHz"),
                unit(g.clock_mem_mhz, " MHz"),
                unit(g.fan_percent, "%"),
                _cell(", ".join(g.throttle_reasons or []) or "-"),
                _cell(g.uuid),
            )
            for m in g.mig:
                gpus.add_row(*mig_row(g.index, m))
            for p in g.processes:
                procs.add_row(
                    where(g.index, p.gpu_instance_id, p.compute_instance_id),
                    str(p.pid),
                    container_cell(p),
                    gib(p.used_memory_bytes),
                    _cell(p.user),
                    _cell(p.name) if p.visible else Text(hidden(p.pid), style="dim"),
                    unit(p.cpu_percent, "%"),
                    gib(p.rss_bytes),
                    str(p.threads or NA),
                    _cell(p.cmdline, 200),
                )


def where(index: int, gi: int | None, ci: int | None) -> str:
    """A GPU, or a MIG device of it by GPU instance / compute instance ID ("0 MIG 2/0")."""
    return str(index) if gi is None else f"{index} MIG {gi}/{ci if ci is not None else NA}"


def hidden(pid: int) -> str:
    return f"pid {pid} (not visible from here)"


def container_cell(p: ProcessInfo) -> Text:
    """The container's (or pod's) label; "-" for a process in none, n/a when not visible."""
    if p.container is not None:
        return _cell(p.container.label)
    return Text("-" if p.visible else NA)


def mig_row(index: int, m: MigInstance) -> list[str | Text]:
    """A MIG device as a row of the GPU table: its memory, and utilization where NVML has it."""
    row: list[str | Text] = [
        where(index, m.gpu_instance_id, m.compute_instance_id),
        _cell(f"MIG {m.profile or NA}"),
    ]
    if m.error:
        return [*row, Text(clip(m.error), style="red"), *[""] * 9, _cell(m.uuid)]
    used = f"{gib(m.memory_used_bytes)} / {gib(m.memory_total_bytes)}"
    return [*row, used, "", pct(m.utilization_gpu), *[""] * 7, _cell(m.uuid)]


def _cell(text: str | None, limit: int = 60) -> Text:
    """A name from the GPU source or the process table (a process names itself) as a plain
    cell: a DataTable reads a str cell as markup, and an escape sequence would reach the
    terminal."""
    return Text(clip(text or NA, limit))
