"""dumps_json: the whole document or nothing, and never NaN or Infinity in it."""

from __future__ import annotations

import datetime as dt
import json
import math

from gpuwatch.model import EngineSnapshot, GpuReading, GpuSample, HostSample, ScrapeResult
from gpuwatch.snapshot import Snapshot, dumps_json


def _refuse(name: str) -> None:
    raise AssertionError(f"{name} in JSON output")


def test_non_finite_values_from_any_source_become_null_with_a_warning() -> None:
    host = HostSample(math.nan, [1.0, math.inf], 0.5, 0.5, 0.5, 1, 1, 0, 0)
    gpus = GpuReading([GpuSample(0, name="g", power_w=math.inf)])
    engine = EngineSnapshot("http://x/metrics", "vllm", "m", running=-math.inf, waiting=2)
    results = [ScrapeResult("http://x/metrics", [engine])]
    snap = Snapshot(dt.datetime.now(dt.timezone.utc), gpus, host, None, results)
    data = json.loads(dumps_json(snap), parse_constant=_refuse)
    assert data["host"]["cpu_percent"] is None and data["host"]["cpu_per_core"] == [1.0, None]
    assert data["gpus"][0]["power_w"] is None and data["gpus"][0]["name"] == "g"
    assert data["engines"][0]["running"] is None and data["engines"][0]["waiting"] == 2
    assert data["warnings"] == [
        {"source": "nvml", "warning": "gpus[0].power_w is inf: shown as null"},
        {"source": "host", "warning": "host.cpu_percent is nan: shown as null"},
        {"source": "host", "warning": "host.cpu_per_core[1] is inf: shown as null"},
        {"source": "http://x/metrics", "warning": "engines[0].running is -inf: shown as null"},
    ]


def test_containers_hidden_processes_and_mig_devices_in_the_document() -> None:
    from gpuwatch.model import ContainerInfo, MigInstance, ProcessInfo

    pod = ContainerInfo("ab" * 32, None, "server", "1f6a8e2c-3b4d-4e5f-8a9b-0c1d2e3f4a5b", "llm-0")
    gpu = GpuSample(
        0,
        mig_mode=True,
        mig=[MigInstance(1, 0, "3g.40gb", "MIG-1", 40, 30)],
        processes=[ProcessInfo(7, container=pod, gpu_instance_id=1, compute_instance_id=0),
                   ProcessInfo(4711, visible=False, used_memory_bytes=3)],
    )  # fmt: skip
    host = HostSample(1.0, [1.0], 0.5, 0.5, 0.5, 1, 1, 0, 0)
    snap = Snapshot(dt.datetime.now(dt.timezone.utc), GpuReading([gpu]), host, None, [])
    [g] = json.loads(dumps_json(snap))["gpus"]
    assert g["mig_mode"] is True
    assert g["mig"] == [{"gpu_instance_id": 1, "compute_instance_id": 0, "profile": "3g.40gb",
                         "uuid": "MIG-1", "memory_total_bytes": 40, "memory_used_bytes": 30,
                         "utilization_gpu": None, "error": None}]  # fmt: skip
    mine, hidden = g["processes"]
    assert mine["container"] == {"id": "ab" * 32, "runtime": None, "name": "server",
                                 "pod_uid": pod.pod_uid, "pod_name": "llm-0"}  # fmt: skip
    assert (mine["visible"], mine["gpu_instance_id"], mine["compute_instance_id"]) == (True, 1, 0)
    assert (hidden["visible"], hidden["container"], hidden["used_memory_bytes"]) == (False, None, 3)
