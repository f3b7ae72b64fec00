"""``gpuwatch demo``: the simulator, the gate in front of it (with a generated admin token), a
bursty spike load through the gate, and the dashboard wired to all of them.

The node serves a mix, as a rented single-GPU node does: chat (with its spikes), a steady
trickle of embeddings, and every two minutes a burst of image requests. The gate's image lane
runs one image at a time, so the burst fills the image lane's queue and chat keeps its TTFT.
Chat comes from six tenants (one noisy) with a share of batch work that the gate maps to a
sheddable class: the admission panel shows classes and tenants taking turns.

The simulator and the gate run as child processes (their CPU is theirs, and they are easy to
stop for certain); the load runs inside the dashboard's event loop through ``gpuwatch.load``.
Quitting stops everything that was started.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuwatch.errors import GpuwatchError
from gpuwatch.load.runner import Shape
from gpuwatch.load.spec import Dist, EmbedShape, ImageShape, LoadSpec, Pattern, Tenancy

if TYPE_CHECKING:
    from gpuwatch.record.recorder import Recorder

# Loose on purpose: with the default load, spikes push the engine out of its boring zone, and
# tightening admission from the keyboard is what brings it back.
# The image lane: one image at a time (an image takes half the GPU from chat while it runs)
# and a deep queue with a long timeout, since a burst must wait rather than be refused.
DEMO_GATE_TOML = """\
[lanes.chat]
max_inflight = 64
max_queue = 256
queue_timeout_s = 20.0

[lanes.image]
max_inflight = 1
max_queue = 64
queue_timeout_s = 300.0
max_pixels = 262144
max_steps = 30

