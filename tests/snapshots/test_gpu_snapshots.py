"""SVG snapshots of who holds the GPUs: the GPU screen (``g``) and the dashboard's GPU panel on
a node with containers of each runtime and a GPU in MIG mode, read through NvmlReader from the
fake NVML backend. Processes are described from the cgroup fixtures (tests/fixtures/cgroup)
through the real parser, with fixed names, so the pictures are the same on every machine.

Update after an intended change: pytest tests/snapshots --snapshot-update
"""

from __future__ import annotations

import dataclasses

import pytest

from gpuwatch.model import ContainerInfo, GpuReading, ProcessInfo
from gpuwatch.sources.cgroups import container_of
from gpuwatch.sources.nvml import FakeNvml, NvmlReader
from scripts import scenario
from tests.snapshots.test_dashboard_snapshots import _paint, utc  # noqa: F401
from tests.unit.test_cgroups import FIXTURES

GIB = 2**30
HIDDEN = 4711  # NVML lists it; this machine has no /proc entry for it


def _in(fixture: str, name: str | None = None, pod: str | None = None) -> ContainerInfo:
    found = container_of((FIXTURES / f"{fixture}.cgroup").read_text())
    assert found is not None
    return dataclasses.replace(found, name=name, pod_name=pod)


# pid: (name, user, command, container), as ProcessTable would describe each.
PROCESSES: dict[int, tuple[str, str, str, ContainerInfo | None]] = {
    1201: ("python3", "root", "python3 -m vllm.entrypoints.openai.api_server --model "
           "meta-llama/Llama-3.1-70B-Instruct --tensor-parallel-size 1",
           _in("docker-systemd-v2", "vllm")),
    1377: ("python3", "1000", "python3 -m infinity_emb v2 --model-id BAAI/bge-m3",
           _in("podman-rootless-v2", "embed")),
    1502: ("python3", "jovyan", "python3 -m ipykernel_launcher -f kernel-7.json",
           _in("containerd-kubepods-systemd-v2", "jupyter", "notebook-0")),
    2210: ("python3", "root", "python3 -m sglang.launch_server --model-path Qwen/Qwen2.5-32B",
           _in("crio-kubepods-systemd-v1", None, "llm-1")),
    2304: ("python3", "ana", "python3 train_lora.py --rank 16", None),
}  # fmt: skip


class FixedTable:
    """ProcessTable's ``describe`` for the pids above; any other pid is not visible here."""

    def describe(self, pid: int) -> ProcessInfo:
        if pid not in PROCESSES:
            return ProcessInfo(pid, visible=False)
        name, user, cmd, container = PROCESSES[pid]
        return ProcessInfo(pid, name, user, cmd, 12.0, 3 * GIB, 48, container=container)


def _mig(gi: int, profile: str, total: int, procs: list[tuple[int, int]]) -> dict[str, object]:
    return {
        "profile": profile, "gpu_instance_id": gi, "compute_instance_id": 0,
        "uuid": f"MIG-5131a2c4-9d1e-5f0b-8c3a-{gi:012x}", "memory_total": total,
        "memory_used": sum(u for _, u in procs) + (GIB // 2 if procs else 0),
        "unsupported": ["nvmlDeviceGetUtilizationRates"],
        "processes": [{"pid": p, "used_memory": u} for p, u in procs],
    }  # fmt: skip


H100 = {
    "name": "NVIDIA H100 80GB HBM3", "memory_total": 80 * GIB, "memory_reserved": GIB // 2,
    "temperature_c": 58, "power_w": 402.0, "power_limit_w": 700, "clock_sm_mhz": 1755,
    "clock_mem_mhz": 2619, "unsupported": ["nvmlDeviceGetFanSpeed"],
}  # fmt: skip
NODE = {
    "gpus": [
        {**H100, "uuid": "GPU-5131a2c4-0000-4000-8000-00000000a001",
         "memory_used": 75 * GIB, "utilization_gpu": 83, "utilization_memory": 61,
         "processes": [{"pid": 1201, "used_memory": 58 * GIB},
                       {"pid": 1377, "used_memory": 7 * GIB},
                       {"pid": 1502, "used_memory": 5 * GIB},
                       {"pid": HIDDEN, "used_memory": 3 * GIB}]},
        {**H100, "uuid": "GPU-5131a2c4-0001-4000-8000-00000000a002",
         "memory_used": 44 * GIB, "processes": [],
         "unsupported": ["nvmlDeviceGetFanSpeed", "nvmlDeviceGetUtilizationRates"],
         "mig": [_mig(1, "4g.40gb", 40 * GIB, [(2210, 36 * GIB)]),
                 _mig(2, "2g.20gb", 20 * GIB, [(2304, 6 * GIB)]),
                 _mig(3, "1g.10gb", 10 * GIB, [])]},
    ]
}  # fmt: skip


def node_reading() -> GpuReading:
    return NvmlReader(FakeNvml(NODE), processes=FixedTable()).read()  # type: ignore[arg-type]


def test_the_reading_behind_the_pictures() -> None:
    """What the pictures show, said in numbers: each process's container and instance."""
    whole, mig = node_reading().gpus
    labels = [p.container.label if p.container else None for p in whole.processes]
    assert labels == ["vllm", "embed", "notebook-0/jupyter", None]
    assert whole.processes[-1].visible is False and whole.mig_mode is False
    assert [m.profile for m in mig.mig] == ["4g.40gb", "2g.20gb", "1g.10gb"]
    assert [(p.pid, p.gpu_instance_id) for p in mig.processes] == [(2210, 1), (2304, 2)]
    assert mig.processes[0].container is not None
    assert mig.processes[0].container.label == "llm-1/7b2e6f01a9c8"


def _app():  # type: ignore[no-untyped-def]
    sc = scenario.build(seconds=20)
    sc.monitor.apply_gpus(node_reading())
    return scenario.app_for(sc)


@pytest.mark.parametrize("size", [(160, 48), (80, 24)])
def test_gpu_screen(snap_compare, size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]
    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        await _paint(pilot)
        await pilot.press("g")
        await pilot.pause()

    assert snap_compare(_app(), terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", [(160, 48), (80, 24)])
def test_gpu_panel_split_by_container(snap_compare, size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(_app(), terminal_size=size, run_before=_paint)
