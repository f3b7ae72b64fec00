"""MIG through the fake NVML backend: each MIG device a row with its own memory, processes
attributed to their instance, the simulator's layouts (gpuwatch/sim/mig.py) as a driver
would present them."""

from __future__ import annotations

import os
from typing import Any

import pytest

from gpuwatch.sim.gpu import VirtualGpu
from gpuwatch.sim.mig import MigLayoutError, parse_layout
from gpuwatch.sim.profiles import get_profile
from gpuwatch.sources.nvml import FakeNvml, NvmlReader
from tests.unit.test_nvml import GIB, gpu

H100 = get_profile("h100-llama3-70b-fp8")
HIDDEN = 2**22 + 4711  # no such process here


def instance(gi: int, profile: str, total: int, used: int, **over: Any) -> dict[str, Any]:
    return {"profile": profile, "gpu_instance_id": gi, "compute_instance_id": 0,
            "memory_total": total, "memory_used": used, "processes": [], **over}  # fmt: skip


def test_two_instances_with_their_processes_and_an_empty_slot() -> None:
    state = {
        "gpus": [
            gpu(
                utilization_gpu=0,
                unsupported=["nvmlDeviceGetUtilizationRates"],
                processes=[],  # the whole GPU lists nothing in MIG mode
                mig=[
                    instance(2, "3g.40gb", 40 * GIB, 30 * GIB, uuid="MIG-aaaa",
                             processes=[{"pid": os.getpid(), "used_memory": 29 * GIB}]),
                    None,  # a slot with no MIG device: NVML answers "not found"
                    instance(1, "4g.40gb", 40 * GIB, 12 * GIB, utilization_gpu=55,
                             processes=[{"pid": HIDDEN, "used_memory": 11 * GIB}]),
                ],
            )
        ]
    }  # fmt: skip
    fake = FakeNvml(state)
    reader = NvmlReader(fake)
    for _ in range(3):
        [g] = reader.read().gpus
        assert g.error is None and g.mig_mode is True and g.utilization_gpu is None
        a, b = g.mig
        assert (a.gpu_instance_id, a.compute_instance_id, a.profile, a.uuid) == (
            2, 0, "3g.40gb", "MIG-aaaa",
        )  # fmt: skip
        assert (a.memory_total_bytes, a.memory_used_bytes, a.utilization_gpu) == (
            40 * GIB, 30 * GIB, 0.0,
        )  # fmt: skip
        assert (b.profile, b.memory_used_bytes, b.utilization_gpu) == ("4g.40gb", 12 * GIB, 0.55)
        mine, hidden = g.processes
        assert (mine.pid, mine.gpu_instance_id, mine.compute_instance_id) == (os.getpid(), 2, 0)
        assert mine.used_memory_bytes == 29 * GIB and mine.visible and mine.name
        assert (hidden.gpu_instance_id, hidden.visible, hidden.used_memory_bytes) == (
            1, False, 11 * GIB,
        )  # fmt: skip
    # The profile is read from the MIG device's name once; slots past the layout are asked.
    assert fake.calls["nvmlDeviceGetName"] == 1 + 2
    assert fake.calls["nvmlDeviceGetMigDeviceHandleByIndex"] == 3 * 7


def test_a_mig_device_without_utilization_is_not_asked_again() -> None:
    mig = [instance(1, "7g.80gb", 80 * GIB, GIB, unsupported=["nvmlDeviceGetUtilizationRates"])]
    fake = FakeNvml({"gpus": [gpu(mig=mig)]})
    reader = NvmlReader(fake)
    for _ in range(3):
        [g] = reader.read().gpus
        assert g.mig[0].utilization_gpu is None and g.mig[0].error is None
    # Each poll for the GPU, which answers; once for its MIG device, which does not.
    assert fake.calls["nvmlDeviceGetUtilizationRates"] == 3 + 1


def test_a_failing_mig_device_is_its_own_error_row() -> None:
    mig = [
        instance(1, "4g.40gb", 40 * GIB, GIB, unsupported=["nvmlDeviceGetGpuInstanceId"]),
        instance(2, "3g.40gb", 40 * GIB, 2 * GIB),
    ]
    [g] = NvmlReader(FakeNvml({"gpus": [gpu(mig=mig)]})).read().gpus
    bad, good = g.mig
    assert bad.error is not None and "MIG device 0" in bad.error
    assert good.error is None and good.memory_used_bytes == 2 * GIB and g.error is None


