"""Write the README's screenshots (SVG) from deterministic data: the simulator's engine
fast-forwarded under a seeded load and scraped through the real data layer (scripts.scenario).

Run from the repository's root: python -m scripts.screenshots [--out screenshots]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from gpuwatch.demo import demo_load
from gpuwatch.tui.app import GpuwatchApp
from scripts import scenario
from scripts.shared_gpus import with_shared_gpus

if TYPE_CHECKING:  # for the types only: fleet_scene imports them when it runs
    from gpuwatch.monitor.fleet import FleetState
    from gpuwatch.session.fleet import FleetOptions

SIM_ORIGIN = scenario.SIM_URL.removesuffix("/metrics")
SIZES = {"160x48": (160, 48), "80x24": (80, 24)}
TZ_NOTE = "times are UTC"


async def shoot(
    sc: scenario.Scenario,
    size: tuple[int, int],
    path: Path,
    keys: list[str] | None = None,
    setup: Callable[[GpuwatchApp], None] | None = None,
) -> None:
    app = scenario.app_for(sc)
    if setup is not None:
        setup(app)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        scenario.paint(app)
        for key in keys or []:
            await pilot.press(key)
        await pilot.pause()
        app.save_screenshot(filename=path.name, path=str(path.parent))


def fleet_scene() -> tuple[FleetOptions, FleetState]:
    """A fleet of 14 engines on 10 nodes, two of them in trouble (seeded, no server)."""
    import random

    from gpuwatch.monitor.fleet import FleetState
    from gpuwatch.session.fleet import FleetOptions
    from gpuwatch.sources.prometheus import FleetReading, PrometheusSource
    from gpuwatch.sources.promql import FleetRow

    rng = random.Random(17)
    rows = []
    for i in range(14):
        node = f"gpu-{i % 10:02d}"
        model = ("llama-3.1-8b", "qwen2.5-32b", "mistral-7b")[i % 3]
        sick = i in (3, 7)
        row = FleetRow(f"10.0.1.{10 + i}:8000", model, "vllm" if i != 9 else "sglang", node)
        row.values = {
            "running": float(rng.randint(8, 24)),
            "waiting": float(rng.randint(20, 60) if sick else rng.randint(0, 2)),
            "kv": 0.97 if sick else rng.uniform(0.3, 0.8),
            "ttft_p99": rng.uniform(2.5, 4.0) if sick else rng.uniform(0.15, 0.9),
            "itl_p99": rng.uniform(0.02, 0.05),
            "gen_tps": rng.uniform(600, 1800),
            "preempt_per_min": rng.uniform(3, 9) if sick else 0.0,
        }
        if i % 2 == 0 or sick:
            row.gate = f"10.0.1.{10 + i}:9000"
            row.values |= {
                "gate_inflight": row.values["running"],
                "gate_queued": row.values["waiting"],
                "gate_refused_ps": rng.uniform(1, 4) if sick else 0.0,
            }
        rows.append(row)
    state = FleetState()
    state.apply(FleetReading(0.0, rows))
    url = "http://prometheus:9090"
    return FleetOptions(url, PrometheusSource(url)), state


async def shoot_fleet(size: tuple[int, int], path: Path) -> None:
    from gpuwatch.session.fleet import FleetOptions
    from gpuwatch.tui.fleet_app import FleetApp
    from gpuwatch.tui.screens.fleet import FleetScreen

    options, state = fleet_scene()
    assert isinstance(options, FleetOptions)
    app = FleetApp(options, state)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, FleetScreen)
        screen.marked.update(r.key for r in app.fleet.state.view()[:2])
        screen.paint()
        await pilot.pause()
        app.save_screenshot(filename=path.name, path=str(path.parent))


def with_knobs(app: GpuwatchApp) -> None:
    """The stacks' own knobs beside the gate's lanes: a Dynamo frontend's busy thresholds for
    two models and a vLLM server's pause, as ``KnobReader`` holds them after a read (the
    adapters built from ``[[knobs]]`` entries, their knobs shown; nothing is sent)."""
    from gpuwatch.config import KnobConfig
    from gpuwatch.control.knobs.base import Knob
    from gpuwatch.session.knobs import KnobReader

    session = app.session
    configs = [KnobConfig("dynamo", "http://127.0.0.1:8080"), KnobConfig("vllm", SIM_ORIGIN)]
    reader = KnobReader(lambda: session.monitor, configs, session.monitor.event, lambda: None)
    dynamo, vllm = reader.sources
    thresholds = [  # as DynamoKnobs.read makes them: every threshold of each model
        ("llama-3.1-8b", 0.85, 8192, None),
        ("qwen2.5-32b", 0.9, 16384, None),
    ]
    dynamo.shown(
        [
            knob
            for model, decode, prefill, frac in thresholds
            for knob in (
                Knob("dynamo", model, "active_decode_blocks_threshold", decode, "float", 0, 1),
                Knob("dynamo", model, "active_prefill_tokens_threshold", prefill, "int", 0),
                Knob("dynamo", model, "active_prefill_tokens_threshold_frac", frac, "float", 0),
            )
        ]
    )
    vllm.shown([Knob("vllm", "server", "paused", False, "bool")])
    session.knob_reader = reader


async def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    normal = scenario.build(seconds=180)
    overloaded = scenario.build(seconds=180, spike_at=140)
    recovered = scenario.build(seconds=180, spike_at=120, max_inflight=8, max_queue=16)
    # The story, in one seeded run: a spike overloads the node, the operator tightens the gate.
    before = scenario.build(seconds=150, spike_at=100)
    after = scenario.build(seconds=235, spike_at=100, tighten_at=150)
    # The mix: the demo's burst of 16 SDXL 512x512 images at 165 s through an image lane of
    # one, 15 s later: the image lane's queue holds the rest of the burst, chat keeps its zone.
    # Chat from the demo's tenants (Zipf, one noisy) and classes (interactive, batch), through
    # the real gate's admission with the demo's [fairness]: the panel's classes and tenants.
    demo = demo_load(scenario.GATE_URL, 1.5, 0.5)
    mix = scenario.build(seconds=180, images_at=165, tenancy=demo.tenancy, classes=demo.classes)
    # The same tenants through a tight chat lane (8 in flight, 16 queued) in a spike: critical
    # work evicts queued batch work, batch is refused first, the noisy tenant waits its turn.
    classes = scenario.build(
        seconds=180,
        spike_at=120,
        max_inflight=8,
        max_queue=16,
        tenancy=demo.tenancy,
        classes=demo.classes,
    )
    # The GPU screen on a node shared by containers, one GPU in MIG mode (scripts.shared_gpus).
    shared = with_shared_gpus(scenario.build(seconds=180))
    for label, size in SIZES.items():
        await shoot(normal, size, out / f"dashboard-normal-{label}.svg")
        await shoot(overloaded, size, out / f"dashboard-overloaded-{label}.svg")
        await shoot(recovered, size, out / f"dashboard-recovered-{label}.svg")
        await shoot(before, size, out / f"story-before-{label}.svg")
        await shoot(after, size, out / f"story-after-{label}.svg")
        await shoot(mix, size, out / f"dashboard-mix-{label}.svg")
        await shoot(classes, size, out / f"dashboard-classes-{label}.svg")
        await shoot(shared, size, out / f"gpu-screen-{label}.svg", ["g"])
        await shoot(normal, size, out / f"help-screen-{label}.svg", ["question_mark"])
        adaptive = scenario.with_adaptive(scenario.build(seconds=180, spike_at=140))
        await shoot(adaptive, size, out / f"adaptive-{label}.svg")
        await shoot_fleet(size, out / f"fleet-{label}.svg")
        # `tab` past the gate's four lanes: the first knob row's first knob selected.
        await shoot(normal, size, out / f"knobs-{label}.svg", ["tab"] * 4, with_knobs)
    # The story again, replayed from its recording at the moment the operator tightened.
    with tempfile.TemporaryDirectory() as tmp:
        replay = scenario.replay_for(
            Path(tmp) / "story.db", 160, seconds=235, spike_at=100, tighten_at=150
        )
        async with replay.run_test(size=SIZES["160x48"]) as pilot:
            await pilot.pause()
            replay.save_screenshot(filename="replay-160x48.svg", path=str(out))
        assert replay.session.replay is not None
        replay.session.replay.close()
    print(f"wrote {len(list(out.glob('*.svg')))} SVGs to {out}/")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parent.parent / "screenshots"
    )
    asyncio.run(main(parser.parse_args().out))
