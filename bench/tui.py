"""The dashboard's own cost: whole-process CPU time (user + sys) over a steady window at 1 s
refresh, one hour of history already loaded; and the time from starting the process to the
first full frame. Before (the code of ``--baseline``, default main before issue 19's dashboard
work) and after (this checkout) run side by side in one run: two dashboards at once, each in
its own tmux pane, against the same simulator under the same load, so both see the same
machine; ``--repeat`` windows, the median printed.

Run: python bench/tui.py [--seconds 30] [--repeat 3] [--size 160x48] [--engines 1] [--gpus 8]
                         [--baseline REV | --baseline none] [--floor] [--profile DIR]   (needs tmux)
Goals: <= 1% of one core with one engine under light load at 160x48; <= 2% with 8 engines and
8 GPUs; first frame <= 1 s. ``--profile DIR`` records the after side with py-spy (``--idle``
off, raw collapsed stacks) instead of timing it, and prints where its samples go (with
``--floor``, of the after side with painting off: the polling floor's profile). ``--floor``
adds a third dashboard of this checkout that stops painting after its first frame: what polling,
the monitor and an idle Textual cost alone (bench/tui_floor.py prices the painting).
"""

from __future__ import annotations

import argparse
import collections
import importlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
from baseline import BEFORE, REPO, checkout

from gpuwatch.demo import DEMO_GATE_TOML

if TYPE_CHECKING:  # only for the types: a --baseline checkout may not have these modules
    from gpuwatch.model import ScrapeResult
    from gpuwatch.series import EngineHistory
    from gpuwatch.tui.screens.dashboard import Dashboard

GIB = 2**30
PROFILE_HZ = 500
PYSPY = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")


def fake_gpus(n: int) -> dict[str, object]:
    gpu = {"name": "NVIDIA H100 80GB HBM3", "memory_total": 80 * GIB, "memory_used": 76 * GIB,
           "utilization_gpu": 97, "utilization_memory": 60, "temperature_c": 67, "power_w": 640,
           "power_limit_w": 700, "clock_sm_mhz": 1980, "clock_mem_mhz": 2619,
           "unsupported": ["nvmlDeviceGetFanSpeed"],
           "processes": [{"pid": os.getpid(), "used_memory": 75 * GIB}]}  # fmt: skip
    return {"gpus": [{**gpu, "uuid": f"GPU-{i:04d}"} for i in range(n)]}


def fill(history: EngineHistory, now: float) -> None:
    for name, ring in history.series.items():
        if len(ring) >= 3600:
            continue
        for i in range(3600):
            ring.append(now - 3600 + i, (i % 97) * (0.01 if name == "kv_cache_usage" else 1.0))


def run_dashboard(url: str, first_frame_file: str, gpus: int, paint: bool = True,
                  admin: str | None = None, token: str | None = None) -> None:  # fmt: skip
    from gpuwatch.sources.nvml import FakeNvml, NvmlReader

    nvml = NvmlReader(FakeNvml(fake_gpus(gpus)))
    try:
        from gpuwatch.session.node import DashboardOptions, live_session
        from gpuwatch.tui.app import GpuwatchApp
        from gpuwatch.tui.screens.dashboard import Dashboard

        options = DashboardOptions(
            urls=[url], interval_s=1.0, nvml=nvml, admin_url=admin, admin_token=token
        )
        session = live_session(options)
        app, monitor, painter = GpuwatchApp(session), session.monitor, Dashboard
    except ImportError:
        # A --baseline from before the session layer: the app painted itself. Its names are
        # not today's, so that module is read as it was, untyped.
        then = importlib.import_module("gpuwatch.tui.app")
        app = then.GpuwatchApp(then.DashboardOptions(urls=[url], interval_s=1.0, nvml=nvml))
        monitor, painter = app.monitor, then.GpuwatchApp
    original = monitor.apply_scrape
    loaded: set[int] = set()

    def apply_and_preload(result: ScrapeResult) -> None:
        original(result)
        for ep in monitor.endpoints.values():
            for view in ep.engines.values():
                if id(view.history) not in loaded:
                    loaded.add(id(view.history))
                    fill(view.history, monitor.clock())

    monitor.apply_scrape = apply_and_preload  # type: ignore[method-assign]
    original_first = painter._first_frame

    def patched_first(self: Dashboard) -> None:
        original_first(self)
        if not paint:  # the polling floor: sources polled, monitor ticked, nothing drawn again
            self.paint = lambda force_charts=False: None  # type: ignore[method-assign]
        part = Path(first_frame_file + ".part")  # renamed whole: never read half written
        part.write_text(json.dumps({"first_frame": time.time()}))
        part.replace(first_frame_file)

    painter._first_frame = patched_first  # type: ignore[method-assign]
    app.run()