def test_a_gpu_lost_in_mig_mode_is_an_error_row() -> None:
    state = {"gpus": [gpu(mig=[instance(1, "7g.80gb", 80 * GIB, GIB)])]}
    reader = NvmlReader(FakeNvml(state))
    assert reader.read().gpus[0].mig
    state["gpus"][0]["error"] = "gpu_is_lost"
    [g] = reader.read().gpus
    assert g.error is not None and "GPU is lost" in g.error and g.mig == []


def test_no_mig_and_no_mig_support() -> None:
    state = {"gpus": [gpu(), gpu(unsupported=["nvmlDeviceGetMigMode"])]}
    fake = FakeNvml(state)
    off, unsupported = NvmlReader(fake).read().gpus
    assert (off.mig_mode, off.mig, len(off.processes)) == (False, [], 1)
    assert (unsupported.mig_mode, unsupported.mig) == (None, [])
    assert "nvmlDeviceGetMaxMigDeviceCount" not in fake.calls


@pytest.mark.parametrize(
    ("layout", "profiles", "gib_each"),
    [
        ("7x1g.10gb", ["1g.10gb"] * 7, [80e9 / 8 / GIB] * 7),
        ("3g.40gb+4g.40gb", ["3g.40gb", "4g.40gb"], [80e9 / 2 / GIB] * 2),
        ("2g.20gb + 2x1g.10gb", ["2g.20gb", "1g.10gb", "1g.10gb"], [80e9 / 4 / GIB] + [80e9 / 8 / GIB] * 2),
    ],
)  # fmt: skip
def test_the_simulators_layouts_read_back(layout: str, profiles: list[str], gib_each: list[float]) -> None:  # fmt: skip
    virtual = VirtualGpu(H100, 0, mig=parse_layout(layout, H100.gpu.name, H100.gpu.vram_bytes))
    [g] = NvmlReader(FakeNvml(lambda: {"gpus": [virtual.state(0.0)]})).read().gpus
    assert g.mig_mode and [m.profile for m in g.mig] == profiles
    assert [m.gpu_instance_id for m in g.mig] == list(range(1, len(profiles) + 1))
    assert [(m.memory_total_bytes or 0) / GIB for m in g.mig] == pytest.approx(gib_each)
    # No utilization on a MIG GPU, as real drivers say; the engine in the largest device.
    assert g.utilization_gpu is None and all(m.utilization_gpu is None for m in g.mig)
    [engine] = g.processes
    # The largest by memory, then compute ("3g.40gb" < "4g.40gb"), the first of equals.
    home = max(g.mig, key=lambda m: (m.memory_total_bytes or 0, m.profile))
    assert engine.pid == os.getpid() and engine.gpu_instance_id == home.gpu_instance_id
    assert home.memory_used_bytes == engine.used_memory_bytes
    assert 0 < (home.memory_used_bytes or 0) <= (home.memory_total_bytes or 0)
    assert g.memory_used_bytes == home.memory_used_bytes


@pytest.mark.parametrize(
    ("profile", "layout", "error"),
    [
        ("rtx4090-llama3-8b-awq", "7x1g.10gb", "has no MIG"),
        ("h100-llama3-70b-fp8", "8x1g.10gb", "more than 7 MIG devices"),
        ("h100-llama3-70b-fp8", "4g.40gb+4g.40gb", "more than the 7 compute slices"),
        ("h100-llama3-70b-fp8", "3g.40gb+3g.40gb+1g.10gb", "more than the GPU's memory"),
        ("h100-llama3-70b-fp8", "1g.5gb", "not a whole eighth"),
        ("h100-llama3-70b-fp8", "5g.50gb", "1, 2, 3, 4 or 7 compute slices"),
        ("h100-llama3-70b-fp8", "big", "not a profile like"),
    ],
)
def test_layouts_a_gpu_cannot_have(profile: str, layout: str, error: str) -> None:
    p = get_profile(profile)
    with pytest.raises(MigLayoutError, match=error):
        parse_layout(layout, p.gpu.name, p.gpu.vram_bytes)


def test_h200_profiles() -> None:
    h200 = get_profile("h200-llama3-70b-fp8")
    slices = parse_layout("1g.18gb+2g.35gb+3g.71gb", h200.gpu.name, h200.gpu.vram_bytes)
    assert [s.memory_bytes * 8 // h200.gpu.vram_bytes for s in slices] == [1, 2, 4]
