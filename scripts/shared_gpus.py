"""A node whose GPUs are shared, as deterministic data for snapshots and screenshots: on GPU 0
a vLLM in Docker, an embedding server in rootless Podman, a notebook in a Kubernetes pod and a
process of another PID namespace; GPU 1 in MIG mode (4g.40gb + 2g.20gb + 1g.10gb) with an
SGLang pod under CRI-O and someone's training run outside any container.

Read through the real NvmlReader from the fake NVML backend; each process's container comes
from its cgroup line through the real parser (gpuwatch/sources/cgroups.py), with the names a
runtime would give, and the rest of what ProcessTable would say fixed, so that the pictures are
the same on every machine.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from gpuwatch.model import ContainerInfo, GpuReading, ProcessInfo
from gpuwatch.sources.cgroups import container_of
from gpuwatch.sources.nvml import FakeNvml, NvmlReader

GIB = 2**30
HIDDEN_PID = 4711  # NVML lists it; this machine has no /proc entry for it
_POD = "1f6a8e2c_3b4d_4e5f_8a9b_0c1d2e3f4a5b"


def _in(cgroup: str, name: str | None = None, pod: str | None = None) -> ContainerInfo:
    found = container_of(cgroup)
    assert found is not None, cgroup
    return dataclasses.replace(found, name=name, pod_name=pod)


# pid: (name, user, command, container), as ProcessTable would describe each.
PROCESSES: dict[int, tuple[str, str, str, ContainerInfo | None]] = {
    1201: ("python3", "root", "python3 -m vllm.entrypoints.openai.api_server --model "
           "meta-llama/Llama-3.1-70B-Instruct --tensor-parallel-size 1",
           _in("0::/system.slice/docker-4a1fd0c39e2b7786c5a1e0d93f6b2c4178e5d0a9b3c6f1e2d8a7b4c5"
               "e6f70812.scope", "vllm")),
    1377: ("python3", "1000", "python3 -m infinity_emb v2 --model-id BAAI/bge-m3",
           _in("0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-9e3c77b1d04a"
               "5f26e8b1c3d5a7f90e12b4c6d8e0f1a3b5c7d9e1f3a5b7c9d0e2.scope", "embed")),
    1502: ("python3", "jovyan", "python3 -m ipykernel_launcher -f kernel-7.json",
           _in(f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{_POD}.slice/"
               "cri-containerd-c0ffee5a1d2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5"
               ".scope", "jupyter", "notebook-0")),
    2210: ("python3", "root", "python3 -m sglang.launch_server --model-path Qwen/Qwen2.5-32B",
           _in("11:memory:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"
               "9a8b7c6d_5e4f_4a3b_8c2d_1e0f9a8b7c6d.slice/crio-7b2e6f01a9c8d7e6f5a4b3c2d1e0f9a8"
               "b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2.scope", None, "llm-1")),
    2304: ("python3", "ana", "python3 train_lora.py --rank 16", None),
}  # fmt: skip


class FixedTable:
    """ProcessTable's ``describe`` for the pids above; any other pid is not visible here."""

    def describe(self, pid: int) -> ProcessInfo:
        if pid not in PROCESSES:
            return ProcessInfo(pid, visible=False)
        name, user, cmd, container = PROCESSES[pid]
        return ProcessInfo(pid, name, user, cmd, 12.0, 3 * GIB, 48, container=container)


def _mig(gi: int, profile: str, total: int, procs: list[tuple[int, int]]) -> dict[str, Any]:
    return {
        "profile": profile, "gpu_instance_id": gi, "compute_instance_id": 0,
        "uuid": f"MIG-5131a2c4-9d1e-5f0b-8c3a-{gi:012x}", "memory_total": total,
        "memory_used": sum(u for _, u in procs) + (GIB // 2 if procs else 0),
        "unsupported": ["nvmlDeviceGetUtilizationRates"],
        "processes": [{"pid": p, "used_memory": u} for p, u in procs],
    }  # fmt: skip


_H100 = {
    "name": "NVIDIA H100 80GB HBM3", "memory_total": 80 * GIB, "memory_reserved": GIB // 2,
    "temperature_c": 58, "power_w": 402.0, "power_limit_w": 700, "clock_sm_mhz": 1755,
    "clock_mem_mhz": 2619, "unsupported": ["nvmlDeviceGetFanSpeed"],
}  # fmt: skip
NODE: dict[str, Any] = {
    "gpus": [
        {**_H100, "uuid": "GPU-5131a2c4-0000-4000-8000-00000000a001",
         "memory_used": 75 * GIB, "utilization_gpu": 83, "utilization_memory": 61,
         "processes": [{"pid": 1201, "used_memory": 58 * GIB},
                       {"pid": 1377, "used_memory": 7 * GIB},
                       {"pid": 1502, "used_memory": 5 * GIB},
                       {"pid": HIDDEN_PID, "used_memory": 3 * GIB}]},
        {**_H100, "uuid": "GPU-5131a2c4-0001-4000-8000-00000000a002",
         "memory_used": 44 * GIB, "processes": [],
         "unsupported": ["nvmlDeviceGetFanSpeed", "nvmlDeviceGetUtilizationRates"],
         "mig": [_mig(1, "4g.40gb", 40 * GIB, [(2210, 36 * GIB)]),
                 _mig(2, "2g.20gb", 20 * GIB, [(2304, 6 * GIB)]),
                 _mig(3, "1g.10gb", 10 * GIB, [])]},
    ]
}  # fmt: skip


def node_reading() -> GpuReading:
    return NvmlReader(FakeNvml(NODE), processes=FixedTable()).read()  # type: ignore[arg-type]


def with_shared_gpus(sc: Any) -> Any:
    """The scenario (scripts.scenario) with this node's GPUs in its monitor."""
    sc.monitor.apply_gpus(node_reading())
    return sc
