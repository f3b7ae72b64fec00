"""``gpuwatch demo``: the simulator, the gate in front of it (with a generated admin token), a
bursty spike load through the gate, and the dashboard wired to all of them.

The simulator and the gate run as child processes (their CPU is theirs, and they are easy to
stop for certain); the load runs inside the dashboard's event loop through ``gpuwatch.load``.
Quitting stops everything that was started.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuwatch.load.spec import Dist, LoadSpec, Pattern

if TYPE_CHECKING:
    from gpuwatch.record.recorder import Recorder

# Loose on purpose: with the default load, spikes push the engine out of its boring zone, and
# tightening admission from the keyboard is what brings it back.
DEMO_GATE_TOML = """\
[lanes.chat]
max_inflight = 64
max_queue = 256
queue_timeout_s = 20.0
"""


class DemoError(Exception):
    pass


@dataclass
class DemoStack:
    sim_url: str = ""
    gate_url: str = ""
    token: str = ""
    procs: list[subprocess.Popen[str]] = field(default_factory=list)
    tmp: tempfile.TemporaryDirectory[str] | None = None

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        if self.tmp:
            self.tmp.cleanup()


def _spawn(stack: DemoStack, args: list[str], what: str) -> str:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuwatch", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # Ctrl-C in the dashboard must not reach them first
    )
    stack.procs.append(proc)
    line = proc.stdout.readline() if proc.stdout else ""
    if " on http://" in line:
        url = line.split(" on ", 1)[1].split()[0]
    elif line.startswith("gpuwatch gate: http://"):
        url = line.split()[2]
    else:
        err = proc.stderr.read() if proc.stderr else ""
        raise DemoError(f"{what} did not start: {(line + err).strip()[:300]}")
    return url


def start_stack(profile: str | None, time_scale: float = 1.0, seed: int = 0) -> DemoStack:
    stack = DemoStack(tmp=tempfile.TemporaryDirectory(prefix="gpuwatch-demo-"))
    assert stack.tmp is not None
    tmp = Path(stack.tmp.name)
    stack.token = secrets.token_urlsafe(24)
    token_file = tmp / "admin-token"
    token_file.write_text(stack.token)
    os.chmod(token_file, 0o600)
    (tmp / "gate.toml").write_text(DEMO_GATE_TOML)
    try:
        sim_args = [
            "sim",
            "--listen",
            "127.0.0.1:0",
            "--time-scale",
            str(time_scale),
            "--seed",
            str(seed),
        ]
        if profile:
            sim_args += ["--profile", profile]
        stack.sim_url = _spawn(stack, sim_args, "the simulator")
        stack.gate_url = _spawn(
            stack,
            [
                "gate",
                "--upstream",
                stack.sim_url,
                "--listen",
                "127.0.0.1:0",
                "--config",
                str(tmp / "gate.toml"),
                "--state-file",
                str(tmp / "gate-state.json"),
                "--admin-token-file",
                str(token_file),
            ],
            "the gate",
        )
    except BaseException:
        stack.stop()
        raise
    return stack


def demo_load(gate_url: str, rate: float, burstiness: float, seed: int = 0) -> LoadSpec:
    """Steady traffic with a 5x spike in the last 15 s of every two minutes, for an hour.

    Two minutes, not one: the badge judges the last minute, so between spikes the window
    clears and a node that copes with the calm load shows OK again."""
    return LoadSpec(
        url=gate_url,
        rate=rate,
        burstiness=burstiness,
        duration_s=3600.0,
        pattern=Pattern(period=120.0, duty=0.125, factor=5.0),
        prompt_tokens=Dist("uniform", 256, 1536),
        output_tokens=Dist("lognormal", 200, 0.5),
        seed=seed,
    )


def run_demo(
    profile: str | None,
    rate: float,
    burstiness: float,
    theme: str,
    read_only: bool,
    slo: dict[str, float | None] | None = None,
    recorder: Recorder | None = None,
) -> int:
    from gpuwatch.load import LoadRun
    from gpuwatch.record.store import RecordingError
    from gpuwatch.sources.nvml import FakeNvml, NvmlReader, SimGpuSource
    from gpuwatch.tui.app import DashboardOptions, GpuwatchApp

    try:
        stack = start_stack(profile)
    except DemoError as exc:
        print(f"gpuwatch demo: {exc}", file=sys.stderr)
        return 1
    try:
        options = DashboardOptions(
            urls=[f"{stack.sim_url}/metrics", f"{stack.gate_url}/metrics"],
            admin_url=stack.gate_url,
            admin_token=stack.token,
            theme=theme,
            slo=slo or {},
            nvml=NvmlReader(FakeNvml(SimGpuSource(f"{stack.sim_url}/sim/gpu"))),
            read_only=read_only,
            title_endpoint=f"demo sim {stack.sim_url.split('//')[1]}",
        )
        load = LoadRun(demo_load(stack.gate_url, rate, burstiness))
        jobs: list[Callable[[], Any]] = [load.run]
        if recorder is not None:
            jobs.append(lambda: recorder.run(stack.gate_url, stack.token))
        app = GpuwatchApp(options, background=jobs)
        if recorder is not None:
            try:
                recorder.attach(
                    app.monitor,
                    host=options.hostname,
                    title=options.title_endpoint,
                    max_engines=options.scrape.max_engines,
                )
            except RecordingError as exc:
                print(f"gpuwatch demo: {exc}", file=sys.stderr)
                return 2
        with contextlib.suppress(KeyboardInterrupt):
            app.run()
    finally:
        stack.stop()
        if recorder is not None:
            recorder.close()
    return 0