@dataclass
class Side:
    name: str
    pythonpath: Path
    flags: str = ""
    session: str = ""
    gate: str = ""  # " --admin URL --admin-token T" with --gate
    frame_file: Path = Path()
    pid_file: Path = Path()
    started: float = 0.0

    def start(self, tmp: Path, url: str, size: tuple[int, int], gpus: int, i: int) -> None:
        self.session = f"gwbench{os.getpid()}{self.name}{i}"
        self.frame_file, self.pid_file = tmp / f"{self.name}{i}.json", tmp / f"{self.name}{i}.pid"
        self.started = time.time()
        cmd = (f"echo $$ > {self.pid_file}; PYTHONPATH={self.pythonpath} exec {sys.executable} "
               f"{__file__} --role dashboard --url {url} --gpus {gpus} --first-frame-file {self.frame_file} {self.flags}{self.gate}")  # fmt: skip
        new = ["tmux", "new-session", "-d", "-s", self.session, "-x", str(size[0]), "-y", str(size[1]), cmd]  # fmt: skip
        for attempt in range(5):  # the tmux server may be exiting as the last session closes
            if subprocess.run(new, capture_output=True).returncode == 0:
                return
            time.sleep(0.2 * (attempt + 1))
        raise SystemExit(f"tmux could not start {self.session}")

    def first_frame(self) -> float:
        end = time.time() + 30
        while not self.frame_file.exists():
            if time.time() > end:
                raise SystemExit(f"{self.name}: the dashboard never drew a frame")
            time.sleep(0.02)
        return float(json.loads(self.frame_file.read_text())["first_frame"]) - self.started

    def process(self) -> psutil.Process:
        return psutil.Process(int(self.pid_file.read_text()))

    def stop(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.session], capture_output=True)


AREAS = (  # where a sample's innermost frame is, by path: the first that matches
    ("textual: compositor, layout, strips", ("textual/",)),
    ("rich: segments, styles, markup", ("rich/",)),
    ("gpuwatch.tui: widgets, app", ("gpuwatch/tui/",)),
    ("gpuwatch.monitor + series: figures, windows", ("gpuwatch/monitor/", "gpuwatch/series.py")),
    (
        "scrape: HTTP, parse, dialects",
        (
            "gpuwatch/sources/scrape",
            "gpuwatch/sources/dialects",
            "prometheus_client",
            "httpx",
            "httpcore",
            "h11",
            "anyio",
        ),
    ),
    ("NVML + host: reader, psutil", ("gpuwatch/sources/nvml", "gpuwatch/sources/host", "psutil")),
    ("asyncio, threads, selectors", ("asyncio/", "selectors.py", "threading.py", "concurrent/")),
)


