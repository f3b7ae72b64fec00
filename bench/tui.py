"""The dashboard's own cost: whole-process CPU over 60 s at 1 s refresh, 160x48, 8 (fake) GPUs,
one live endpoint (the simulator), one hour of history already loaded; and the time from
starting the process to the first full frame.

Run: python bench/tui.py [--seconds 60]   (needs tmux)   Goals: <= 2% of one core; <= 1 s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

GIB = 2**30


def eight_gpus() -> dict:
    gpu = {"name": "NVIDIA H100 80GB HBM3", "memory_total": 80 * GIB, "memory_used": 76 * GIB,
           "utilization_gpu": 97, "utilization_memory": 60, "temperature_c": 67, "power_w": 640,
           "power_limit_w": 700, "clock_sm_mhz": 1980, "clock_mem_mhz": 2619,
           "unsupported": ["nvmlDeviceGetFanSpeed"],
           "processes": [{"pid": os.getpid(), "used_memory": 75 * GIB}]}  # fmt: skip
    return {"gpus": [{**gpu, "uuid": f"GPU-{i:04d}"} for i in range(8)]}


def fill(history, now: float) -> None:  # type: ignore[no-untyped-def]
    for name, ring in history.series.items():
        if len(ring) >= 3600:
            continue
        for i in range(3600):
            ring.append(now - 3600 + i, (i % 97) * (0.01 if name == "kv_cache_usage" else 1.0))


def run_dashboard(url: str, first_frame_file: str) -> None:
    from gpuwatch.sources.nvml import FakeNvml, NvmlReader
    from gpuwatch.tui.app import DashboardOptions, GpuwatchApp

    options = DashboardOptions(urls=[url], interval_s=1.0, nvml=NvmlReader(FakeNvml(eight_gpus())))
    app = GpuwatchApp(options)
    original = app.monitor.apply_scrape

    def apply_and_preload(result) -> None:  # type: ignore[no-untyped-def]
        original(result)
        for ep in app.monitor.endpoints.values():
            for view in ep.engines.values():
                fill(view.history, app.monitor.clock())

    app.monitor.apply_scrape = apply_and_preload  # type: ignore[method-assign]

    def first_frame() -> None:
        Path(first_frame_file).write_text(json.dumps({"first_frame": time.time()}))

    original_first = app._first_frame

    def patched_first() -> None:
        original_first()
        first_frame()

    app._first_frame = patched_first  # type: ignore[method-assign]
    app.run()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--role", default="bench")
    parser.add_argument("--url")
    parser.add_argument("--first-frame-file")
    args = parser.parse_args()
    if args.role == "dashboard":
        run_dashboard(args.url, args.first_frame_file)
        return
    if not shutil.which("tmux"):
        raise SystemExit("bench/tui.py needs tmux")
    sim = subprocess.Popen([sys.executable, "-m", "gpuwatch", "sim", "--listen", "127.0.0.1:0", "--time-scale", "1"],
                           stdout=subprocess.PIPE, text=True)  # fmt: skip
    url = sim.stdout.readline().split(" on ")[1].split()[0] + "/metrics"
    load = subprocess.Popen([sys.executable, "-m", "gpuwatch", "load", "--url", url.removesuffix("/metrics"),
                             "--duration", str(args.seconds + 30), "--rate", "2", "--quiet",
                             "--prompt-tokens", "256:1024", "--output-tokens", "128"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    session = f"gwbench{os.getpid()}"
    tmp = Path(tempfile.mkdtemp())
    frame_file, pid_file = tmp / "frame.json", tmp / "pid"
    started = time.time()
    cmd = (f"echo $$ > {pid_file}; exec {sys.executable} {__file__} --role dashboard --url {url} "
           f"--first-frame-file {frame_file}")  # fmt: skip
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "48", cmd], check=True
    )
    try:
        end = time.time() + 20
        while not frame_file.exists():
            if time.time() > end:
                raise SystemExit("the dashboard never drew a frame")
            time.sleep(0.02)
        first_frame = json.loads(frame_file.read_text())["first_frame"] - started
        proc = psutil.Process(int(pid_file.read_text()))
        time.sleep(5)  # history loaded, first scrapes done
        before = proc.cpu_times()
        t0 = time.monotonic()
        time.sleep(args.seconds)
        after = proc.cpu_times()
        elapsed = time.monotonic() - t0
        screen = subprocess.run(
            ["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True
        ).stdout
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        load.terminate()
        sim.terminate()
        load.wait(5)
        sim.wait(5)
        shutil.rmtree(tmp, ignore_errors=True)
    cpu = (after.user + after.system) - (before.user + before.system)
    gpus = screen.count("H100")
    print(f"dashboard CPU over {elapsed:.0f} s at 160x48, {gpus} GPUs shown, 1 endpoint, 1 h history: "
          f"{cpu / elapsed * 100:.2f}% of one core (goal <= 2%)")  # fmt: skip
    print(f"start to first full frame: {first_frame:.2f} s (goal <= 1 s)")


if __name__ == "__main__":
    main()
