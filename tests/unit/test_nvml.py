"""NVML through the fake backend, which raises the real pynvml error classes."""

from __future__ import annotations

import os
from typing import Any

import pynvml
import pytest

from gpuwatch.sources.nvml import SLOW_FIELDS_EVERY_S, FakeNvml, NvmlReader, decode_throttle

GIB = 2**30


def gpu(**over: Any) -> dict[str, Any]:
    base = {
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": "GPU-1111",
        "memory_total": 80 * GIB,
        "memory_used": 72 * GIB,
        "memory_reserved": GIB // 2,
        "utilization_gpu": 87,
        "utilization_memory": 40,
        "temperature_c": 61,
        "power_w": 512.5,
        "power_limit_w": 700,
        "clock_sm_mhz": 1980,
        "clock_mem_mhz": 2619,
        "fan_percent": 0,
        "throttle_mask": pynvml.nvmlClocksEventReasonSwPowerCap,
        "processes": [{"pid": os.getpid(), "used_memory": 70 * GIB}],
    }
    base.update(over)
    return base


def test_reads_every_field() -> None:
    reading = NvmlReader(FakeNvml({"gpus": [gpu()]})).read()
    assert reading.error is None
    [g] = reading.gpus
    assert (g.index, g.name, g.uuid) == (0, "NVIDIA H100 80GB HBM3", "GPU-1111")
    assert (g.memory_total_bytes, g.memory_used_bytes) == (80 * GIB, 72 * GIB)
    assert g.memory_reserved_bytes == GIB // 2
    assert g.memory_free_bytes == 80 * GIB - 72 * GIB - GIB // 2
    assert (g.utilization_gpu, g.utilization_memory) == (0.87, 0.40)
    assert (g.temperature_c, g.power_w, g.power_limit_w) == (61, 512.5, 700)
    assert (g.clock_sm_mhz, g.clock_mem_mhz, g.fan_percent) == (1980, 2619, 0)
    assert g.throttle_reasons == ["sw_power_cap"]
    [p] = g.processes
    assert p.pid == os.getpid() and p.used_memory_bytes == 70 * GIB
    # Joined with psutil: this very test process.
    assert (
        p.name and p.rss_bytes and p.rss_bytes > 0 and p.cmdline and "python" in p.cmdline.lower()
    )


def test_not_supported_is_none_and_never_asked_again() -> None:
    fake = FakeNvml(
        {"gpus": [gpu(unsupported=["nvmlDeviceGetFanSpeed", "nvmlDeviceGetPowerUsage"])]}
    )
    reader = NvmlReader(fake)
    for _ in range(3):
        [g] = reader.read().gpus
        assert g.fan_percent is None and g.power_w is None
        assert g.temperature_c == 61 and g.error is None
    assert fake.calls["nvmlDeviceGetFanSpeed"] == 1
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 1
    assert fake.calls["nvmlDeviceGetTemperature"] == 3


def test_names_are_cached_and_init_happens_once() -> None:
    fake = FakeNvml({"gpus": [gpu(), gpu(uuid="GPU-2222")]})
    reader = NvmlReader(fake)
    for _ in range(4):
        assert [g.uuid for g in reader.read().gpus] == ["GPU-1111", "GPU-2222"]
    assert fake.calls["nvmlInit"] == 1
    assert fake.calls["nvmlDeviceGetName"] == 2
    assert fake.calls["nvmlDeviceGetUUID"] == 2


def test_lost_gpu_is_an_error_row_and_others_still_report() -> None:
    state = {"gpus": [gpu(), gpu(uuid="GPU-2222")]}
    reader = NvmlReader(FakeNvml(state))
    reader.read()
    state["gpus"][1] = gpu(uuid="GPU-2222", error="gpu_is_lost")
    good, lost = reader.read().gpus
    assert good.error is None and good.memory_used_bytes == 72 * GIB
    assert lost.error == "GPU 1: GPU is lost"
    assert lost.uuid == "GPU-2222"  # still named from the cache
    assert lost.memory_used_bytes is None


def test_handles_and_the_power_limit_are_not_read_every_poll() -> None:
    now = [0.0]
    state = {"gpus": [gpu(), gpu(uuid="GPU-2222")]}
    fake = FakeNvml(state)
    reader = NvmlReader(fake, clock=lambda: now[0])
    for _ in range(5):
        assert [g.power_limit_w for g in reader.read().gpus] == [700, 700]
        now[0] += 1.0
    assert fake.calls["nvmlDeviceGetHandleByIndex"] == 2  # once per GPU
    assert fake.calls["nvmlDeviceGetEnforcedPowerLimit"] == 2
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 10  # live values: every poll
    # An operator's new limit shows within a minute.
    state["gpus"][0] = gpu(power_limit_w=500)
    now[0] += SLOW_FIELDS_EVERY_S
    assert [g.power_limit_w for g in reader.read().gpus] == [500, 700]
    assert fake.calls["nvmlDeviceGetEnforcedPowerLimit"] == 4


def test_a_lost_gpu_gets_a_new_handle_when_it_is_back() -> None:
    state = {"gpus": [gpu()]}
    fake = FakeNvml(state)
    reader = NvmlReader(fake)
    reader.read()
    state["gpus"][0] = gpu(error="gpu_is_lost")
    assert reader.read().gpus[0].error == "GPU 0: GPU is lost"
    state["gpus"][0] = gpu(power_limit_w=600)
    [g] = reader.read().gpus
    assert g.error is None and g.power_limit_w == 600  # not the cached 700
    assert fake.calls["nvmlDeviceGetHandleByIndex"] == 2


def test_unknown_error_is_an_error_row() -> None:
    [g] = NvmlReader(FakeNvml({"gpus": [gpu(error="unknown")]})).read().gpus
    assert g.error == "GPU 0: Unknown Error"


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        ("library_not_found", "NVML unavailable: libnvidia-ml.so.1 not found"),
        ("driver_not_loaded", "NVML unavailable: NVIDIA driver not loaded"),
        ("version_mismatch", "NVML unavailable: driver/library version mismatch"),
    ],
)
def test_init_failure_is_one_reason(code: str, reason: str) -> None:
    fake = FakeNvml({"init_error": code, "gpus": []})
    reader = NvmlReader(fake)
    for _ in range(2):
        reading = reader.read()
        assert reading.gpus == [] and (reading.error or "").startswith(reason)
    assert fake.calls["nvmlInit"] == 1  # not retried on every poll


def test_real_pynvml_without_a_driver_gives_a_clear_reason() -> None:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this machine has a working NVML")
    reading = NvmlReader().read()
    assert reading.error is not None and reading.error.startswith("NVML unavailable: ")
    assert "\n" not in reading.error


def test_decode_throttle() -> None:
    mask = pynvml.nvmlClocksEventReasonGpuIdle | pynvml.nvmlClocksEventReasonHwThermalSlowdown
    assert decode_throttle(mask) == ["idle", "hw_thermal"]
    assert decode_throttle(0) == []