def summarise(raw: Path, seconds: float, rate: int, top: int = 15) -> str:
    """py-spy's raw collapsed stacks (GIL holder only) as text: CPU ms per second by area of
    the innermost frame, then functions by inclusive and by self share of samples."""
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    areas: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        n = int(count)
        total += n
        paths = [f.rsplit(" (", 1)[-1].rstrip(")") for f in stack.split(";")[1:]]
        frames = [
            f.rsplit(" (", 1)[0] + " (" + p.split(":")[0].split("/")[-1] + ")"
            for f, p in zip(stack.split(";")[1:], paths, strict=True)
        ]  # fmt: skip  (frame 0: the thread)
        for frame in set(frames):
            inclusive[frame] += n
        if frames:
            own[frames[-1]] += n
            leaf = paths[-1]
            areas[next((a for a, keys in AREAS if any(k in leaf for k in keys)), "other")] += n
    if not total:
        return "no samples"
    per_s = 1000 / rate / seconds  # ms of CPU per second, per sample
    out = [
        f"{total} samples at {rate} Hz over {seconds:g} s = {total * per_s / 10:.2f}% of one core"
    ]
    out.append("  by area (innermost frame), ms of CPU per second:")
    out += [f"    {n * per_s:6.2f} ms  {n / total:6.1%}  {a}" for a, n in areas.most_common()]
    for title, counter in (("inclusive", inclusive), ("self", own)):
        # The event loop's own frames, under nearly every sample, say nothing.
        shown = [(f, n) for f, n in counter.most_common() if n < 0.85 * total][:top]
        out.append(f"  top {top} by {title} (frames under > 85% of samples left out):")
        out += [f"    {n / total:6.1%}  {frame}" for frame, n in shown]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--size", default="160x48")
    parser.add_argument("--engines", type=int, default=1)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--rate", type=float, help="requests/s (default 2 per engine)")
    parser.add_argument("--baseline", default=BEFORE, help="a git revision, or none")
    parser.add_argument("--profile", type=Path, help="record py-spy profiles into this folder")
    parser.add_argument(
        "--gate", action="store_true", help="a gate in front of the engine, its status polled"
    )
    parser.add_argument("--role", default="bench")
    parser.add_argument("--url")
    parser.add_argument("--admin", help=argparse.SUPPRESS)
    parser.add_argument("--admin-token", help=argparse.SUPPRESS)
    parser.add_argument("--first-frame-file")
    parser.add_argument("--no-paint", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also run this checkout with painting off after the first frame (the polling floor)",
    )
    args = parser.parse_args()
    if args.role == "dashboard":
        run_dashboard(args.url, args.first_frame_file, args.gpus, not args.no_paint, args.admin,
                      args.admin_token)  # fmt: skip
        return
    if not shutil.which("tmux"):
        raise SystemExit("bench/tui.py needs tmux")
    width, height = (int(v) for v in args.size.split("x"))
    rate = args.rate or 2.0 * args.engines
    sim = subprocess.Popen([sys.executable, "-m", "gpuwatch", "sim", "--listen", "127.0.0.1:0", "--time-scale", "1",
                            "--engines", str(args.engines)],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
    assert sim.stdout is not None  # stdout=PIPE
    url = sim.stdout.readline().split(" on ")[1].split()[0] + "/metrics"
    target, gate_flags, gate = url.removesuffix("/metrics"), "", None
    if args.gate:  # the demo's gate (its lanes, a token), in front of the simulator
        from gpuwatch.demo import DemoStack, _spawn

        gate = DemoStack(sim_url=target)
        token_dir = Path(tempfile.mkdtemp())
        (token_dir / "token").write_text("bench-token-0123456789")
        (token_dir / "gate.toml").write_text(DEMO_GATE_TOML)
        target = _spawn(gate, ["gate", "--upstream", gate.sim_url, "--listen", "127.0.0.1:0",
                               "--config", str(token_dir / "gate.toml"), "--admin-token-file",
                               str(token_dir / "token"), "--state-file",
                               str(token_dir / "state.json")], "the gate")  # fmt: skip
        gate_flags = f" --admin {target} --admin-token bench-token-0123456789"
    budget = (args.seconds + 12) * args.repeat + 30
    load = subprocess.Popen([sys.executable, "-m", "gpuwatch", "load", "--url", target,
                             "--duration", str(budget), "--rate", str(rate), "--quiet",
                             "--prompt-tokens", "256:1024", "--output-tokens", "128"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
    tmp = Path(tempfile.mkdtemp())
    cpu: dict[str, list[float]] = collections.defaultdict(list)
    frames: dict[str, list[float]] = collections.defaultdict(list)
    screens: dict[str, str] = {}
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, tmp, True)
        stack.callback(sim.wait, 5)
        stack.callback(sim.terminate)
        if gate is not None:
            stack.callback(gate.stop)
        stack.callback(load.wait, 5)
        stack.callback(load.terminate)
        sides = [Side("after", REPO, gate=gate_flags)]
        if args.floor and args.profile:  # the polling floor profiled: the after side unpainted
            sides = [Side("after", REPO, "--no-paint", gate=gate_flags)]
        elif args.floor:
            sides.append(Side("paint-off", REPO, "--no-paint", gate=gate_flags))
        if args.baseline != "none" and not args.profile:
            old = stack.enter_context(checkout(args.baseline))
            sides.insert(0, Side("before", old, gate=gate_flags))
            if args.floor:
                sides.insert(1, Side("before-paint-off", old, "--no-paint", gate=gate_flags))
        for i in range(args.repeat):
            for side in sides:
                side.start(tmp, url, (width, height), args.gpus, i)
                stack.callback(side.stop)
            try:
                for side in sides:
                    frames[side.name].append(side.first_frame())
                procs = {side.name: side.process() for side in sides}
                time.sleep(8)  # history loaded, first scrapes done, charts drawn
                if args.profile:
                    args.profile.mkdir(parents=True, exist_ok=True)
                    raw = args.profile / f"{width}x{height}-e{args.engines}-g{args.gpus}-{i}.txt"
                    subprocess.run([PYSPY, "record", "--gil", "--format", "raw", "--rate", str(PROFILE_HZ),
                                    "-d", str(int(args.seconds)), "-p", str(procs["after"].pid),
                                    "-o", str(raw)], check=True, capture_output=True)  # fmt: skip
                    print(
                        f"profile {raw.name}: " + summarise(raw, args.seconds, PROFILE_HZ),
                        flush=True,
                    )
                    continue
                before = {n: p.cpu_times() for n, p in procs.items()}
                t0 = time.monotonic()
                time.sleep(args.seconds)
                after = {n: p.cpu_times() for n, p in procs.items()}
                elapsed = time.monotonic() - t0
                for n in procs:
                    used = (after[n].user + after[n].system) - (before[n].user + before[n].system)
                    cpu[n].append(used / elapsed * 100)
                for side in sides:
                    screens[side.name] = subprocess.run(
                        ["tmux", "capture-pane", "-p", "-t", side.session], capture_output=True, text=True
                    ).stdout  # fmt: skip
            finally:
                for side in sides:
                    side.stop()
    if args.profile:
        return
    goal = 1.0 if args.engines == 1 and (width, height) == (160, 48) else 2.0
    print(f"dashboard at {width}x{height}, {args.engines} engine(s){' behind a gate' if args.gate else ''} under {rate:g} req/s, {args.gpus} GPU(s), "
          f"1 h history; whole-process CPU (user+sys) over {args.seconds:.0f} s, {args.repeat} runs:")  # fmt: skip
    print(f"{'':14}{'% of one core, median':>24}{'runs':>26}{'first frame':>14}{'GPUs shown':>12}")
    for side in sides:
        runs = " ".join(f"{v:.2f}" for v in cpu[side.name])
        shown = screens.get(side.name, "").count("H100")
        print(f"{side.name:14}{statistics.median(cpu[side.name]):>24.2f}{runs:>26}"
              f"{statistics.median(frames[side.name]):>13.2f}s{shown:>12}")  # fmt: skip
    print(f"goals: <= {goal:g}% of one core; first frame <= 1 s   (before = {args.baseline})")


if __name__ == "__main__":
    main()