# The chat load's objectives: interactive work first, batch work shed first when full.
[fairness.objectives]
interactive = "critical"
batch = "sheddable"
"""
WORKLOADS = ("embed", "image")


class DemoError(GpuwatchError):
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


def start_stack(
    profile: str | None,
    time_scale: float = 1.0,
    seed: int = 0,
    *,
    workloads: tuple[str, ...] = WORKLOADS,
    gate_toml: str = DEMO_GATE_TOML,
) -> DemoStack:
    """The simulator (also serving ``workloads``) and a gate in front of it with
    ``gate_toml``, as child processes."""
    stack = DemoStack(tmp=tempfile.TemporaryDirectory(prefix="gpuwatch-demo-"))
    assert stack.tmp is not None
    tmp = Path(stack.tmp.name)
    stack.token = secrets.token_urlsafe(24)
    token_file = tmp / "admin-token"
    token_file.write_text(stack.token)
    os.chmod(token_file, 0o600)
    (tmp / "gate.toml").write_text(gate_toml)
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
        if workloads:
            sim_args += ["--workloads", ",".join(workloads)]
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
        # Six tenants with a Zipf skew, one of them noisy, and a share of batch work: the
        # admission panel shows the gate's classes and its turns across tenants.
        tenancy=Tenancy(6, 1.0, noisy=3.0),
        classes={"interactive": 0.8, "batch": 0.2},
        seed=seed,
    )


def embed_load(gate_url: str, seed: int = 0) -> LoadSpec:
    """Retrieval traffic: a steady 2 embeddings requests/s of 1-8 inputs, for an hour."""
    return LoadSpec(
        url=gate_url,
        rate=2.0,
        duration_s=3600.0,
        lane_mix={"embed": 1.0},
        embed=EmbedShape(Dist("uniform", 1, 8), Dist("uniform", 32, 512)),
        seed=seed + 1,
    )


IMAGE_BURST = 16  # images in each burst, half a second apart
# 512x512, the size an image lane's pixel cap would hold requests to. Resolution matters as
# much as the lane: at 768x768 one image at a time already pushes the demo's chat TTFT p99 over
# 1 s (the engine's bucket estimate then reads over 2 s), at 1024x1024 it doubles chat's step
# times (bench/mix.py measures that).
IMAGE_SIZE = (512, 512)
IMAGE_PERIOD_S = 120.0
IMAGE_AT_S = 40.0  # into each period: away from the chat spike at the end of it


def image_load(gate_url: str, seed: int = 0) -> tuple[LoadSpec, list[Shape]]:
    """A burst of 16 SDXL 512x512 / 30-step images 40 s into every two minutes, for an hour.

    Each image takes 1.2 s alone on the RTX 4090 profile and about 1.5 s beside busy chat, so
    with the image lane running one at a time a burst keeps it busy for about 25 s, with the
    rest waiting in its queue."""
    spec = LoadSpec(url=gate_url, rate=1.0, duration_s=3600.0, lane_mix={"image": 1.0},
                    image=ImageShape((IMAGE_SIZE,)), seed=seed + 2)  # fmt: skip
    shapes: list[Shape] = [
        (k * IMAGE_PERIOD_S + IMAGE_AT_S + i * 0.5, "image", 0, 0)
        for k in range(int(3600 / IMAGE_PERIOD_S))
        for i in range(IMAGE_BURST)
    ]
    return spec, shapes


def fitting_workloads(profile: str | None) -> tuple[str, ...]:
    """The mix this profile's GPU holds beside its model: embeddings and images, embeddings
    alone, or chat alone (70B on an 80 GB H100 leaves no room for SDXL)."""
    from gpuwatch.sim.profiles import DEFAULT_PROFILE, PROFILES, ProfileError, with_side_models

    base = PROFILES.get(profile or DEFAULT_PROFILE)
    if base is None:
        return WORKLOADS  # an unknown name: the simulator says so
    for workloads in (WORKLOADS, ("embed",)):
        try:
            with_side_models(base, "embed" in workloads, "image" in workloads)
        except ProfileError:
            continue
        return workloads
    return ()


def run_demo(
    profile: str | None,
    rate: float,
    burstiness: float,
    theme: str,
    read_only: bool,
    slo: dict[str, float | None] | None = None,
    recorder: Recorder | None = None,
    slow_link: bool = False,
) -> int:
    from gpuwatch.load import LoadRun
    from gpuwatch.record.store import RecordingError
    from gpuwatch.session.node import DashboardOptions, live_session
    from gpuwatch.sources.nvml import FakeNvml, NvmlReader, SimGpuSource
    from gpuwatch.tui.app import GpuwatchApp

    workloads = fitting_workloads(profile)
    try:
        stack = start_stack(profile, workloads=workloads)
    except DemoError as exc:
        print(f"gpuwatch demo: {exc}", file=sys.stderr)
        return 1

    # The simulator and the gate run in sessions of their own (Ctrl-C must not reach them
    # first), so a closed terminal (SIGHUP) or a kill (SIGTERM) would leave them running with
    # nobody to stop them. Stop them in the handler and leave at once: with the terminal gone,
    # the app's own shutdown can wait forever on writes nobody reads.
    def stop_on_signal(signum: int, frame: object) -> None:
        stack.stop()
        if recorder is not None:
            recorder.close()
        os._exit(128 + signum)

    for signum in (signal.SIGHUP, signal.SIGTERM):
        signal.signal(signum, stop_on_signal)
    try:
        options = DashboardOptions(
            urls=[f"{stack.sim_url}/metrics", f"{stack.gate_url}/metrics"],
            admin_url=stack.gate_url,
            admin_token=stack.token,
            theme=theme,
            slo=slo or {},
            nvml=NvmlReader(FakeNvml(SimGpuSource(f"{stack.sim_url}/sim/gpu"))),
            read_only=read_only,
            slow_link=slow_link,
            title_endpoint=f"demo sim {stack.sim_url.split('//')[1]}",
        )
        runs = [LoadRun(demo_load(stack.gate_url, rate, burstiness))]
        if "embed" in workloads:
            runs.append(LoadRun(embed_load(stack.gate_url)))
        if "image" in workloads:
            image_spec, image_shapes = image_load(stack.gate_url)
            runs.append(LoadRun(image_spec, shapes=image_shapes))
        jobs: list[Callable[[], Any]] = [run.run for run in runs]
        if recorder is not None:
            jobs.append(lambda: recorder.run(stack.gate_url, stack.token))
        session = live_session(options)
        app = GpuwatchApp(session, background=jobs)
        if recorder is not None:
            try:
                recorder.attach(
                    session.monitor,
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
