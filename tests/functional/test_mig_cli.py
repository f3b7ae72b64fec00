"""``gpuwatch sim --mig`` and ``gpuwatch snapshot --json`` as a user runs them: the simulator's
GPU in MIG mode read over real HTTP through the NVML reader, each MIG device in the JSON."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.functional.fleetkit import child

GW = [sys.executable, "-m", "gpuwatch"]


def test_snapshot_json_shows_mig_devices_and_the_engine_in_one() -> None:
    sim, url = child("sim", "--profile", "h100-llama3-70b-fp8", "--mig", "3g.40gb+4g.40gb")
    try:
        proc = subprocess.run(
            [*GW, "snapshot", "--json", "--fake-gpu-from", f"{url}/sim/gpu"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    finally:
        sim.terminate()
        sim.wait(10)
    assert proc.returncode == 0, proc.stderr
    [gpu] = json.loads(proc.stdout)["gpus"]
    assert gpu["mig_mode"] is True and gpu["utilization_gpu"] is None
    assert [(m["profile"], m["gpu_instance_id"], m["compute_instance_id"]) for m in gpu["mig"]] == [
        ("3g.40gb", 1, 0),
        ("4g.40gb", 2, 0),
    ]
    assert all(m["memory_total_bytes"] == 40_000_000_000 for m in gpu["mig"])
    [engine] = gpu["processes"]
    # The simulator's own process, in the largest device (the 4g: as much memory, more compute).
    assert engine["pid"] == sim.pid and engine["visible"] is True
    assert (engine["gpu_instance_id"], engine["compute_instance_id"]) == (2, 0)
    assert engine["used_memory_bytes"] == gpu["mig"][1]["memory_used_bytes"] > 0
    assert gpu["mig"][0]["memory_used_bytes"] == 0
    assert "container" in engine


def test_a_layout_the_gpu_cannot_have_is_a_usage_error() -> None:
    proc = subprocess.run(
        [*GW, "sim", "--mig", "7x1g.10gb", "--listen", "127.0.0.1:0"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "has no MIG" in proc.stderr and "Traceback" not in proc.stderr
