"""What Textual itself charges for the dashboard's kind of screen: the floor under bench/tui.py.

A bare Textual app at 160x48 (no polling, no monitor) built from the dashboard's own widgets: a
``Panel`` whose first N lines change every second (an engine line with its numbers moving), and
K ``Chart``s of ~20 rows fed new points every second and drawn every 3 s, scrolling as the
dashboard's do. Each configuration runs in its own tmux pane; its whole-process CPU over a steady
window is printed, and from them what one changed line and one chart cost per second.

Run: python bench/tui_floor.py [--seconds 30] [--repeat 2]   (needs tmux)
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from baseline import REPO

CONFIGS = [(0, 0), (1, 0), (8, 0), (16, 0), (0, 1), (0, 4)]  # (changed lines, charts)


def run_app(lines: int, charts: int) -> None:
    from textual.app import App, ComposeResult
    from textual.containers import Grid, Vertical

    from gpuwatch.series import Point
    from gpuwatch.tui.widgets.chart import Chart, Line
    from gpuwatch.tui.widgets.panel import Panel

    class Floor(App[None]):
        CSS = """
        #left { width: 80; } #panel { height: auto; border: round $panel-lighten-2; padding: 0 1; }
        Grid { grid-size: 2 2; } Chart { border: round $panel-lighten-2; }
        """

        def compose(self) -> ComposeResult:
            with Vertical(id="left"):
                yield Panel(id="panel")
            with Grid():
                for i in range(charts):
                    yield Chart(f"chart {i}", id=f"c{i}")

        def on_mount(self) -> None:
            self.n = 0
            self.points: list[Point] = []
            self.set_interval(1.0, self.tick)

        def tick(self) -> None:
            self.n += 1
            now = time.monotonic()
            self.points.append(Point(now, (self.n * 7919) % 97))
            self.points = self.points[-120:]
            rows = [
                f"  run [b]{self.n % 50}[/]  wait [$warning][b]{i}[/][/]  tok/s [dim]10s[/] "
                f"prompt {self.n * 13 % 2000} gen [b]{self.n * 7 % 400}[/]  TTFT p99 "
                f"[$success]{self.n % 900}ms[/]"
                for i in range(lines)
            ]
            still = ["  [dim]a line that does not change[/]"] * (16 - lines)
            self.query_one(Panel).show("\n".join(rows + still))
            if self.n % 3 == 0:
                for chart in self.query(Chart):
                    chart.set_data([Line("v", list(self.points), "success")], now - 60, now)

    Floor().run()


def _read(path: Path) -> str:
    return path.read_text().strip() if path.exists() else ""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--role", default="bench")
    parser.add_argument("--lines", type=int, default=0)
    parser.add_argument("--charts", type=int, default=0)
    args = parser.parse_args()
    if args.role == "app":
        run_app(args.lines, args.charts)
        return
    if not shutil.which("tmux"):
        raise SystemExit("bench/tui_floor.py needs tmux")
    tmp = Path(tempfile.mkdtemp())
    cpu: dict[tuple[int, int], list[float]] = {c: [] for c in CONFIGS}
    try:
        for _ in range(args.repeat):
            for lines, charts in CONFIGS:
                session = f"gwfloor{os.getpid()}"
                pid_file = tmp / "pid"
                pid_file.unlink(missing_ok=True)  # the last configuration's
                cmd = (f"echo $$ > {pid_file}; PYTHONPATH={REPO} exec {sys.executable} {__file__} "
                       f"--role app --lines {lines} --charts {charts}")  # fmt: skip
                subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "48", cmd], check=True)  # fmt: skip
                try:
                    end = time.monotonic() + 30
                    while not _read(pid_file) and time.monotonic() < end:
                        time.sleep(0.05)  # tmux is starting the app
                    proc = psutil.Process(int(pid_file.read_text()))
                    time.sleep(6)  # warm-up: the first frames drawn, the steady state begun
                    before, t0 = proc.cpu_times(), time.monotonic()
                    time.sleep(args.seconds)
                    after = proc.cpu_times()
                    used = (after.user + after.system) - (before.user + before.system)
                    cpu[(lines, charts)].append(used / (time.monotonic() - t0) * 1000)
                finally:
                    subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
                    time.sleep(0.5)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    med = {c: statistics.median(v) for c, v in cpu.items()}
    print(
        f"bare Textual app at 160x48, whole-process CPU over {args.seconds:.0f} s, median of {args.repeat}:"
    )
    print(f"{'changed lines/s':>16}{'charts (3 s)':>14}{'ms of CPU per s':>18}   runs")
    for (lines, charts), value in med.items():
        runs = " ".join(f"{v:.2f}" for v in cpu[(lines, charts)])
        print(f"{lines:>16}{charts:>14}{value:>18.2f}   {runs}")
    idle = med[(0, 0)]
    per_line = (med[(16, 0)] - idle) / 16
    per_chart = (med[(0, 4)] - idle) / 4
    print(f"idle {idle:.2f} ms/s; one changed line ~{per_line:.3f} ms/s; "
          f"one chart drawn every 3 s ~{per_chart:.3f} ms/s")  # fmt: skip


if __name__ == "__main__":
    main()
